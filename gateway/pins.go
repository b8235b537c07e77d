package gateway

// What toolgate serves of each listing of a downstream server. Every
// listing (the start-up one, each later start of the server, each re-list
// a notifications/tools/list_changed of the server asks for) is judged
// tool by tool: the definition's text (registry.CheckDefinitionText), its
// schemas, and its pin (registry.Pins): a pinned tool is served only while its
// definition's digest is the pinned one; an unpinned one is withheld when
// the entry says pinned = true (or serve --require-pins), else served with
// a warning and held, for the life of the process, to the definition first
// served. A tool whose verdict changes is added to or withdrawn from
// toolgate's tools/list at once (sessions are sent
// notifications/tools/list_changed); a call already running finishes.
// The digests are computed when a listing is read, never per call.

import (
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/status"
)

// Kinds of withheld tools, as a call of one that is still reached (it
// began before the tool was withdrawn) records them in its audit record's
// refused.
const (
	refusedNotOffered = "not offered"
	refusedTool       = "refused tool"
	refusedText       = "hidden text"
	refusedPin        = "pin"
)

// verdict is what toolgate does with one enabled tool after a listing.
type verdict struct {
	serve bool
	tool  mcp.Tool // the definition served, when serve
	// refused is the kind of a withheld tool (refusedNotOffered, ...),
	// reason why it is withheld, or the warning a tool served without a
	// pin carries; diff, for a drift, the unified diff of its definition.
	refused, reason, diff string
	// pin is how the listed definition compared with its pin ("" when it
	// was not compared: not offered, or refused before).
	pin registry.PinState
	// digest is the listed definition's, pinned the pin's.
	digest, pinned string
	// unverified: served from its pin while the server has not been
	// listed.
	unverified bool
}

// key is what, changing, makes a verdict worth a log line and an audit
// record.
func (v verdict) key() string {
	return fmt.Sprintf("%v|%s|%s|%s|%s", v.serve, v.pin, v.refused, v.digest, v.reason)
}

// toolState is one enabled tool: the verdict of the last listing, and the
// definition first served without a pin (what later listings are held
// to).
type toolState struct {
	v                 verdict
	reference         []byte
	referenceDigest   string
	nameIssue         string // the client-name problem (logged once)
	nameRefused, seen bool
}

// requirePin reports whether the server's tools are served only with a
// pin.
func (d *Server) requirePin() bool { return d.srv.RequiresPin(d.deps.Options.RequirePins) }

// pins are the registry's pins (nil: none).
func (d *Server) pins() *registry.Pins {
	if r := d.deps.Options.Registry; r != nil {
		return r.Pins
	}
	return nil
}

// examine is what a listing says of one enabled tool before any pin: the
// listed tool, and the definition toolgate would serve; or why it cannot
// be served at all (refused is its kind).
func (d *Server) examine(tool string, l *listing) (rt remoteTool, t mcp.Tool, refused, reason string) {
	if why, ok := l.refused[tool]; ok {
		return rt, t, refusedTool, why
	}
	rt, ok := l.tools[tool]
	if !ok {
		return rt, t, refusedNotOffered, "not offered by the downstream server"
	}
	if err := registry.CheckDefinitionText(rt.canonical); err != nil {
		return rt, t, refusedText, "its definition holds text a reviewer cannot see: " + err.Error()
	}
	t, err := d.servedTool(rt, "")
	if err != nil {
		return rt, t, refusedTool, err.Error()
	}
	return rt, t, "", ""
}

// judge is the verdict of a listing on one enabled tool, its state st
// (whose reference it sets when it serves an unpinned definition first).
func (d *Server) judge(st *toolState, tool string, l *listing) verdict {
	rt, t, refused, reason := d.examine(tool, l)
	v := verdict{refused: refused, reason: reason, digest: rt.digest}
	if refused != "" {
		return v
	}
	check := d.pins().Check(d.srv.ID, tool, rt.canonical, rt.digest)
	v.pin, v.pinned = check.State, check.Pin
	switch {
	case check.State == registry.PinMatch:
		v.serve, v.tool = true, t
	case check.State == registry.PinDrift:
		v.refused, v.diff = refusedPin, d.redact(check.Diff)
		v.reason = fmt.Sprintf("its definition (sha256 %s) differs from its pin (sha256 %s): withheld until the server lists the pinned definition again, or `toolgate registry pin %s` approves this one",
			rt.digest, check.Pin, d.srv.ID)
	case d.requirePin():
		v.refused = refusedPin
		v.reason = fmt.Sprintf("it has no pin (%s): `toolgate registry pin %s` pins it", d.srv.UnpinnedPolicy(d.deps.Options.RequirePins), d.srv.ID)
	case st.reference != nil && st.referenceDigest != rt.digest:
		v.refused = refusedPin
		v.diff = d.redact(registry.DefinitionDiff("served "+tool+" (sha256 "+st.referenceDigest[:12]+")", st.reference,
			"listed "+tool+" (sha256 "+rt.digest[:12]+")", rt.canonical))
		v.reason = fmt.Sprintf("it has no pin, and its definition (sha256 %s) is not the one toolgate first served (sha256 %s) since it started: withheld until the server lists that one again, or toolgate restarts",
			rt.digest, st.referenceDigest)
	default:
		v.serve, v.tool = true, t
		if d.pins() != nil { // without a pins file, no tool is pinned: nothing to warn of
			v.reason = fmt.Sprintf("it has no pin: served with a warning (pinned = true, or serve --require-pins, would withhold it); `toolgate registry pin %s` pins it", d.srv.ID)
		}
		if st.reference == nil {
			st.reference, st.referenceDigest = rt.canonical, rt.digest
		}
	}
	return v
}

// unlisted is the verdict on an enabled tool of a server that has not
// been listed (it failed to start, or never runs here): its pinned
// definition when it has a pin (checked when the server is listed), else
// an open schema, unless a pin is required.
func (d *Server) unlisted(tool string) verdict {
	name := d.srv.ServedName(tool)
	if pin, ok := d.pins().Lookup(d.srv.ID, tool); ok {
		var rt remoteTool
		if err := json.Unmarshal(pin.Definition, &rt); err == nil {
			note := "Not listed at start-up (" + d.whyUnlisted() + "): described as pinned; the server's own definition is checked against the pin when it starts."
			if t, err := d.servedTool(rt, note); err == nil {
				return verdict{serve: true, tool: t, pin: registry.PinMatch, digest: pin.SHA256, pinned: pin.SHA256, unverified: true}
			}
		}
	}
	if d.requirePin() {
		return verdict{refused: refusedPin, reason: fmt.Sprintf("it has no pin (%s)", d.srv.UnpinnedPolicy(d.deps.Options.RequirePins))}
	}
	t := mcp.NewToolWithRawSchema(name, d.describe(tool, "", "Not listed at start-up ("+d.whyUnlisted()+"): the arguments are passed as given."), openSchema)
	t.Annotations = d.annotations(tool, mcp.ToolAnnotation{})
	return verdict{serve: true, tool: t}
}

// whyUnlisted says why the server has not been listed.
func (d *Server) whyUnlisted() string {
	if d.unavailable != nil {
		return "unavailable: " + d.unavailable.Error()
	}
	if d.listErr != nil {
		return d.listErr.Error()
	}
	return "not started"
}

// apply judges a listing (nil: the server is not listed) and returns what
// changes in what toolgate serves: the entries to serve (new, or with a
// changed definition) and the served names to withdraw. It logs each
// verdict that changed, and writes the audit record of each pin check
// that did (kind pin). start is the start of the server that listed it.
// Call it with listMu held.
func (d *Server) apply(l *listing, start int) (put []Entry, drop []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l != nil {
		d.listed = true
	}
	for _, tool := range d.srv.EnabledTools {
		st := d.tools[tool]
		name := d.srv.ServedName(tool)
		if !st.seen {
			st.seen = true
			st.nameIssue, st.nameRefused = registry.ClientNameIssue(name)
			if st.nameRefused {
				d.log.WithField("tool", tool).Error(st.nameIssue)
			} else if st.nameIssue != "" {
				d.log.WithField("tool", tool).Warn(st.nameIssue)
			}
		}
		if st.nameRefused {
			continue
		}
		var v verdict
		if l == nil {
			v = d.unlisted(tool)
		} else {
			v = d.judge(st, tool, l)
		}
		old := st.v
		st.v = v
		switch {
		case v.serve && (!old.serve || !sameTool(old.tool, v.tool)):
			put = append(put, Entry{v.tool, d.handler(tool), status.Tool{Name: name, Kind: status.KindDownstream, Backend: d.backend}})
		case !v.serve && old.serve:
			drop = append(drop, name)
		}
		if v.key() != old.key() {
			d.report(tool, start, old, v)
		}
	}
	return put, drop
}

// report logs a tool's new verdict and, for a pin check or a definition
// refused for its text, writes its audit record.
func (d *Server) report(tool string, start int, old, v verdict) {
	e := d.log.WithFields(logrus.Fields{"tool": tool, "start": start})
	if v.digest != "" {
		e = e.WithField("sha256", v.digest)
	}
	switch {
	case v.serve && v.pin == registry.PinNone && v.reason != "":
		e.WithField("reason", v.reason).Warn("downstream tool served without a pin")
	case v.serve && old.refused == refusedPin || v.serve && old.refused == refusedText:
		e.Warn("downstream tool served again: it lists the definition toolgate may serve")
	case v.serve:
		return
	case v.refused == refusedNotOffered:
		e.Warn("enabled tool not offered by the downstream server: not served")
	case v.diff != "":
		e.WithFields(logrus.Fields{"reason": v.reason, "diff": v.diff}).Error("downstream tool withheld: its definition drifted")
	default:
		e.WithField("reason", v.reason).Error("downstream tool not served")
	}
	restored := v.serve && (old.refused == refusedPin || old.refused == refusedText)
	unpinned := v.pin == registry.PinNone && v.reason != "" // with a pins file
	if v.pin != registry.PinDrift && !unpinned && v.refused != refusedText && v.refused != refusedPin && !restored {
		return
	}
	decision, reason := "withheld", v.reason
	if v.serve {
		decision = "served"
	}
	if restored && reason == "" {
		reason = "it lists its pinned definition again"
		if v.pin == registry.PinNone {
			reason = "it lists the definition toolgate first served again"
		}
	}
	d.deps.Pin(audit.Pin{
		Tool: d.srv.ServedName(tool), Server: d.srv.ID, Transport: string(d.srv.Transport), Start: start,
		Decision: decision, Pin: string(v.pin), Reason: reason, SHA256: v.digest, Pinned: v.pinned, Diff: v.diff,
	})
}

// sameTool reports whether two served definitions are the same.
func sameTool(a, b mcp.Tool) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && string(ja) == string(jb)
}

// servable says whether a call of tool may go on: served now, or why not
// (refused is its kind, for the audit record).
func (d *Server) servable(tool string) (refused, reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.tools[tool]
	switch {
	case !ok:
		return refusedNotOffered, "it is not enabled"
	case st.v.serve:
		return "", ""
	}
	return st.v.refused, st.v.reason
}

// Status is the server's part of checkpoint_status now.
func (d *Server) Status() status.Downstream {
	st := status.Downstream{
		ID: d.srv.ID, Transport: string(d.srv.Transport), Sandbox: d.sandboxState(), State: status.DownstreamListed,
		Served: []string{}, Pinned: d.srv.Pinned,
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.unavailable != nil:
		st.State, st.Reason = status.DownstreamUnavailable, d.unavailable.Error()
	case !d.listed:
		st.State, st.Reason = status.DownstreamFailed, d.whyUnlisted()
	}
	for _, tool := range d.srv.EnabledTools {
		v := d.tools[tool].v
		switch {
		case v.serve:
			st.Served = append(st.Served, d.srv.ServedName(tool))
			if v.pin == registry.PinNone && d.pins() != nil {
				st.Unpinned = append(st.Unpinned, tool)
			}
		default:
			st.NotServed = append(st.NotServed, tool)
			if v.refused != "" && v.refused != refusedNotOffered {
				st.Refused = append(st.Refused, status.ToolRefusal{Tool: tool, Reason: v.reason, Diff: v.diff})
			}
		}
	}
	return st
}
