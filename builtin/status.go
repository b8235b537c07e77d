package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Status is what checkpoint_status reports.
type Status struct {
	Version  string       `json:"version"`
	Protocol string       `json:"protocol"`
	Conf     ConfStatus   `json:"conf"`
	Sandbox  SandboxState `json:"sandbox"`
	Tools    []ToolStatus `json:"tools"`
	// Registry is the tool-MCP registry of downstream servers; nil when
	// serve was not given one.
	Registry *RegistryStatus `json:"registry,omitempty"`
}

// RegistryStatus is the tool-MCP registry's load outcome and each
// downstream server's state. It names variables, never their values.
type RegistryStatus struct {
	Dir     string             `json:"dir"`
	State   string             `json:"state"`             // absent, loaded, refused
	Listing bool               `json:"listing,omitempty"` // its servers' tools are being listed
	Reason  string             `json:"reason,omitempty"`
	Errors  []string           `json:"errors,omitempty"`
	Servers []DownstreamStatus `json:"servers,omitempty"`
}

// DownstreamStatus is one downstream server.
type DownstreamStatus struct {
	ID        string   `json:"id"`
	Transport string   `json:"transport"`
	Sandbox   string   `json:"sandbox"`
	State     string   `json:"state"` // listed, failed, unavailable
	Reason    string   `json:"reason,omitempty"`
	Served    []string `json:"served"`
	NotServed []string `json:"not_served,omitempty"` // enabled but not served
	// Refused are the enabled tools the server listed that are not served,
	// with why (a definition over the size cap, a name listed twice).
	Refused []ToolRefusal `json:"refused,omitempty"`
}

// ToolRefusal is an enabled downstream tool that is not served, and why.
type ToolRefusal struct {
	Tool   string `json:"tool"`
	Reason string `json:"reason"`
}

// ConfStatus is the tools.conf load outcome.
type ConfStatus struct {
	Path   string      `json:"path"`
	SHA256 string      `json:"sha256,omitempty"`
	State  string      `json:"state"`
	Reason string      `json:"reason,omitempty"`
	Errors []ConfError `json:"errors,omitempty"`
}

// ConfError is one refused line.
type ConfError struct {
	Line   int    `json:"line"`
	Text   string `json:"text,omitempty"`
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason"`
}

// SandboxState says which backend runs test-class tools (and the
// built-ins' helpers) and whether it can: its self-test runs beside
// serving, so State is pending until it has answered, then ready or
// unavailable (with the Reason).
type SandboxState struct {
	Backend   string `json:"backend"`
	State     string `json:"state"`
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
}

// ToolStatus is one served tool.
type ToolStatus struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"` // builtin, external, downstream
	Class   string `json:"class,omitempty"`
	Backend string `json:"backend"`
	// Egress are the destinations the tool's sandbox may reach through
	// the egress proxy; none means no network at all (a sandboxed tool)
	// or the host's (a read-class one).
	Egress []string `json:"egress,omitempty"`
}

// NoArgsSchema is the input schema of a tool that takes no arguments: it
// accepts only {} (NoArgs enforces it).
var NoArgsSchema = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)

var statusOutputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "version": {"type": "string"},
    "protocol": {"type": "string"},
    "conf": {"type": "object"},
    "sandbox": {"type": "object"},
    "tools": {"type": "array", "items": {"type": "object"}},
    "registry": {"type": "object"}
  },
  "required": ["version", "protocol", "conf", "sandbox", "tools"]
}`)

// CheckpointStatus returns the checkpoint_status tool; status supplies the
// server's state at call time.
func CheckpointStatus(status func(ctx context.Context) Status) Tool {
	return Tool{
		Name:  "checkpoint_status",
		Group: GroupStatus,
		Description: "Report toolgate's state: version, negotiated MCP protocol, the tools.conf path, " +
			"sha256 and load state (absent, loaded, or refused with the line number and reason), " +
			"the sandbox backend, and every tool served with the backend it uses. Takes no arguments.",
		InputSchema:  NoArgsSchema,
		OutputSchema: statusOutputSchema,
		Handler: func(ctx context.Context, args json.RawMessage) (Result, error) {
			if err := NoArgs(args); err != nil {
				return Errorf("checkpoint_status: %v", err), nil
			}
			st := status(ctx)
			return Result{Text: st.Text(), Structured: st}, nil
		},
	}
}

// Text renders the status for humans.
func (s Status) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "toolgate %s, protocol %s\n", s.Version, s.Protocol)
	fmt.Fprintf(&b, "tools.conf %s: %s", s.Conf.Path, s.Conf.State)
	if s.Conf.SHA256 != "" {
		fmt.Fprintf(&b, " (sha256 %s)", s.Conf.SHA256)
	}
	b.WriteString("\n")
	if s.Conf.Reason != "" {
		fmt.Fprintf(&b, "  %s\n", s.Conf.Reason)
	}
	for _, e := range s.Conf.Errors {
		if e.Line > 0 {
			fmt.Fprintf(&b, "  refused line %d: %s: %s\n    %s\n", e.Line, e.Field, e.Reason, e.Text)
		} else {
			fmt.Fprintf(&b, "  refused: %s: %s\n", e.Field, e.Reason)
		}
	}
	if s.Conf.State == "refused" {
		b.WriteString("  every external tool and expose subtraction is disabled; built-ins stay on\n")
	}
	fmt.Fprintf(&b, "sandbox: %s", s.Sandbox.Backend)
	switch {
	case s.Sandbox.Available:
		b.WriteString(" (available)\n")
	case s.Sandbox.State == "pending":
		b.WriteString(" (self-test still running: sandboxed calls wait for it)\n")
	default:
		fmt.Fprintf(&b, " (unavailable: %s)\n", s.Sandbox.Reason)
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
		for _, d := range r.Servers {
			fmt.Fprintf(&b, "  %s (%s, sandbox %s): %s, %d served", d.ID, d.Transport, d.Sandbox, d.State, len(d.Served))
			if d.Reason != "" {
				fmt.Fprintf(&b, ": %s", d.Reason)
			}
			b.WriteString("\n")
			for _, r := range d.Refused {
				fmt.Fprintf(&b, "    not served: %s: %s\n", r.Tool, r.Reason)
			}
		}
	}
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

// NoArgs accepts only an absent, null or empty-object argument payload.
func NoArgs(args json.RawMessage) error {
	if len(args) == 0 {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return fmt.Errorf("arguments must be an object: %w", err)
	}
	if len(m) > 0 {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		return fmt.Errorf("takes no arguments, got %s", strings.Join(sortedQuoted(keys), ", "))
	}
	return nil
}
