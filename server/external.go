package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/escapes"
	"github.com/toolgate/toolgate/internal/jsonrpc"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/toolcall"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/status"
)

// CallOutput is the structuredContent of an external tool call. It is
// complete on its own: Codex and Claude Code give their model the
// structuredContent instead of the text content when a result has both, so
// Output carries the text content exactly (the combined output, the markers
// and the footer), and IsError says what Codex's function output cannot
// (it has no error flag).
type CallOutput struct {
	IsError      bool   `json:"is_error"`
	ExitCode     int    `json:"exit_code"`
	ElapsedMS    int64  `json:"elapsed_ms"`
	TimedOut     bool   `json:"timed_out"`
	Truncated    bool   `json:"truncated"`
	OutputBytes  int64  `json:"output_bytes"`
	DroppedBytes int64  `json:"dropped_bytes"`
	Limit        string `json:"limit,omitempty"`
	Backend      string `json:"backend"`
	// Egress is a tool with an allowlist's traffic through its proxy.
	Egress *CallEgress `json:"egress,omitempty"`
	// Output is last: a client that shortens a long result keeps its head
	// and its tail, and the tail holds the markers and the footer.
	Output string `json:"output"`
}

// CallEgress is what a call of a tool with an egress allowlist did
// through its proxy.
type CallEgress struct {
	Connections int64  `json:"connections"`
	Bytes       int64  `json:"bytes"`
	Limit       string `json:"limit,omitempty"`
}

var callOutputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "is_error": {"type": "boolean", "description": "the call failed: a non-zero exit, a timeout or a cancellation"},
    "exit_code": {"type": "integer", "description": "exit status, or 128+N when signal N killed the tool"},
    "elapsed_ms": {"type": "integer"},
    "timed_out": {"type": "boolean"},
    "truncated": {"type": "boolean", "description": "output exceeded max-bytes; the rest was dropped"},
    "output_bytes": {"type": "integer", "description": "bytes the tool wrote, kept or dropped"},
    "dropped_bytes": {"type": "integer"},
    "limit": {"type": "string", "enum": ["timeout", "cancelled", "pids", "memory"], "description": "what ended the call early"},
    "backend": {"type": "string"},
    "egress": {"type": "object", "description": "a tool with an egress allowlist: its connections through toolgate's proxy (allowed or refused), the bytes both ways, and the egress cap it hit, if any (the call went on; connections beyond the cap were refused)",
      "properties": {"connections": {"type": "integer"}, "bytes": {"type": "integer"}, "limit": {"type": "string", "enum": ["egress-connections", "egress-bytes"]}},
      "required": ["connections", "bytes"]},
    "output": {"type": "string", "description": "exactly the text content: the combined stdout and stderr as kept, then the markers ([truncated: N bytes dropped], [timeout], [cancelled], [limit: pids|memory|egress-connections|egress-bytes]) and the footer [exit=N elapsed_ms=M]"}
  },
  "required": ["is_error", "exit_code", "elapsed_ms", "timed_out", "truncated", "output_bytes", "dropped_bytes", "backend", "output"]
}`)

// Describe is the description of an external tool: class, sandbox, dir,
// limits and the exact argv.
func Describe(t conf.Tool) string {
	sandbox := "off"
	if t.Sandbox {
		sandbox = "on"
	}
	argv, _ := json.Marshal(t.Argv())
	d := fmt.Sprintf("External %s tool (sandbox %s). Runs %s in %s, timeout %ds, output capped at %d bytes. "+
		"Takes no arguments: the argv is fixed by the operator.",
		t.Class, sandbox, argv, t.Dir, int(t.Timeout/time.Second), t.MaxBytes)
	if len(t.Egress) > 0 {
		d += " Network: only " + strings.Join(t.Egress.Strings(), ", ") + ", through toolgate's egress proxy."
	}
	return d
}

func externalTool(t conf.Tool) mcp.Tool {
	tool := mcp.NewToolWithRawSchema(t.Name, Describe(t), jsonrpc.NoArgsSchema)
	tool.RawOutputSchema = callOutputSchema
	// openWorldHint: a read-class tool runs on the host, with its
	// network; a test-class one has none, unless an egress line lists
	// destinations it reaches.
	tool.Annotations = mcp.ToolAnnotation{
		ReadOnlyHint:  new(true),
		OpenWorldHint: new(t.Class == conf.ClassRead || len(t.Egress) > 0),
	}
	return tool
}

func (s *Server) externalHandler(t conf.Tool) mcpserver.ToolHandlerFunc {
	backend := s.backendName(t)
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		call := jsonrpc.CallInfoFrom(ctx)
		rec := &audit.Call{RequestID: call.ID, Tool: t.Name, Kind: status.KindExternal, Class: t.Class, Backend: backend}
		rec.Annotate(ctx, req)
		refuse := func(reason string, res *mcp.CallToolResult) (*mcp.CallToolResult, error) {
			rec.Refused = reason
			rec.IsError = true
			s.audit(rec, "call")
			return res, nil
		}
		if err := jsonrpc.NoArgs(toolcall.Args(req)); err != nil {
			return refuse("arguments", toolcall.ErrorResult("toolgate: %s %v: callers pass no arguments, ever; what the operator configured is what runs", t.Name, err))
		}
		runner := s.opts.Direct
		if t.Class == conf.ClassTest {
			runner = s.opts.Sandbox
			if state, err := s.opts.Sandbox.State(); state == rt.SandboxUnavailable {
				return refuse("no sandbox", s.noSandbox(t.Name, err))
			}
		}
		queued := call.Arrival
		qspan := telemetry.Queue(ctx, "server", queued)
		release, err := s.acquire(ctx, queued, t.Timeout)
		qspan.End()
		if err != nil {
			rec.QueuedMS = audit.Some(time.Since(queued).Milliseconds())
			if ctx.Err() != nil {
				// notifications/cancelled of a queued call: it never runs
				// and answers nothing (the dispatcher writes no answer).
				rec.Cancelled = true
				return refuse("cancelled while queued", toolcall.ErrorResult("toolgate: %s: %v", t.Name, err))
			}
			return refuse("queue", toolcall.ErrorResult("toolgate: %s: %v", t.Name, err))
		}
		defer release()
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		inv := InvocationOf(t)
		inv.ID, inv.Seen = s.nextID(), new(atomic.Int64)
		rec.Call = inv.ID
		rec.QueuedMS = audit.Some(time.Since(queued).Milliseconds())
		if len(t.Egress) > 0 {
			inv.EgressRecord = egressSpans(ctx, audit.EgressRecorder(s.auditLog, rec))
		}
		if token := progressToken(req); token != nil {
			stop := make(chan struct{})
			defer close(stop)
			go s.reportProgress(ctx, token, inv.Seen, stop)
		}
		res, err := runner.Run(ctx, inv)
		if ctx.Err() != nil {
			// notifications/cancelled (or shutdown): the call is killed and
			// answers nothing (the dispatcher writes no answer).
			rec.Cancelled = true
		}
		if errors.Is(err, rt.ErrSandboxUnavailable) {
			return refuse("no sandbox", s.noSandbox(t.Name, err))
		}
		if err != nil {
			rec.Error = audit.Some(err.Error())
			rec.IsError = true
			s.audit(rec, "call could not run")
			return toolcall.ErrorResult("toolgate: %s could not run: %v", t.Name, err), nil
		}
		ran(rec, res)
		if len(t.Egress) > 0 {
			ranEgress(rec, res.Egress)
		}
		s.audit(rec, "call")
		return renderResult(res, backend, s.keepEscapes[t.Name], len(t.Egress) > 0), nil
	}
}

// InvocationOf is the invocation of a call of external tool t, less what
// only the call has (its ID, its progress counter, the sink of its egress
// records). The call handler runs it, and the pool keeps sandboxes
// prepared for its Template: one value, so that no field of a call can be
// missing from what a prepared sandbox was made for.
func InvocationOf(t conf.Tool) rt.Invocation {
	inv := rt.Invocation{
		Template: rt.Template{
			Name: t.Name,
			Path: t.ExeResolved,
			Argv: t.Argv(),
			Dir:  t.DirResolved,
			Env:  append(slices.Clip(t.Env), rt.EgressNoProxy(t.Egress)...),
		},
		Call: rt.Call{Timeout: t.Timeout, MaxBytes: t.MaxBytes},
	}
	if len(t.Egress) > 0 {
		inv.Egress, inv.Inject = t.Egress, toolcall.Injections(t.Credentials)
		inv.Proxied, inv.Trusted = true, len(inv.Inject) > 0
	}
	return inv
}

// noSandbox is the answer of a test-class call while the sandbox backend
// is unavailable.
func (s *Server) noSandbox(name string, err error) *mcp.CallToolResult {
	return toolcall.ErrorResult("toolgate: %s is a test-class tool and runs only sandboxed, but the %s sandbox backend is unavailable: %v. It is never run unsandboxed; `toolgate doctor` says how to fix the backend.",
		name, s.opts.Sandbox.Name(), err)
}

// acquire takes a slot of --max-concurrent for a call that arrived at
// arrived. A call that would wait longer than its own timeout from its
// arrival answers an error instead, and a cancelled one never takes a
// slot.
func (s *Server) acquire(ctx context.Context, arrived time.Time, timeout time.Duration) (func(), error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("cancelled while queued: %w", ctx.Err())
	}
	select {
	case s.sem <- struct{}{}:
		return func() { <-s.sem }, nil
	default:
	}
	full := func() error {
		return fmt.Errorf("queued for %s, its timeout, behind %d running calls (--max-concurrent) without a free slot; not run",
			time.Since(arrived).Round(time.Millisecond), cap(s.sem))
	}
	wait := time.Until(arrived.Add(timeout))
	if wait <= 0 {
		return nil, full()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s.sem <- struct{}{}:
		if ctx.Err() != nil {
			<-s.sem
			return nil, fmt.Errorf("cancelled while queued: %w", ctx.Err())
		}
		return func() { <-s.sem }, nil
	case <-t.C:
		return nil, full()
	case <-ctx.Done():
		return nil, fmt.Errorf("cancelled while queued: %w", ctx.Err())
	}
}

// Render returns the text content of a call: the combined output, then the
// markers, then the footer [exit=N elapsed_ms=M].
func Render(res rt.Result) string {
	var b strings.Builder
	b.Grow(len(res.Output) + 96)
	b.Write(res.Output)
	if len(res.Output) > 0 && res.Output[len(res.Output)-1] != '\n' {
		b.WriteByte('\n')
	}
	if res.Truncated {
		fmt.Fprintf(&b, "[truncated: %d bytes dropped]\n", res.Dropped)
	}
	switch res.Limit {
	case rt.LimitTimeout:
		b.WriteString("[timeout]\n")
	case rt.LimitCancelled:
		b.WriteString("[cancelled]\n")
	case rt.LimitPids, rt.LimitMemory:
		fmt.Fprintf(&b, "[limit: %s]\n", res.Limit)
	}
	if res.Egress.Limit != "" {
		fmt.Fprintf(&b, "[limit: %s]\n", res.Egress.Limit)
	}
	b.WriteString("[exit=")
	b.WriteString(strconv.Itoa(res.ExitCode))
	b.WriteString(" elapsed_ms=")
	b.WriteString(strconv.FormatInt(res.Elapsed.Milliseconds(), 10))
	b.WriteString("]")
	return b.String()
}

// renderResult is the result of a call: Render's text, its terminal
// control sequences neutralised unless keep (--keep-escapes), as the text
// content and as structuredContent's output.
func renderResult(res rt.Result, backend string, keep, egress bool) *mcp.CallToolResult {
	if !keep {
		if out := escapes.Neutralize(string(res.Output)); len(out) != len(res.Output) || out != string(res.Output) {
			res.Output = []byte(out)
		}
	}
	text := Render(res)
	var eg *CallEgress
	if egress {
		eg = &CallEgress{Connections: res.Egress.Conns, Bytes: res.Egress.Bytes, Limit: res.Egress.Limit}
	}
	out := CallOutput{
		IsError:      res.Failed(),
		ExitCode:     res.ExitCode,
		ElapsedMS:    res.Elapsed.Milliseconds(),
		TimedOut:     res.TimedOut,
		Truncated:    res.Truncated,
		OutputBytes:  res.OutputBytes,
		DroppedBytes: res.Dropped,
		Limit:        string(res.Limit),
		Backend:      backend,
		Egress:       eg,
		Output:       text,
	}
	return toolResult(text, out, res.Failed())
}
