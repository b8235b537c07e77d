package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/jsonrpc"
	"github.com/toolgate/toolgate/internal/mcptest"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/status"
)

// fakeRunner records invocations and answers a fixed result; the server's
// logic, not execution, is under test here (runtime has the real-process
// tests).
type fakeRunner struct {
	mu    sync.Mutex
	calls []rt.Invocation
	res   rt.Result
	err   error
	block chan struct{}
}

func (f *fakeRunner) Run(ctx context.Context, inv rt.Invocation) (rt.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, inv)
	f.mu.Unlock()
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
		}
	}
	return f.res, f.err
}

func (f *fakeRunner) invocations() []rt.Invocation {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]rt.Invocation(nil), f.calls...)
}

func loadConf(t testing.TB, text string) *conf.Config {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	if err := os.WriteFile(exe, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	text = strings.NewReplacer("EXE", exe, "DIR", dir).Replace(text)
	return conf.Parse("tools.conf", []byte(text), conf.Options{Builtins: builtin.Names()})
}

// inProcess is an in-process client of s whose tools/call requests carry
// what ServeStdio's dispatcher puts in each call's context: its id and
// arrival (jsonrpc.CallInfo).
func inProcess(s *Server) *client.Client {
	return client.NewClient(stampedTransport{transport.NewInProcessTransport(s.MCP())})
}

type stampedTransport struct{ *transport.InProcessTransport }

func (t stampedTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	if req.Method == string(mcp.MethodToolsCall) {
		id, _ := json.Marshal(req.ID)
		ctx = jsonrpc.WithCallInfo(ctx, jsonrpc.CallInfo{ID: jsonrpc.CanonicalID(id), Arrival: time.Now()})
	}
	return t.InProcessTransport.SendRequest(ctx, req)
}

func session(t *testing.T, s *Server) *client.Client {
	t.Helper()
	c := inProcess(s)
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = "2025-06-18"
	if _, err := c.Initialize(ctx, req); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func callTool(t *testing.T, c *client.Client, name string, args any) (*mcp.CallToolResult, error) {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.CallTool(ctx, req)
}

func resultText(r *mcp.CallToolResult) string { return mcptest.Text(r) }

func listNames(t *testing.T, c *client.Client) []string {
	t.Helper()
	return mcptest.Names(t, c)
}

func fakeBuiltin(name string) builtin.Tool {
	return builtin.Tool{
		Name: name, Group: builtin.GroupRepo, Description: name,
		InputSchema: json.RawMessage(`{"type":"object"}`),
		Handler: func(context.Context, json.RawMessage) (builtin.Result, error) {
			return builtin.Result{Text: name + " ran"}, nil
		},
	}
}

const twoTools = "tool zeta EXE read 5 100 off DIR -- a b\ntool alpha EXE test 7 200 on DIR --\n"

func TestListOrderAndExpose(t *testing.T) {
	c := loadConf(t, twoTools+"expose repo_chunks off\n")
	s := New(Options{
		Conf: c, Builtins: []builtin.Tool{fakeBuiltin("repo_manifest"), fakeBuiltin("repo_chunks")},
		Direct: &fakeRunner{}, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{}),
	})
	got := strings.Join(listNames(t, session(t, s)), ",")
	// checkpoint_status first, built-ins in their order, externals in conf
	// order (not sorted: zeta before alpha), the exposed-off one absent.
	if want := "checkpoint_status,repo_manifest,zeta,alpha"; got != want {
		t.Errorf("tools/list = %s, want %s", got, want)
	}
}

func TestExternalToolDefinition(t *testing.T) {
	c := loadConf(t, twoTools)
	s := New(Options{Conf: c, Direct: &fakeRunner{}, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{})})
	res, err := session(t, s).ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]mcp.Tool{}
	for _, tl := range res.Tools {
		byName[tl.Name] = tl
	}
	zeta, alpha := byName["zeta"], byName["alpha"]
	for _, want := range []string{"External read tool (sandbox off)", `"a","b"]`, "timeout 5s", "capped at 100 bytes", "Takes no arguments"} {
		if !strings.Contains(zeta.Description, want) {
			t.Errorf("zeta description %q lacks %q", zeta.Description, want)
		}
	}
	if !strings.Contains(alpha.Description, "External test tool (sandbox on)") {
		t.Errorf("alpha description %q", alpha.Description)
	}
	schema, _ := json.Marshal(zeta.InputSchema)
	if !strings.Contains(string(schema), `"additionalProperties":false`) || !strings.Contains(string(schema), `"properties":{}`) {
		t.Errorf("input schema %s must accept only {}", schema)
	}
	a := zeta.Annotations
	if a.ReadOnlyHint == nil || !*a.ReadOnlyHint || a.OpenWorldHint == nil || !*a.OpenWorldHint {
		t.Errorf("read tool annotations = %+v, want readOnly and openWorld", a)
	}
	if a := alpha.Annotations; a.OpenWorldHint == nil || *a.OpenWorldHint {
		t.Errorf("test tool annotations = %+v, want openWorld false (no network)", a)
	}
	out, _ := json.Marshal(zeta.OutputSchema)
	if !strings.Contains(string(out), "exit_code") {
		t.Errorf("output schema = %s", out)
	}
}

func TestCallRoutesByClass(t *testing.T) {
	c := loadConf(t, twoTools)
	direct := &fakeRunner{res: rt.Result{Output: []byte("hi\n"), OutputBytes: 3, Elapsed: 12 * time.Millisecond}}
	sandbox := &fakeRunner{res: rt.Result{ExitCode: 2, Output: []byte("fail"), Elapsed: time.Millisecond}}
	s := New(Options{Conf: c, Direct: direct, Sandbox: rt.ReadySandbox("bwrap", sandbox)})
	sess := session(t, s)

	res, err := callTool(t, sess, "zeta", map[string]any{})
	if err != nil || res.IsError || resultText(res) != "hi\n[exit=0 elapsed_ms=12]" {
		t.Errorf("zeta: %v isError %v %q", err, res.IsError, resultText(res))
	}
	inv := direct.invocations()
	if len(inv) != 1 || inv[0].Name != "zeta" || inv[0].Timeout != 5*time.Second || inv[0].MaxBytes != 100 ||
		strings.Join(inv[0].Argv[1:], " ") != "a b" || !filepath.IsAbs(inv[0].Path) || inv[0].ID == "" {
		t.Errorf("direct invocation = %+v", inv)
	}
	res, err = callTool(t, sess, "alpha", nil)
	if err != nil || !res.IsError || resultText(res) != "fail\n[exit=2 elapsed_ms=1]" {
		t.Errorf("alpha: %v isError %v %q", err, res.IsError, resultText(res))
	}
	if len(sandbox.invocations()) != 1 || len(direct.invocations()) != 1 {
		t.Errorf("test tool did not go to the sandbox: direct %d sandbox %d", len(direct.invocations()), len(sandbox.invocations()))
	}
}

// TestTestToolNeverUnsandboxed: with no sandbox backend, a test-class tool
// answers isError and the direct runner is never called.
func TestTestToolNeverUnsandboxed(t *testing.T) {
	direct := &fakeRunner{}
	s := New(Options{
		Conf: loadConf(t, twoTools), Direct: direct,
		Sandbox: rt.FailedSandbox("bwrap", errors.New("bwrap not found")),
	})
	res, err := callTool(t, session(t, s), "alpha", nil)
	if err != nil || !res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	for _, want := range []string{"runs only sandboxed", "bwrap not found", "never run unsandboxed"} {
		if !strings.Contains(resultText(res), want) {
			t.Errorf("message %q lacks %q", resultText(res), want)
		}
	}
	if n := len(direct.invocations()); n != 0 {
		t.Errorf("direct runner called %d times for a test tool", n)
	}
}

func TestArgumentsRefused(t *testing.T) {
	direct := &fakeRunner{}
	s := New(Options{Conf: loadConf(t, twoTools), Direct: direct, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{})})
	sess := session(t, s)
	for _, args := range []any{map[string]any{"x": 1}, map[string]any{"": ""}, []any{"a"}, "str", 3} {
		res, err := callTool(t, sess, "zeta", args)
		if err != nil || !res.IsError || !strings.Contains(resultText(res), "callers pass no arguments") {
			t.Errorf("args %v: %v %+v", args, err, res)
		}
	}
	for _, args := range []any{nil, map[string]any{}} {
		if res, err := callTool(t, sess, "zeta", args); err != nil || res.IsError {
			t.Errorf("args %v refused: %v %q", args, err, resultText(res))
		}
	}
	if n := len(direct.invocations()); n != 2 {
		t.Errorf("runner called %d times, want 2 (only the calls without arguments)", n)
	}
}

func TestUnknownAndHiddenAnswerAlike(t *testing.T) {
	s := New(Options{Conf: loadConf(t, twoTools+"expose zeta off\n"), Direct: &fakeRunner{}, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{})})
	sess := session(t, s)
	_, e1 := callTool(t, sess, "nosuch", nil)
	_, e2 := callTool(t, sess, "zeta", nil)
	if e1 == nil || e2 == nil || strings.Replace(e1.Error(), "nosuch", "X", 1) != strings.Replace(e2.Error(), "zeta", "X", 1) {
		t.Errorf("unknown: %v; exposed off: %v; want the same error", e1, e2)
	}
}

func TestRefusedConfServesBuiltinsOnly(t *testing.T) {
	c := loadConf(t, twoTools+"expose repo_manifest off\ntool bad /bin/bash read 1 1 off DIR --\n")
	if c.State != conf.StateRefused {
		t.Fatalf("state %s", c.State)
	}
	s := New(Options{Conf: c, Builtins: []builtin.Tool{fakeBuiltin("repo_manifest")}, Direct: &fakeRunner{}})
	sess := session(t, s)
	// The expose subtraction is disabled too: repo_manifest is back.
	if got := strings.Join(listNames(t, sess), ","); got != "checkpoint_status,repo_manifest" {
		t.Errorf("tools = %s", got)
	}
	res, err := callTool(t, sess, "checkpoint_status", nil)
	if err != nil {
		t.Fatal(err)
	}
	var st status.Report
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if st.Conf.State != "refused" || len(st.Conf.Errors) != 1 || st.Conf.Errors[0].Line != 4 ||
		st.Conf.Errors[0].Field != "exe" || !strings.Contains(st.Conf.Errors[0].Reason, "bash") {
		t.Errorf("status conf = %+v", st.Conf)
	}
	if st.Protocol != "2025-06-18" {
		t.Errorf("protocol = %q", st.Protocol)
	}
}

func TestCheckpointStatusTools(t *testing.T) {
	s := New(Options{Version: "1.2.3", Conf: loadConf(t, twoTools), Direct: &fakeRunner{}, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{})})
	res, err := callTool(t, session(t, s), "checkpoint_status", nil)
	if err != nil || res.IsError {
		t.Fatal(err)
	}
	var st status.Report
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &st)
	if st.Version != "1.2.3" || !st.Sandbox.Available || st.Conf.State != "loaded" {
		t.Errorf("status = %+v", st)
	}
	want := []status.Tool{
		{Name: "checkpoint_status", Kind: "builtin", Backend: "builtin"},
		{Name: "zeta", Kind: "external", Class: "read", Backend: "direct"},
		{Name: "alpha", Kind: "external", Class: "test", Backend: "bwrap"},
	}
	if len(st.Tools) != len(want) {
		t.Fatalf("tools = %+v", st.Tools)
	}
	for i := range want {
		if !reflect.DeepEqual(st.Tools[i], want[i]) {
			t.Errorf("tools[%d] = %+v, want %+v", i, st.Tools[i], want[i])
		}
	}
}

// TestQueueTimeout: with --max-concurrent 1, a call that would wait longer
// than its own timeout answers isError instead of running.
func TestQueueTimeout(t *testing.T) {
	c := loadConf(t, "tool slow EXE read 1 100 off DIR --\ntool quick EXE read 1 100 off DIR --\n")
	block := make(chan struct{})
	direct := &fakeRunner{block: block}
	s := New(Options{Conf: c, Direct: direct, MaxConcurrent: 1})
	sess := session(t, s)
	done := make(chan struct{})
	go func() {
		callTool(t, sess, "slow", nil)
		close(done)
	}()
	for len(direct.invocations()) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	res, err := callTool(t, sess, "quick", nil)
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "--max-concurrent") {
		t.Errorf("queued call: %v %q", err, resultText(res))
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 3*time.Second {
		t.Errorf("queued call answered after %s, want about its 1 s timeout", d)
	}
	close(block)
	<-done
	if n := len(direct.invocations()); n != 1 {
		t.Errorf("runner called %d times, want 1", n)
	}
}

func TestCouldNotRun(t *testing.T) {
	direct := &fakeRunner{err: errors.New("start /x: argument list too long")}
	s := New(Options{Conf: loadConf(t, twoTools), Direct: direct})
	res, err := callTool(t, session(t, s), "zeta", nil)
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "could not run: start /x: argument list too long") {
		t.Errorf("%v %q", err, resultText(res))
	}
}

func TestRender(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  rt.Result
		want string
	}{
		{"plain", rt.Result{Output: []byte("ok\n"), Elapsed: 5 * time.Millisecond}, "ok\n[exit=0 elapsed_ms=5]"},
		{"no trailing newline", rt.Result{Output: []byte("ok"), ExitCode: 1}, "ok\n[exit=1 elapsed_ms=0]"},
		{"empty", rt.Result{}, "[exit=0 elapsed_ms=0]"},
		{"truncated", rt.Result{Output: []byte("abc"), Dropped: 97, Truncated: true}, "abc\n[truncated: 97 bytes dropped]\n[exit=0 elapsed_ms=0]"},
		{
			"timeout",
			rt.Result{Output: []byte("x\n"), ExitCode: 137, TimedOut: true, Limit: rt.LimitTimeout, Elapsed: time.Second},
			"x\n[timeout]\n[exit=137 elapsed_ms=1000]",
		},
		{
			"truncated and timeout",
			rt.Result{Output: []byte("x"), Dropped: 1, Truncated: true, ExitCode: 137, TimedOut: true, Limit: rt.LimitTimeout},
			"x\n[truncated: 1 bytes dropped]\n[timeout]\n[exit=137 elapsed_ms=0]",
		},
		{"cancelled", rt.Result{ExitCode: 137, Limit: rt.LimitCancelled}, "[cancelled]\n[exit=137 elapsed_ms=0]"},
		{"memory", rt.Result{ExitCode: 137, Limit: rt.LimitMemory}, "[limit: memory]\n[exit=137 elapsed_ms=0]"},
	} {
		if got := Render(tc.res); got != tc.want {
			t.Errorf("%s: Render = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestExternalStructuredComplete: Codex and Claude Code give their model the
// structuredContent instead of the text when both exist, so an external's
// structuredContent carries the text content exactly (output, markers,
// footer) and says whether the call failed; it matches the announced
// outputSchema, success or failure.
func TestExternalStructuredComplete(t *testing.T) {
	c := loadConf(t, twoTools)
	direct := &fakeRunner{res: rt.Result{Output: []byte("marker-ok\n"), OutputBytes: 10, Elapsed: 3 * time.Millisecond}}
	sandbox := &fakeRunner{res: rt.Result{
		ExitCode: 137, Output: []byte("marker-fail"), OutputBytes: 300, Dropped: 289,
		Truncated: true, TimedOut: true, Limit: rt.LimitTimeout, Elapsed: 7 * time.Second,
	}}
	s := New(Options{Conf: c, Direct: direct, Sandbox: rt.ReadySandbox("bwrap", sandbox)})
	sess := session(t, s)
	list, err := sess.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	schema := compileOutputSchema(t, list.Tools[len(list.Tools)-1])
	for _, tc := range []struct {
		tool    string
		isError bool
		output  string
	}{
		{"zeta", false, "marker-ok\n[exit=0 elapsed_ms=3]"},
		{"alpha", true, "marker-fail\n[truncated: 289 bytes dropped]\n[timeout]\n[exit=137 elapsed_ms=7000]"},
	} {
		res, err := callTool(t, sess, tc.tool, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resultText(res) != tc.output || res.IsError != tc.isError {
			t.Errorf("%s: text %q isError %v, want %q %v", tc.tool, resultText(res), res.IsError, tc.output, tc.isError)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m["output"] != tc.output || m["is_error"] != tc.isError {
			t.Errorf("%s: structuredContent %s, want output %q and is_error %v", tc.tool, b, tc.output, tc.isError)
		}
		if err := schema.Validate(m); err != nil {
			t.Errorf("%s: structuredContent %s does not match the outputSchema: %v", tc.tool, b, err)
		}
	}
}

// TestSandboxPending: the sandbox backend's self-test runs beside serving.
// Until it answers, tools/list and built-ins answer at once, and a
// test-class call waits for it within its own timeout: it runs when the
// backend is ready, answers isError when the self-test fails or outlasts
// the call's timeout, and never runs on the direct runner.
func TestSandboxPending(t *testing.T) {
	type outcome struct {
		r   rt.Runner
		err error
	}
	for _, tc := range []struct {
		name    string
		delay   time.Duration
		outcome func(sb *fakeRunner) outcome
		wantErr string // "" means the call ran in the sandbox
	}{
		{"ready later", 300 * time.Millisecond, func(sb *fakeRunner) outcome { return outcome{sb, nil} }, ""},
		{"self-test fails", 300 * time.Millisecond, func(*fakeRunner) outcome { return outcome{nil, errors.New("bwrap: Can't mount proc")} }, "Can't mount proc"},
		{"self-test outlasts the call's timeout", 9 * time.Second, func(sb *fakeRunner) outcome { return outcome{sb, nil} }, "had not finished"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			direct := &fakeRunner{}
			sandbox := &fakeRunner{res: rt.Result{Output: []byte("ran\n")}}
			release := make(chan struct{})
			sb := rt.NewSandbox("bwrap", func(ctx context.Context) (rt.Runner, error) {
				select {
				case <-release:
				case <-time.After(tc.delay):
				case <-ctx.Done():
				}
				o := tc.outcome(sandbox)
				return o.r, o.err
			})
			t.Cleanup(func() { close(release); sb.Close() })
			// alpha's timeout is 7 s.
			s := New(Options{Conf: loadConf(t, twoTools), Direct: direct, Sandbox: sb})
			sess := session(t, s)
			start := time.Now()
			if got := strings.Join(listNames(t, sess), ","); got != "checkpoint_status,zeta,alpha" {
				t.Errorf("tools/list = %s", got)
			}
			res, err := callTool(t, sess, "checkpoint_status", nil)
			if err != nil || !strings.Contains(resultText(res), "self-test still running") {
				t.Errorf("checkpoint_status while pending: %v %q", err, resultText(res))
			}
			if d := time.Since(start); d > 200*time.Millisecond {
				t.Errorf("tools/list and checkpoint_status took %s while the self-test was pending", d)
			}
			res, err = callTool(t, sess, "alpha", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantErr == "" {
				if res.IsError || !strings.HasPrefix(resultText(res), "ran\n") || len(sandbox.invocations()) != 1 {
					t.Errorf("call after the self-test: %q isError %v, %d sandbox runs", resultText(res), res.IsError, len(sandbox.invocations()))
				}
				if inv := sandbox.invocations(); len(inv) == 1 && (inv[0].Timeout > 7*time.Second-250*time.Millisecond || inv[0].Timeout <= 0) {
					t.Errorf("the call ran with timeout %s: the wait must count against its 7 s", inv[0].Timeout)
				}
			} else if !res.IsError || !strings.Contains(resultText(res), tc.wantErr) || !strings.Contains(resultText(res), "never run unsandboxed") {
				t.Errorf("call = %q isError %v, want isError naming %q", resultText(res), res.IsError, tc.wantErr)
			}
			if n := len(direct.invocations()); n != 0 {
				t.Errorf("a test-class call ran on the direct runner %d times", n)
			}
		})
	}
}
