package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/status"
)

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

// CheckpointStatus returns the checkpoint_status tool; report supplies the
// server's state at call time.
func CheckpointStatus(report func(ctx context.Context) status.Report) Tool {
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
			st := report(ctx)
			return Result{Text: st.Text(), Structured: st}, nil
		},
	}
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
