package gateway

// What toolgate serves of a downstream server, and under which name: the
// served-name collisions that disable the registry, the registration of
// its tools and the later changes to what is served, the description and
// annotations it gives them.

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/conf/registry"
)

// openSchema is the input schema of a tool whose server could not be
// listed: the downstream server validates the arguments itself.
var openSchema = json.RawMessage(`{"type":"object"}`)

// Register serves the server's tools as its start-up listing (or, not
// listed, its pins) says, and fills in its status; from then on each
// listing changes what is served (pins.go). With --eager it watches the
// start-up connection.
func (d *Server) Register() {
	d.register()
	if c := d.live(); c != nil { // --eager: the start-up connection
		go d.watch(c)
	}
}

func (d *Server) register() {
	if d.unavailable != nil {
		d.log.WithError(d.unavailable).Error("downstream server unavailable: its tools answer isError; it never runs unsandboxed")
	}
	d.listMu.Lock()
	defer d.listMu.Unlock()
	put, _ := d.apply(d.first, 1)
	d.mu.Lock()
	d.first = nil
	d.mu.Unlock()
	d.deps.Update(put, nil)
	d.deps.SetStatus(d.Status())
}

// relisted applies a later listing of the server (its start number n):
// what toolgate serves of it changes at once.
func (d *Server) relisted(l *listing, n int) {
	d.listMu.Lock()
	defer d.listMu.Unlock()
	put, drop := d.apply(l, n)
	d.deps.Update(put, drop)
	d.deps.SetStatus(d.Status())
}

// servedTool is how toolgate serves a listed downstream tool: the served
// name, the downstream schemas unchanged, the description with its origin
// (and note, when not ""), and the annotations of the operator's approval
// mode and of what toolgate knows of the server.
func (d *Server) servedTool(r remoteTool, note string) (mcp.Tool, error) {
	in := r.InputSchema
	if len(in) == 0 || string(in) == "null" {
		in = openSchema
	}
	if err := checkObjectSchema(in); err != nil {
		return mcp.Tool{}, fmt.Errorf("inputSchema: %w", err)
	}
	if c := claims(d.srv.Approval(r.Name), r.Annotations); c != "" {
		note = strings.TrimPrefix(note+"\n"+c, "\n")
	}
	t := mcp.NewToolWithRawSchema(d.srv.ServedName(r.Name), d.describe(r.Name, r.Description, note), in)
	t.Title = r.Title
	if len(r.OutputSchema) > 0 && string(r.OutputSchema) != "null" {
		if err := checkObjectSchema(r.OutputSchema); err != nil {
			return mcp.Tool{}, fmt.Errorf("outputSchema: %w", err)
		}
		t.RawOutputSchema = r.OutputSchema
	}
	t.Annotations = d.annotations(r.Name, r.Annotations)
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

// describe is a downstream tool's description: its own, then where it
// comes from and the operator's approval mode, then note.
func (d *Server) describe(tool, own, note string) string {
	origin := fmt.Sprintf("Downstream tool %q of the tool-MCP server %q (%s", tool, d.srv.ID, d.srv.Transport)
	if d.srv.Transport == registry.TransportStdio {
		origin += ", sandbox " + d.sandboxState()
	}
	origin += fmt.Sprintf("), approval mode %s. Its results are external content.", d.srv.Approval(tool))
	if d.unavailable != nil {
		origin += " Unavailable: " + d.unavailable.Error() + "."
	}
	if note != "" {
		origin += "\n" + note
	}
	if own == "" {
		return origin
	}
	return own + "\n\n" + origin
}

// claims is the line a served description ends with when the server's
// own annotations claim readOnlyHint or destructiveHint: toolgate does
// not check them, and its served annotations follow the approval mode
// (which, in mode writes, acts on the server's readOnlyHint: true).
func claims(mode registry.ApprovalMode, own mcp.ToolAnnotation) string {
	var parts []string
	if own.ReadOnlyHint != nil {
		parts = append(parts, fmt.Sprintf("readOnlyHint %v", *own.ReadOnlyHint))
	}
	if own.DestructiveHint != nil {
		parts = append(parts, fmt.Sprintf("destructiveHint %v", *own.DestructiveHint))
	}
	if len(parts) == 0 {
		return ""
	}
	what := parts[0] + " is the server's claim"
	if len(parts) == 2 {
		what = parts[0] + " and " + parts[1] + " are the server's claims"
	}
	use := "the annotations toolgate serves follow approval mode " + string(mode)
	if mode == registry.ApprovalWrites && own.ReadOnlyHint != nil && *own.ReadOnlyHint {
		use = "approval mode writes serves the tool as read-only because of it"
	}
	return "(" + what + ", not checked by toolgate; " + use + ".)"
}

// annotations are a served tool's annotations: the approval mode's
// (approvalAnnotations), and openWorldHint true when toolgate lets the
// server reach a network (network = true, allowed_hosts, or sandbox =
// false: the host's), whatever the server says.
func (d *Server) annotations(tool string, own mcp.ToolAnnotation) mcp.ToolAnnotation {
	a := approvalAnnotations(d.srv.Approval(tool), own)
	if d.srv.Transport == registry.TransportStdio && (d.srv.Network || len(d.srv.AllowedHosts) > 0 || !d.srv.Sandbox) {
		a.OpenWorldHint = new(true)
	}
	return a
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
func approvalAnnotations(mode registry.ApprovalMode, own mcp.ToolAnnotation) mcp.ToolAnnotation {
	a := mcp.ToolAnnotation{Title: own.Title, IdempotentHint: own.IdempotentHint, OpenWorldHint: own.OpenWorldHint}
	confirm := true
	switch mode {
	case registry.ApprovalAuto:
		confirm = false
	case registry.ApprovalWrites:
		confirm = own.ReadOnlyHint == nil || !*own.ReadOnlyHint
	}
	a.ReadOnlyHint = new(!confirm)
	a.DestructiveHint = new(confirm)
	if mode == registry.ApprovalApprove {
		a.IdempotentHint = new(false)
	}
	return a
}
