package server

// What toolgate serves of a downstream server, and under which name: the
// served-name collisions that disable the registry, the enabled tools it
// registers with their own schemas (or an open one), the description and
// annotations it gives them, and the listed tools it refuses.

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/status"
)

// openSchema is the input schema of a tool whose server could not be
// listed: the downstream server validates the arguments itself.
var openSchema = json.RawMessage(`{"type":"object"}`)

// collisions applies conf.Collisions to the names this server serves
// already (a registry loaded without RegistryOptions.Taken, as in tests,
// is held to the same rule).
func (s *Server) collisions(r *conf.Registry) []error {
	s.mu.RLock()
	taken := conf.TakenNames(nil, s.opts.Conf)
	for name := range s.order {
		if _, ok := taken[name]; !ok {
			taken[name] = "the built-in tool"
		}
	}
	s.mu.RUnlock()
	return conf.Collisions(r.Servers, taken)
}

// register returns the server's tools to serve, and its status.
func (d *downstream) register() ([]entry, status.Downstream) {
	var entries []entry
	st := status.Downstream{ID: d.srv.ID, Transport: string(d.srv.Transport), Sandbox: d.sandboxState(), State: status.DownstreamListed, Served: []string{}}
	switch {
	case d.unavailable != nil:
		st.State, st.Reason = status.DownstreamUnavailable, d.unavailable.Error()
		d.log.WithError(d.unavailable).Error("downstream server unavailable: its tools answer isError; it never runs unsandboxed")
	case d.offered == nil:
		st.State, st.Reason = status.DownstreamFailed, d.listErr.Error()
	}
	for _, tool := range d.srv.EnabledTools {
		name := d.srv.ServedName(tool)
		if problem, refused := conf.ClientNameIssue(name); refused {
			st.NotServed = append(st.NotServed, tool)
			d.log.WithField("tool", tool).Error(problem)
			continue
		} else if problem != "" {
			d.log.WithField("tool", tool).Warn(problem)
		}
		var t mcp.Tool
		if d.offered == nil {
			t = mcp.NewToolWithRawSchema(name, d.describe(tool, ""), openSchema)
			t.Annotations = approvalAnnotations(d.srv.Approval(tool), mcp.ToolAnnotation{})
		} else {
			if why, ok := d.refused[tool]; ok {
				st.NotServed = append(st.NotServed, tool)
				st.Refused = append(st.Refused, status.ToolRefusal{Tool: tool, Reason: why})
				d.log.WithFields(logrus.Fields{"tool": tool, "reason": why}).Error("downstream tool not served")
				continue
			}
			rtool, ok := d.offered[tool]
			if !ok {
				st.NotServed = append(st.NotServed, tool)
				d.log.WithField("tool", tool).Warn("enabled tool not offered by the downstream server: not served")
				continue
			}
			var err error
			if t, err = d.servedTool(rtool); err != nil {
				st.NotServed = append(st.NotServed, tool)
				d.log.WithField("tool", tool).WithError(err).Error("downstream tool not served")
				continue
			}
		}
		entries = append(entries, entry{t, d.handler(tool), status.Tool{Name: name, Kind: "downstream", Backend: d.backend}})
		st.Served = append(st.Served, name)
	}
	return entries, st
}

// servedTool is how toolgate serves a listed downstream tool: the served
// name, the downstream schemas unchanged, the description with its origin,
// and the annotations of the operator's approval mode.
func (d *downstream) servedTool(r remoteTool) (mcp.Tool, error) {
	in := r.InputSchema
	if len(in) == 0 || string(in) == "null" {
		in = openSchema
	}
	if err := checkObjectSchema(in); err != nil {
		return mcp.Tool{}, fmt.Errorf("inputSchema: %w", err)
	}
	t := mcp.NewToolWithRawSchema(d.srv.ServedName(r.Name), d.describe(r.Name, r.Description), in)
	t.Title = r.Title
	if len(r.OutputSchema) > 0 && string(r.OutputSchema) != "null" {
		if err := checkObjectSchema(r.OutputSchema); err != nil {
			return mcp.Tool{}, fmt.Errorf("outputSchema: %w", err)
		}
		t.RawOutputSchema = r.OutputSchema
	}
	t.Annotations = approvalAnnotations(d.srv.Approval(r.Name), r.Annotations)
	if err := mcp.ValidateParamHeaderAnnotations(&t); err != nil {
		return mcp.Tool{}, err
	}
	return t, nil
}

// checkObjectSchema accepts a JSON object whose "type", if any, is
// "object", as MCP requires of tool schemas.
func checkObjectSchema(b json.RawMessage) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return errors.New("not a JSON object")
	}
	if typ, ok := m["type"]; ok && string(typ) != `"object"` {
		return fmt.Errorf("type %s, want \"object\"", typ)
	}
	return nil
}

// describe is a downstream tool's description: its own, then where it comes
// from and the operator's approval mode.
func (d *downstream) describe(tool, own string) string {
	origin := fmt.Sprintf("Downstream tool %q of the tool-MCP server %q (%s", tool, d.srv.ID, d.srv.Transport)
	if d.srv.Transport == conf.TransportStdio {
		origin += ", sandbox " + d.sandboxState()
	}
	origin += fmt.Sprintf("), approval mode %s. Its results are external content.", d.srv.Approval(tool))
	switch {
	case d.unavailable != nil:
		origin += " Unavailable: " + d.unavailable.Error() + "."
	case d.offered == nil:
		origin += " Not listed at start-up (" + d.listErr.Error() + "): the arguments are passed as given."
	}
	if own == "" {
		return origin
	}
	return own + "\n\n" + origin
}

// approvalAnnotations derives a served tool's annotations from the
// operator's approval mode: the hints MCP clients act on when deciding to
// ask before a call. They state the operator's policy, not the server's
// claims; the server's title, idempotentHint and openWorldHint are kept.
//
//   - auto: readOnlyHint true, destructiveHint false: no client asks.
//   - writes: as auto when the server declares the tool read-only
//     (readOnlyHint true), else as prompt.
//   - prompt: readOnlyHint false, destructiveHint true: clients ask.
//   - approve: as prompt, and idempotentHint false, so that a client does
//     not take one approval for the next call.
func approvalAnnotations(mode conf.ApprovalMode, own mcp.ToolAnnotation) mcp.ToolAnnotation {
	a := mcp.ToolAnnotation{Title: own.Title, IdempotentHint: own.IdempotentHint, OpenWorldHint: own.OpenWorldHint}
	confirm := true
	switch mode {
	case conf.ApprovalAuto:
		confirm = false
	case conf.ApprovalWrites:
		confirm = own.ReadOnlyHint == nil || !*own.ReadOnlyHint
	}
	a.ReadOnlyHint = mcp.ToBoolPtr(!confirm)
	a.DestructiveHint = mcp.ToBoolPtr(confirm)
	if mode == conf.ApprovalApprove {
		a.IdempotentHint = mcp.ToBoolPtr(false)
	}
	return a
}

// offers reports whether the server listed tool.
func (d *downstream) offers(tool string) (remoteTool, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.offered[tool]
	return t, ok
}

// refusal says why a tool the server listed is not served, if it is not.
func (d *downstream) refusal(tool string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	why, ok := d.refused[tool]
	return why, ok
}
