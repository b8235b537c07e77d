// Package status is the model of what toolgate reports about itself: the
// tools.conf load outcome, the sandbox backend's state, the tools served
// and the tool-MCP registry's servers. The server fills it in, the
// checkpoint_status built-in returns it (as structuredContent, and as
// Text), and `toolgate check` prints its conf part. Its JSON is what
// clients read: a field's key never changes. It imports conf and
// runtime only, to summarise a loaded tools.conf and to carry the
// sandbox pool's own report.
package status

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/conf"
	rt "github.com/toolgate/toolgate/runtime"
)

// Report is what checkpoint_status reports, and what `toolgate check`
// prints of the conf and the tools.
type Report struct {
	Version  string  `json:"version"`
	Protocol string  `json:"protocol"`
	Conf     Conf    `json:"conf"`
	Sandbox  Sandbox `json:"sandbox"`
	Tools    []Tool  `json:"tools"`
	// Registry is the tool-MCP registry of downstream servers; nil when
	// serve was not given one.
	Registry *Registry `json:"registry,omitempty"`
	// Reload is the last reload (SIGHUP or a watched file's change);
	// nil before the first.
	Reload *Reload `json:"reload,omitempty"`
}

// Reload is the outcome of one reload of the configuration.
type Reload struct {
	// Generation counts the reloads since start (the first is 1).
	Generation int `json:"generation"`
	// At is when it was applied (RFC 3339, UTC).
	At string `json:"at"`
	// Trigger is what started it: "sighup" or "watch".
	Trigger string `json:"trigger"`
	// Changed are the files whose contents changed (or, after a SIGHUP,
	// every file re-read): "tools.conf", "tokens", "policy".
	Changed []string `json:"changed"`
	// Refused are the files refused, and what was kept or disabled.
	Refused []Refusal `json:"refused,omitempty"`
	// Added, Removed and Replaced are the tools served since, withdrawn,
	// and served with a new definition.
	Added    []string `json:"added,omitempty"`
	Removed  []string `json:"removed,omitempty"`
	Replaced []string `json:"replaced,omitempty"`
}

// Refusal is one file a reload refused.
type Refusal struct {
	File   string `json:"file"`   // "tools.conf", "tokens", "policy"
	Path   string `json:"path"`   // the file's path
	Reason string `json:"reason"` // why
	Effect string `json:"effect"` // what is served instead
}

// Registry is the tool-MCP registry's load outcome and each
// downstream server's state. It names variables, never their values.
type Registry struct {
	Dir     string   `json:"dir"`
	State   string   `json:"state"`             // absent, loaded, refused
	Listing bool     `json:"listing,omitempty"` // its servers' tools are being listed
	Reason  string   `json:"reason,omitempty"`
	Errors  []string `json:"errors,omitempty"`
	// Pins is the pins file of the approved tool definitions (registry
	// pin), when there is one; RequirePins is serve --require-pins.
	Pins        string       `json:"pins,omitempty"`
	RequirePins bool         `json:"require_pins,omitempty"`
	Servers     []Downstream `json:"servers,omitempty"`
}

// Downstream is one downstream server.
type Downstream struct {
	ID        string `json:"id"`
	Transport string `json:"transport"`
	Sandbox   string `json:"sandbox"`
	State     string `json:"state"` // DownstreamListed, DownstreamFailed, DownstreamUnavailable
	Reason    string `json:"reason,omitempty"`
	// Pinned is the entry's pinned = true: a tool without a pin is not
	// served.
	Pinned    bool     `json:"pinned,omitempty"`
	Served    []string `json:"served"`
	NotServed []string `json:"not_served,omitempty"` // enabled but not served
	// Unpinned are the served tools that have no pin (served with a
	// warning).
	Unpinned []string `json:"unpinned,omitempty"`
	// Refused are the enabled tools the server listed that are not served,
	// with why: a definition over the size cap, a name listed twice, text
	// a reviewer cannot see, a definition that drifted from its pin (with
	// the diff), no pin where one is required.
	Refused []ToolRefusal `json:"refused,omitempty"`
}

// ToolRefusal is an enabled downstream tool that is not served, and why.
type ToolRefusal struct {
	Tool   string `json:"tool"`
	Reason string `json:"reason"`
	// Diff is, for a definition that drifted, the unified diff from the
	// definition approved (its pin, or the one first served) to the one
	// listed.
	Diff string `json:"diff,omitempty"`
}

// Conf is the tools.conf load outcome.
type Conf struct {
	Path   string      `json:"path"`
	SHA256 string      `json:"sha256,omitempty"`
	State  string      `json:"state"`
	Reason string      `json:"reason,omitempty"`
	Errors []ConfError `json:"errors,omitempty"`
}

// Problems renders why the conf is not loaded, if it is not: the reason,
// each refused line with its text, and what refusal disables. check and
// checkpoint_status both show them so.
func (c Conf) Problems() string {
	var b strings.Builder
	if c.Reason != "" {
		fmt.Fprintf(&b, "  %s\n", c.Reason)
	}
	for _, e := range c.Errors {
		if e.Line > 0 {
			fmt.Fprintf(&b, "  refused line %d: %s: %s\n    | %s\n", e.Line, e.Field, e.Reason, e.Text)
		} else {
			fmt.Fprintf(&b, "  refused: %s: %s\n", e.Field, e.Reason)
		}
	}
	if c.State == string(conf.StateRefused) {
		fmt.Fprintf(&b, "  refused: %s\n", conf.RefusedEffect)
	}
	return b.String()
}

// ConfError is one refused line.
type ConfError struct {
	Line   int    `json:"line"`
	Text   string `json:"text,omitempty"`
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason"`
}

// Sandbox says which backend runs test-class tools (and the
// built-ins' helpers) and whether it can: its self-test runs beside
// serving, so State is pending until it has answered, then ready or
// unavailable (with the Reason).
type Sandbox struct {
	Backend   string `json:"backend"`
	State     string `json:"state"`
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	// Pool is what the pool of sandboxes prepared ahead of their calls
	// holds (the pool's own report, rt.Pool.Status); nil when it is off
	// (--sandbox-pool 0) or the backend is not ready.
	Pool *rt.PoolStatus `json:"pool,omitempty"`
}

// Kind is where a served tool comes from.
type Kind string

// The kinds of a served tool (Tool.Kind, and an audit record's kind).
const (
	KindBuiltin    Kind = "builtin"    // a built-in of the server, checkpoint_status included
	KindExternal   Kind = "external"   // a tools.conf line
	KindDownstream Kind = "downstream" // a downstream MCP server's, through the gateway
)

// Tool is one served tool.
type Tool struct {
	Name    string `json:"name"`
	Kind    Kind   `json:"kind"`
	Class   string `json:"class,omitempty"`
	Backend string `json:"backend"`
	// Egress are the destinations the tool's sandbox may reach through
	// the egress proxy; none means no network at all (a sandboxed tool)
	// or the host's (a read-class one).
	Egress []string `json:"egress,omitempty"`
}

// The states of a downstream server (Downstream.State).
const (
	DownstreamListed      = "listed"      // listed at start-up: its tools are served with their own schemas
	DownstreamFailed      = "failed"      // not listed at start-up: its tools are served with an open schema
	DownstreamUnavailable = "unavailable" // it never runs here: its tools answer isError
)

// FromConf summarises a loaded tools.conf (any state).
func FromConf(c *conf.Config) Conf {
	cs := Conf{Path: c.Path, SHA256: c.SHA256, State: string(c.State), Reason: c.Reason}
	for _, err := range c.Errors {
		ce := ConfError{Reason: err.Error()}
		if e, ok := err.(*conf.Error); ok { //nolint:errorlint // Errors holds *conf.Error values by contract
			ce = ConfError{Line: e.Line, Text: e.Text, Field: e.Field, Reason: e.Err.Error()}
		}
		cs.Errors = append(cs.Errors, ce)
	}
	return cs
}

// Text renders the report for humans.
func (s Report) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "toolgate %s, protocol %s\n", s.Version, s.Protocol)
	fmt.Fprintf(&b, "tools.conf %s: %s", s.Conf.Path, s.Conf.State)
	if s.Conf.SHA256 != "" {
		fmt.Fprintf(&b, " (sha256 %s)", s.Conf.SHA256)
	}
	b.WriteString("\n")
	b.WriteString(s.Conf.Problems())
	fmt.Fprintf(&b, "sandbox: %s", s.Sandbox.Backend)
	switch {
	case s.Sandbox.Available:
		b.WriteString(" (available)\n")
	case s.Sandbox.State == "pending":
		b.WriteString(" (self-test still running: sandboxed calls wait for it)\n")
	default:
		fmt.Fprintf(&b, " (unavailable: %s)\n", s.Sandbox.Reason)
	}
	if p := s.Sandbox.Pool; p != nil {
		fmt.Fprintf(&b, "  pool: %s\n", p)
		for _, e := range p.Entries {
			fmt.Fprintf(&b, "    %s %s: %d ready, %d preparing", e.Kind, e.Name, e.Ready, e.Preparing)
			if e.LastError != "" {
				fmt.Fprintf(&b, "; last preparation failed: %s", e.LastError)
			}
			b.WriteString("\n")
		}
	}
	if r := s.Registry; r != nil {
		fmt.Fprintf(&b, "tool-mcp registry %s: %s", r.Dir, r.State)
		if r.Listing {
			b.WriteString(" (listing its servers' tools)")
		}
		b.WriteString("\n")
		if r.Reason != "" {
			fmt.Fprintf(&b, "  %s\n", r.Reason)
		}
		for _, e := range r.Errors {
			fmt.Fprintf(&b, "  refused: %s\n", e)
		}
		if r.State == "refused" {
			b.WriteString("  every downstream server is disabled; built-in and tools.conf tools are unaffected\n")
		}
		if r.Pins != "" {
			fmt.Fprintf(&b, "  pins: %s\n", r.Pins)
		}
		if r.RequirePins {
			b.WriteString("  --require-pins: a tool without a pin is not served\n")
		}
		for _, d := range r.Servers {
			fmt.Fprintf(&b, "  %s (%s, sandbox %s): %s, %d served", d.ID, d.Transport, d.Sandbox, d.State, len(d.Served))
			if d.Reason != "" {
				fmt.Fprintf(&b, ": %s", d.Reason)
			}
			b.WriteString("\n")
			for _, t := range d.Unpinned {
				fmt.Fprintf(&b, "    served without a pin: %s\n", t)
			}
			for _, r := range d.Refused {
				fmt.Fprintf(&b, "    not served: %s: %s\n", r.Tool, r.Reason)
				if r.Diff != "" {
					fmt.Fprintf(&b, "      %s\n", strings.ReplaceAll(strings.TrimSuffix(r.Diff, "\n"), "\n", "\n      "))
				}
			}
		}
	}
	s.Reload.write(&b)
	fmt.Fprintf(&b, "tools (%d):\n", len(s.Tools))
	for _, t := range s.Tools {
		fmt.Fprintf(&b, "  %-32s %-10s %-5s %s", t.Name, t.Kind, t.Class, t.Backend)
		if len(t.Egress) > 0 {
			fmt.Fprintf(&b, " egress %s", strings.Join(t.Egress, " "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// write renders the last reload, if any.
func (r *Reload) write(b *strings.Builder) {
	if r == nil {
		return
	}
	fmt.Fprintf(b, "reload %d (%s, %s): changed %s\n", r.Generation, r.Trigger, r.At, strings.Join(r.Changed, " "))
	for _, f := range r.Refused {
		fmt.Fprintf(b, "  refused %s %s: %s; %s\n", f.File, f.Path, f.Reason, f.Effect)
	}
	for _, l := range []struct {
		what  string
		names []string
	}{{"added", r.Added}, {"removed", r.Removed}, {"replaced", r.Replaced}} {
		if len(l.names) > 0 {
			fmt.Fprintf(b, "  %s: %s\n", l.what, strings.Join(l.names, " "))
		}
	}
}
