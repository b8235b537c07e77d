package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/status"
)

// fakeMCPEnv switches the test binary into the fake stdio MCP server; the
// registry passes it as a literal env variable.
const fakeMCPEnv = "TOOLGATE_FAKE_MCP"

func TestMain(m *testing.M) {
	switch os.Getenv(fakeMCPEnv) {
	case "1":
		runFakeMCP()
		os.Exit(0)
	case "flood":
		runFloodMCP()
		os.Exit(0)
	}
	rt.MaybeShim() // the test binary is also the reap shim
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// echoSchema has keywords mcp-go's schema struct does not keep ($schema,
// description, minLength): served byte for byte, they prove the schema is
// the downstream's own.
const echoSchema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","description":"what to echo","properties":{"text":{"type":"string","minLength":1}},"required":["text"],"additionalProperties":false}`

// runFakeMCP is a stdio MCP server with a tool per behaviour under test. It
// writes "call NAME" to stderr for every call it receives.
func runFakeMCP() {
	fmt.Fprintf(os.Stderr, "fake started pid=%d\n", os.Getpid())
	s := mcpserver.NewMCPServer("fake", "1", mcpserver.WithToolCapabilities(false))
	type args struct {
		Text    string  `json:"text"`
		Seconds float64 `json:"seconds"`
		Bytes   int     `json:"bytes"`
	}
	tool := func(name, schema string, ann mcp.ToolAnnotation, h func(a args) *mcp.CallToolResult) {
		t := mcp.NewToolWithRawSchema(name, "The fake's "+name+".", json.RawMessage(schema))
		t.Annotations = ann
		s.AddTool(t, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			fmt.Fprintf(os.Stderr, "call %s\n", name)
			var a args
			if err := req.BindArguments(&a); err != nil && req.Params.Arguments != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
			return h(a), nil
		})
	}
	open := `{"type":"object"}`
	ro := mcp.ToolAnnotation{ReadOnlyHint: new(true), IdempotentHint: new(true), OpenWorldHint: new(false)}
	rw := mcp.ToolAnnotation{ReadOnlyHint: new(false), DestructiveHint: new(false), IdempotentHint: new(true), Title: "Writer"}
	tool("echo", echoSchema, rw, func(a args) *mcp.CallToolResult { return mcp.NewToolResultText("echo: " + a.Text) })
	tool("readonly", open, ro, func(args) *mcp.CallToolResult { return mcp.NewToolResultText("read") })
	tool("writer", open, rw, func(args) *mcp.CallToolResult { return mcp.NewToolResultText("wrote") })
	tool("env", open, ro, func(args) *mcp.CallToolResult {
		env := os.Environ()
		slices.Sort(env)
		return mcp.NewToolResultText(strings.Join(env, "\n"))
	})
	tool("pid", open, ro, func(args) *mcp.CallToolResult { return mcp.NewToolResultText(fmt.Sprint(os.Getpid())) })
	tool("crash", open, rw, func(args) *mcp.CallToolResult {
		time.Sleep(100 * time.Millisecond)
		os.Exit(3)
		return nil
	})
	tool("sleep", open, ro, func(a args) *mcp.CallToolResult {
		time.Sleep(time.Duration(a.Seconds * float64(time.Second)))
		return mcp.NewToolResultText("woke")
	})
	tool("big", open, ro, func(a args) *mcp.CallToolResult {
		text := strings.Repeat("é", a.Bytes/2)
		return mcp.NewToolResultStructured(map[string]any{"n": a.Bytes, "text": text}, text)
	})
	tool("spam", open, ro, func(args) *mcp.CallToolResult {
		fmt.Fprintf(os.Stderr, "the secret is %s\n", os.Getenv("TOOLGATE_FAKE_SECRET"))
		line := strings.Repeat("s", 1000)
		for range 2 * rt.MaxStderrBytes / 1000 {
			fmt.Fprintln(os.Stderr, line)
		}
		return mcp.NewToolResultText("spammed")
	})
	tool("hidden", open, rw, func(args) *mcp.CallToolResult { return mcp.NewToolResultText("hidden ran") })
	if err := mcpserver.ServeStdio(s); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// envMap is a LookupEnv whose variables a test can change while serving.
type envMap struct {
	mu sync.Mutex
	m  map[string]string
}

func (e *envMap) lookup(name string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok := e.m[name]
	return v, ok
}

func (e *envMap) set(name, value string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[name] = value
}

// loadRegistry writes fragments (name → text, with SELF replaced by the
// test binary) into a fresh directory and loads it.
func loadRegistry(t *testing.T, fragments map[string]string) *registry.Registry {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, text := range fragments {
		text = strings.ReplaceAll(text, "SELF", self)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return registry.Load(dir, registry.Options{})
}

// fakeRegistry is the fake server, unsandboxed, with every kind of tool
// enabled except "hidden" (offered but not allowed), and "absent" enabled
// but not offered.
const fakeRegistry = `schema_version = 8

[tool_mcp_servers.fake]
transport = "stdio"
command = "SELF"
env = { TOOLGATE_FAKE_MCP = "1", LOG_LEVEL = "debug" }
env_vars = ["TOOLGATE_FAKE_SECRET"]
sandbox = false
enabled_tools = ["echo", "readonly", "writer", "env", "pid", "crash", "sleep", "big", "spam", "absent"]
default_tools_approval_mode = "auto"
startup_timeout_sec = 20
tool_timeout_sec = 2
supports_parallel_tool_calls = true

[tool_mcp_servers.fake.tools.writer]
approval_mode = "writes"
[tool_mcp_servers.fake.tools.readonly]
approval_mode = "writes"
[tool_mcp_servers.fake.tools.echo]
approval_mode = "prompt"
[tool_mcp_servers.fake.tools.big]
approval_mode = "approve"
`

// harness is a toolgate Server with downstream servers and an in-process
// MCP session to it.
type harness struct {
	s    *Server
	sess *client.Client
	logs *testbin.Buffer
	env  *envMap
}

func newHarness(t *testing.T, opts Options, dopts gateway.Options, env map[string]string) *harness {
	t.Helper()
	h := &harness{logs: &testbin.Buffer{}, env: &envMap{m: env}}
	log := logrus.New()
	log.SetOutput(h.logs)
	log.SetLevel(logrus.DebugLevel)
	opts.Log = log
	if opts.Direct == nil {
		opts.Direct = &fakeRunner{}
	}
	if opts.Sandbox == nil {
		opts.Sandbox = rt.FailedSandbox("bwrap", errors.New("no backend in this test"))
	}
	if dopts.DirectServices == nil {
		dopts.DirectServices = &rt.DirectServices{Shim: testbin.Shim(t)}
	}
	dopts.LookupEnv = h.env.lookup
	h.s = New(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h.s.ConnectDownstream(ctx, dopts)
	t.Cleanup(h.s.Close)
	h.sess = session(t, h.s)
	return h
}

func (h *harness) call(t *testing.T, name string, args any) *mcp.CallToolResult {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := h.sess.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func (h *harness) tools(t *testing.T) map[string]mcp.Tool {
	t.Helper()
	res, err := h.sess.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]mcp.Tool{}
	for _, tl := range res.Tools {
		out[tl.Name] = tl
	}
	return out
}

func (h *harness) status(t *testing.T) status.Report {
	t.Helper()
	res := h.call(t, "checkpoint_status", nil)
	var st status.Report
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// rawToolsList returns the raw tools/list answer of toolgate, to compare
// schemas byte for byte.
func rawToolsList(t *testing.T, s *Server) map[string]json.RawMessage {
	t.Helper()
	ctx := context.Background()
	s.MCP().HandleMessage(ctx, []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	msg := s.MCP().HandleMessage(ctx, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	b, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Result struct {
			Tools []map[string]json.RawMessage `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	out := map[string]json.RawMessage{}
	for _, tl := range r.Result.Tools {
		var name string
		json.Unmarshal(tl["name"], &name)
		out[name] = tl["inputSchema"]
	}
	return out
}

func fakeHarness(t *testing.T, eager bool, maxBytes int) *harness {
	t.Helper()
	r := loadRegistry(t, map[string]string{"10-fake.toml": fakeRegistry})
	if r.State != conf.StateLoaded {
		t.Fatalf("registry %s: %v", r.State, r.Err())
	}
	return newHarness(t, Options{Conf: loadConf(t, twoTools)},
		gateway.Options{Registry: r, Eager: eager, MaxBytes: maxBytes},
		map[string]string{"TOOLGATE_FAKE_SECRET": "fake-secret-value-1"})
}

// TestDownstreamListing: after the externals, exactly the enabled tools the
// server offers, with its schema byte for byte and the annotations of the
// approval mode.
func TestDownstreamListing(t *testing.T) {
	h := fakeHarness(t, false, 0)
	want := []string{
		"checkpoint_status", "zeta", "alpha", "fake__echo", "fake__readonly", "fake__writer", "fake__env", "fake__pid",
		"fake__crash", "fake__sleep", "fake__big", "fake__spam",
	}
	if got := listNames(t, h.sess); !slices.Equal(got, want) {
		t.Errorf("tools/list = %v\nwant %v", got, want)
	}
	raw := rawToolsList(t, h.s)
	var compact bytes.Buffer
	json.Compact(&compact, raw["fake__echo"])
	if compact.String() != echoSchema {
		t.Errorf("fake__echo inputSchema = %s\nwant the downstream's %s", compact.String(), echoSchema)
	}
	tools := h.tools(t)
	for _, tc := range []struct {
		name                string
		readOnly, destroy   bool
		idempotentFalse     bool
		title, descContains string
	}{
		{name: "fake__env", readOnly: true, destroy: false},                        // auto
		{name: "fake__readonly", readOnly: true, destroy: false},                   // writes, declared read-only
		{name: "fake__writer", readOnly: false, destroy: true, title: "Writer"},    // writes, not read-only
		{name: "fake__echo", readOnly: false, destroy: true, title: "Writer"},      // prompt
		{name: "fake__big", readOnly: false, destroy: true, idempotentFalse: true}, // approve
	} {
		a := tools[tc.name].Annotations
		if a.ReadOnlyHint == nil || *a.ReadOnlyHint != tc.readOnly || a.DestructiveHint == nil || *a.DestructiveHint != tc.destroy {
			t.Errorf("%s: readOnlyHint %v destructiveHint %v, want %v %v", tc.name, deref(a.ReadOnlyHint), deref(a.DestructiveHint), tc.readOnly, tc.destroy)
		}
		if tc.idempotentFalse && (a.IdempotentHint == nil || *a.IdempotentHint) {
			t.Errorf("%s: idempotentHint %v, want false (approve)", tc.name, deref(a.IdempotentHint))
		}
		if a.Title != tc.title {
			t.Errorf("%s: title %q, want the server's %q", tc.name, a.Title, tc.title)
		}
	}
	if d := tools["fake__echo"].Description; !strings.HasPrefix(d, "The fake's echo.") || !strings.Contains(d, `of the tool-MCP server "fake" (stdio, sandbox off), approval mode prompt`) {
		t.Errorf("fake__echo description = %q", d)
	}
	st := h.status(t)
	if st.Registry == nil || st.Registry.State != "loaded" || len(st.Registry.Servers) != 1 {
		t.Fatalf("status registry = %+v", st.Registry)
	}
	ds := st.Registry.Servers[0]
	if ds.State != "listed" || ds.Sandbox != "off" || len(ds.Served) != 9 || !slices.Equal(ds.NotServed, []string{"absent"}) {
		t.Errorf("status server = %+v", ds)
	}
	if !strings.Contains(h.logs.String(), `enabled tool not offered by the downstream server: not served`) {
		t.Error("the enabled but absent tool is not logged")
	}
}

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

// TestDownstreamRefusedAtCallTime: a tool the server offers but the
// allowlist omits, and an enabled tool it does not offer, have no handler;
// the server never receives such a call.
func TestDownstreamRefusedAtCallTime(t *testing.T) {
	h := fakeHarness(t, true, 0)
	for _, name := range []string{"fake__hidden", "fake__absent", "fake__", "fake__echo__x", "other__echo"} {
		req := mcp.CallToolRequest{}
		req.Params.Name = name
		res, err := h.sess.CallTool(context.Background(), req)
		if err == nil && !res.IsError {
			t.Errorf("call %s = %q, want a refusal", name, resultText(res))
		}
	}
	if res := h.call(t, "fake__echo", map[string]any{"text": "hi"}); res.IsError || resultText(res) != "echo: hi" {
		t.Errorf("fake__echo = %q (isError %v)", resultText(res), res.IsError)
	}
	time.Sleep(200 * time.Millisecond) // the stderr line of the call
	logs := h.logs.String()
	if strings.Contains(logs, "call hidden") || !strings.Contains(logs, "call echo") {
		t.Errorf("the downstream's calls (from its stderr) are wrong: hidden reached it, or echo did not:\n%s", logs)
	}
}

// TestDownstreamEnvAndRedaction: the server's environment is the four
// variables, its literal env and the forwarded variable; the value is on no
// command line and never in the log, even when the server prints it; the
// server's stderr is bounded.
func TestDownstreamEnvAndRedaction(t *testing.T) {
	h := fakeHarness(t, true, 0)
	res := h.call(t, "fake__env", nil)
	want := []string{
		"GIT_CONFIG_NOSYSTEM=1", "GIT_PAGER=cat", "LOG_LEVEL=debug", "PAGER=cat", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"TOOLGATE_FAKE_MCP=1", "TOOLGATE_FAKE_SECRET=fake-secret-value-1",
	}
	var got []string
	for kv := range strings.SplitSeq(resultText(res), "\n") {
		if !strings.HasPrefix(kv, "PWD=") { // the reap shim's tool is started in /
			got = append(got, kv)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("downstream environment:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if pid, ok := cmdlineContaining("fake-secret-value-1"); ok {
		t.Errorf("process %d has the value on its command line", pid)
	}
	if res := h.call(t, "fake__spam", nil); res.IsError {
		t.Fatalf("spam: %s", resultText(res))
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(h.logs.String(), "the rest of this process's stderr is dropped") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	logs := h.logs.String()
	if strings.Contains(logs, "fake-secret-value-1") {
		t.Error("the variable's value is in the log")
	}
	if !strings.Contains(logs, "the secret is [redacted]") {
		t.Error("the server's stderr line with the value is not in the log, redacted")
	}
	if n := strings.Count(logs, strings.Repeat("s", 1000)); n > rt.MaxStderrBytes/1000+1 || n < 10 {
		t.Errorf("%d spam lines in the log, want between 10 and %d (bounded)", n, rt.MaxStderrBytes/1000+1)
	}
}

func cmdlineContaining(s string) (int, bool) {
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && bytes.Contains(b, []byte(s)) {
			var pid int
			fmt.Sscanf(f, "/proc/%d/cmdline", &pid)
			return pid, true
		}
	}
	return 0, false
}

// TestDownstreamCrashRestart: a server that dies mid-call fails that call
// and every call in flight with a clear isError, and is started again on
// the next call.
func TestDownstreamCrashRestart(t *testing.T) {
	h := fakeHarness(t, true, 0)
	pid1 := resultText(h.call(t, "fake__pid", nil))
	var wg sync.WaitGroup
	var inflight *mcp.CallToolResult
	wg.Go(func() {
		inflight = h.call(t, "fake__sleep", map[string]any{"seconds": 1.5})
	})
	time.Sleep(200 * time.Millisecond)
	crash := h.call(t, "fake__crash", nil)
	wg.Wait()
	for name, res := range map[string]*mcp.CallToolResult{"crash": crash, "in-flight sleep": inflight} {
		if !res.IsError || !strings.Contains(resultText(res), `the downstream server "fake" ended during the call (the process exited with status 3); it is started again on the next call`) {
			t.Errorf("%s = %q (isError %v)", name, resultText(res), res.IsError)
		}
	}
	pid2 := resultText(h.call(t, "fake__pid", nil))
	if pid2 == pid1 || pid2 == "" {
		t.Errorf("pid after the crash %q, before %q: want a new process", pid2, pid1)
	}
}

// TestDownstreamTimeout: a call past tool_timeout_sec answers [timeout] at
// once, the server is killed with what it started, and the next call gets
// a new one.
func TestDownstreamTimeout(t *testing.T) {
	h := fakeHarness(t, true, 0)
	pid1 := resultText(h.call(t, "fake__pid", nil))
	start := time.Now()
	res := h.call(t, "fake__sleep", map[string]any{"seconds": 30})
	if el := time.Since(start); el > 6*time.Second {
		t.Errorf("the timed-out call took %s, want about tool_timeout_sec (2s)", el)
	}
	if !res.IsError || !strings.Contains(resultText(res), "[timeout] no result within tool_timeout_sec (2s)") {
		t.Errorf("sleep = %q (isError %v)", resultText(res), res.IsError)
	}
	var pid int
	fmt.Sscan(pid1, &pid)
	if err := waitGone(pid, 5*time.Second); err != nil {
		t.Error(err)
	}
	if pid2 := resultText(h.call(t, "fake__pid", nil)); pid2 == pid1 {
		t.Errorf("same server after the timeout (pid %s)", pid2)
	}
}

func waitGone(pid int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil
		}
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("pid %d still alive after %s", pid, d)
}

// TestDownstreamLazy: without --eager the server is stopped once listed
// and started on the first call; with --eager it keeps running.
func TestDownstreamLazy(t *testing.T) {
	for _, eager := range []bool{false, true} {
		t.Run(fmt.Sprintf("eager=%v", eager), func(t *testing.T) {
			h := fakeHarness(t, eager, 0)
			var pid int
			fmt.Sscanf(h.logs.String()[strings.Index(h.logs.String(), "fake started pid="):], "fake started pid=%d", &pid)
			if pid == 0 {
				t.Fatalf("no start in the log:\n%s", h.logs.String())
			}
			err := waitGone(pid, 3*time.Second)
			if eager == (err == nil) {
				t.Errorf("eager=%v: the listing server gone = %v", eager, err == nil)
			}
			if res := h.call(t, "fake__echo", map[string]any{"text": "x"}); res.IsError {
				t.Errorf("first call: %s", resultText(res))
			}
			if n := strings.Count(h.logs.String(), "fake started pid="); n != map[bool]int{false: 2, true: 1}[eager] {
				t.Errorf("eager=%v: %d starts, want %d", eager, n, map[bool]int{false: 2, true: 1}[eager])
			}
		})
	}
}

// TestDownstreamSizeCap: a result over the cap is cut, marked and isError.
func TestDownstreamSizeCap(t *testing.T) {
	h := fakeHarness(t, true, 8192)
	res := h.call(t, "fake__big", map[string]any{"bytes": 100})
	if res.IsError || res.StructuredContent == nil {
		t.Errorf("a small result is not passed through unchanged: %+v", res)
	}
	res = h.call(t, "fake__big", map[string]any{"bytes": 40000})
	b, _ := json.Marshal(res)
	text := resultText(res)
	if !res.IsError || res.StructuredContent != nil || len(b) > 8192 || !strings.Contains(text, "over the cap of 8192 bytes; dropped: structuredContent, the end of a text item]") {
		t.Errorf("capped result: isError %v, %d bytes, text %.80q…%q", res.IsError, len(b), text, text[max(0, len(text)-120):])
	}
	if !strings.HasPrefix(text, "éé") || !utf8Valid(text) {
		t.Error("the cut text does not keep its start, or is cut inside a character")
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// TestRegistryRefused: a refused registry serves no downstream tool and
// starts nothing; builtins and externals are unaffected; the reasons are in
// checkpoint_status and the log, with names only.
func TestRegistryRefused(t *testing.T) {
	bad := strings.Replace(fakeRegistry, `sandbox = false`, "sandbox = false\nbearer_token = \"ghp_abcdefghijklmnopqrstuvwxyz0123456789\"", 1)
	r := loadRegistry(t, map[string]string{"10-fake.toml": bad})
	if r.State != conf.StateRefused {
		t.Fatalf("state %s", r.State)
	}
	h := newHarness(t, Options{Conf: loadConf(t, twoTools)}, gateway.Options{Registry: r}, nil)
	if got := strings.Join(listNames(t, h.sess), ","); got != "checkpoint_status,zeta,alpha" {
		t.Errorf("tools = %s", got)
	}
	st := h.status(t)
	if st.Registry == nil || st.Registry.State != "refused" || len(st.Registry.Errors) != 1 ||
		!strings.Contains(st.Registry.Errors[0], `tool_mcp_servers.fake.bearer_token: plaintext credential in field "bearer_token"`) {
		t.Errorf("status registry = %+v", st.Registry)
	}
	text := resultText(h.call(t, "checkpoint_status", nil))
	logs := h.logs.String()
	for where, s := range map[string]string{"status": text, "log": logs} {
		if !strings.Contains(s, "every downstream server is disabled") || strings.Contains(s, "ghp_abc") {
			t.Errorf("%s: want the refusal, never the value:\n%s", where, s)
		}
	}
	if strings.Contains(logs, "fake started") {
		t.Error("a server of a refused registry was started")
	}
}

// TestRegistryCollision: a served name that a tools.conf tool already has
// refuses the registry; the tools.conf tool stays.
func TestRegistryCollision(t *testing.T) {
	r := loadRegistry(t, map[string]string{"10-fake.toml": fakeRegistry})
	c := loadConf(t, "tool fake__echo EXE read 1 100 off DIR --\n")
	h := newHarness(t, Options{Conf: c}, gateway.Options{Registry: r}, map[string]string{"TOOLGATE_FAKE_SECRET": "x"})
	if got := strings.Join(listNames(t, h.sess), ","); got != "checkpoint_status,fake__echo" {
		t.Errorf("tools = %s", got)
	}
	st := h.status(t)
	if st.Registry.State != "refused" || len(st.Registry.Errors) != 1 ||
		!strings.Contains(st.Registry.Errors[0], `served name "fake__echo" collides with the tools.conf tool at tools.conf line 1`) {
		t.Errorf("status registry = %+v", st.Registry)
	}
	if st.Tools[1].Kind != "external" {
		t.Errorf("fake__echo is %+v, want the external", st.Tools[1])
	}
}

// TestDownstreamUnavailable: a sandboxed stdio server with a backend that
// cannot run services lists its enabled tools and answers isError; it never
// runs unsandboxed.
func TestDownstreamUnavailable(t *testing.T) {
	reg := strings.Replace(fakeRegistry, "sandbox = false\n", "", 1)
	r := loadRegistry(t, map[string]string{"10-fake.toml": reg})
	h := newHarness(t, Options{Sandbox: rt.ReadySandbox("oci", &fakeRunner{})},
		gateway.Options{Registry: r, ServicesErr: fmt.Errorf("%w: --backend oci runs tools, not long-lived servers", gateway.ErrNeedsBwrap)},
		map[string]string{"TOOLGATE_FAKE_SECRET": "x"})
	tools := h.tools(t)
	if _, ok := tools["fake__echo"]; !ok || len(tools) != 11 {
		t.Errorf("tools = %v, want checkpoint_status and the 10 enabled tools", slices.Sorted(mapsKeys(tools)))
	}
	res := h.call(t, "fake__echo", map[string]any{"text": "x"})
	if !res.IsError || !strings.Contains(resultText(res), "downstream servers need the bwrap backend: --backend oci runs tools") ||
		!strings.Contains(resultText(res), "never run unsandboxed") {
		t.Errorf("call = %q", resultText(res))
	}
	if strings.Contains(h.logs.String(), "fake started") {
		t.Error("the server was started")
	}
	if st := h.status(t); st.Registry.Servers[0].State != "unavailable" {
		t.Errorf("status = %+v", st.Registry.Servers[0])
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestDownstreamMissingVariable: a forwarded variable that is not set stops
// the start; the tools are listed with an open schema, and a call answers
// isError naming the variable; once set, the next call starts the server.
func TestDownstreamMissingVariable(t *testing.T) {
	r := loadRegistry(t, map[string]string{"10-fake.toml": fakeRegistry})
	h := newHarness(t, Options{}, gateway.Options{Registry: r}, map[string]string{})
	st := h.status(t)
	if ds := st.Registry.Servers[0]; ds.State != "failed" || !strings.Contains(ds.Reason, "TOOLGATE_FAKE_SECRET (env_vars)") {
		t.Errorf("status = %+v", ds)
	}
	res := h.call(t, "fake__echo", map[string]any{"text": "x"})
	if !res.IsError || !strings.Contains(resultText(res), "variable not set in toolgate's environment: TOOLGATE_FAKE_SECRET (env_vars)") {
		t.Errorf("call = %q", resultText(res))
	}
	h.env.set("TOOLGATE_FAKE_SECRET", "now-set-value")
	if res := h.call(t, "fake__echo", map[string]any{"text": "x"}); res.IsError || resultText(res) != "echo: x" {
		t.Errorf("call once set = %q", resultText(res))
	}
	// Listed now: the enabled tool it does not offer is withdrawn from
	// tools/list, as it is never served when the start-up listing shows it
	// is not offered.
	if _, ok := h.tools(t)["fake__absent"]; ok {
		t.Error("fake__absent is still served once the server is listed and does not offer it")
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "fake__absent"
	if res, err := h.sess.CallTool(context.Background(), req); err == nil || !strings.Contains(err.Error(), "tool 'fake__absent' not found") {
		t.Errorf("absent tool once listed = %v, %v; want tool not found", res, err)
	}
}

// TestDownstreamStartFailure: a server that exits at start is reported with
// its exit status, at start-up and on each call, which tries again.
func TestDownstreamStartFailure(t *testing.T) {
	r := loadRegistry(t, map[string]string{"10-bad.toml": `schema_version = 8

[tool_mcp_servers.bad]
transport = "stdio"
command = "/bin/false"
sandbox = false
enabled_tools = ["x"]
default_tools_approval_mode = "auto"
`})
	h := newHarness(t, Options{}, gateway.Options{Registry: r}, nil)
	st := h.status(t)
	if ds := st.Registry.Servers[0]; ds.State != "failed" || !strings.Contains(ds.Reason, "initialize: ") || !strings.Contains(ds.Reason, "(the process exited with status 1)") {
		t.Errorf("status = %+v", ds)
	}
	res := h.call(t, "bad__x", nil)
	if !res.IsError || !strings.Contains(resultText(res), `the downstream server "bad" could not be started: initialize: `) ||
		!strings.Contains(resultText(res), "(the process exited with status 1)") {
		t.Errorf("call = %q", resultText(res))
	}
	// The end of a process is logged by the goroutine that waits for it,
	// which may run after the call has answered.
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(h.logs.String(), "process ended") < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := strings.Count(h.logs.String(), "process ended"); n != 2 {
		t.Errorf("%d starts logged, want 2 (start-up, then the call)", n)
	}
}

// TestDownstreamClientNameCap: a served name that the documented clients
// would prefix past the model APIs' 64 characters is not served (it would
// fail every request of a Claude Code or Codex session), and says why; one
// of 49 characters, the most that fits, is served.
func TestDownstreamClientNameCap(t *testing.T) {
	fits := strings.Repeat("x", registry.ClientNameMax-len(registry.ClientPrefix)-len("fake__"))
	long := fits + "y"
	reg := strings.Replace(fakeRegistry, `"absent"]`, `"absent", "`+fits+`", "`+long+`"]`, 1)
	h := newHarness(t, Options{}, gateway.Options{Registry: loadRegistry(t, map[string]string{"10-fake.toml": reg})},
		map[string]string{"TOOLGATE_FAKE_SECRET": "x"})
	tools := h.tools(t)
	if _, ok := tools["fake__"+long]; ok {
		t.Errorf("fake__%s (%d characters prefixed) is served", long, len(registry.ClientPrefix)+len("fake__"+long))
	}
	ds := h.status(t).Registry.Servers[0]
	if !slices.Contains(ds.NotServed, long) {
		t.Errorf("not served = %q, want it to name %s", ds.NotServed, long)
	}
	if !strings.Contains(h.logs.String(), "over the 64 that the OpenAI and Anthropic APIs accept") {
		t.Errorf("the log does not say why:\n%s", h.logs.String())
	}
	// The one that fits is refused only because the fake server does not
	// offer it, not for its name.
	if strings.Contains(h.logs.String(), `"fake__`+fits+`" (`) {
		t.Errorf("a name that fits was reported")
	}
}
