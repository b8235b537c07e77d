package builtin

import (
	"context"
	"encoding/json"

	"github.com/toolgate/toolgate/internal/jsonrpc"
	"github.com/toolgate/toolgate/status"
)

var statusOutputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "version": {"type": "string"},
    "protocol": {"type": "string"},
    "conf": {"type": "object"},
    "sandbox": {"type": "object"},
    "tools": {"type": "array", "items": {"type": "object"}},
    "registry": {"type": "object"},
    "reload": {"type": "object"}
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
		InputSchema:  jsonrpc.NoArgsSchema,
		OutputSchema: statusOutputSchema,
		Handler: func(ctx context.Context, args json.RawMessage) (Result, error) {
			if err := jsonrpc.NoArgs(args); err != nil {
				return Errorf("checkpoint_status: %v", err), nil
			}
			st := report(ctx)
			return Result{Text: st.Text(), Structured: st}, nil
		},
	}
}
