//go:build e2e

// Package e2e drives toolgate over stdio with mcp-go's client, as an MCP
// host would: the built binary, or the appliance image under podman
// (TOOLGATE_E2E_IMAGE; see target_test.go).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/internal/mcptest"
	"github.com/toolgate/toolgate/internal/testbin"
)

// writeConf writes a tools.conf (mode 0600) and returns its path.
func writeConf(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tools.conf")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// start launches `toolgate serve` on the target with conf and the extra
// serve flags and initializes an MCP session at protocol version.
func start(t *testing.T, version, conf string, extra ...string) (*client.Client, *mcp.InitializeResult) {
	t.Helper()
	c, res, _ := startServer(t, version, conf, extra...)
	return c, res
}

// startServer is start that also returns how the server was started.
func startServer(t *testing.T, version, conf string, extra ...string) (*client.Client, *mcp.InitializeResult, server) {
	t.Helper()
	srv := serveCmd(t, conf, extra...)
	c, err := client.NewStdioMCPClient(srv.argv[0], nil, srv.argv[1:]...)
	if err != nil {
		t.Fatalf("start toolgate: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = version
	req.Params.ClientInfo = mcp.Implementation{Name: "toolgate-e2e", Version: "1"}
	res, err := c.Initialize(ctx, req)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return c, res, srv
}

func call(t *testing.T, c *client.Client, name string, args any) (*mcp.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	return c.CallTool(ctx, req)
}

func text(r *mcp.CallToolResult) string { return mcptest.Text(r) }

func names(t *testing.T, c *client.Client) []string {
	t.Helper()
	return mcptest.Names(t, c)
}

func probeConf(t *testing.T, extra string) string {
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	return writeConf(t, fmt.Sprintf(`# e2e tools
tool hello %[1]s read 10 4096 off %[2]s -- echo hello from toolgate
tool failing %[1]s read 10 4096 off %[2]s -- exit 3
tool slow %[1]s read 1 4096 off %[2]s -- ignoreterm
tool flood %[1]s read 30 65536 off %[2]s -- flood 52428800
tool env %[1]s read 10 4096 off %[2]s -- env
tool hidden %[1]s read 10 4096 off %[2]s -- echo never
expose hidden off
%[3]s`, probe, dir, extra))
}

func TestProtocolNegotiation(t *testing.T) {
	conf := writeConf(t, "")
	for _, v := range []string{"2025-06-18", "2025-03-26", "2024-11-05"} {
		t.Run(v, func(t *testing.T) {
			_, res := start(t, v, conf)
			if res.ProtocolVersion != v {
				t.Errorf("negotiated %q, want %q", res.ProtocolVersion, v)
			}
			if res.ServerInfo.Name != "toolgate" {
				t.Errorf("serverInfo.name = %q", res.ServerInfo.Name)
			}
			// listChanged: a downstream tool joins or leaves the list
			// when a listing of its server says so (docs/registry.md).
			if res.Capabilities.Tools == nil || !res.Capabilities.Tools.ListChanged {
				t.Errorf("tools capability = %+v, want listChanged true", res.Capabilities.Tools)
			}
		})
	}
}

func TestListAndCall(t *testing.T) {
	c, _ := start(t, "2025-06-18", probeConf(t, ""))
	got := names(t, c)
	// Built-ins first (checkpoint_status leads), then externals in conf
	// order; the exposed-off tool is absent.
	if len(got) < 6 || got[0] != "checkpoint_status" {
		t.Fatalf("tools = %v", got)
	}
	ext := got[len(got)-5:]
	if want := "hello,failing,slow,flood,env"; strings.Join(ext, ",") != want {
		t.Errorf("externals = %v, want %s in conf order", ext, want)
	}
	for _, n := range got {
		if n == "hidden" {
			t.Errorf("exposed-off tool listed")
		}
	}

	res, err := call(t, c, "hello", map[string]any{})
	if err != nil || res.IsError {
		t.Fatalf("hello: %v %+v", err, res)
	}
	if txt := text(res); !strings.HasPrefix(txt, "hello from toolgate\n[exit=0 elapsed_ms=") || !strings.HasSuffix(txt, "]") {
		t.Errorf("hello text = %q", txt)
	}
	sc, _ := json.Marshal(res.StructuredContent)
	var out struct {
		ExitCode    int   `json:"exit_code"`
		OutputBytes int64 `json:"output_bytes"`
		TimedOut    bool  `json:"timed_out"`
	}
	if err := json.Unmarshal(sc, &out); err != nil || out.ExitCode != 0 || out.OutputBytes != 20 || out.TimedOut {
		t.Errorf("structuredContent = %s", sc)
	}

	res, err = call(t, c, "failing", nil)
	if err != nil || !res.IsError || !strings.Contains(text(res), "bye\n[exit=3 elapsed_ms=") {
		t.Errorf("failing: err %v isError %v text %q", err, res.IsError, text(res))
	}

	res, err = call(t, c, "env", nil)
	if err != nil {
		t.Fatal(err)
	}
	env, _, _ := strings.Cut(text(res), "[exit=")
	if want := "GIT_CONFIG_NOSYSTEM=1\nGIT_PAGER=cat\nPAGER=cat\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"; env != want {
		t.Errorf("the tool's environment = %q, want exactly %q", env, want)
	}
}

func TestTimeoutAndFlood(t *testing.T) {
	c, _ := start(t, "2025-06-18", probeConf(t, ""))
	start := time.Now()
	res, err := call(t, c, "slow", nil)
	if err != nil || !res.IsError || !strings.Contains(text(res), "[timeout]\n[exit=137 ") {
		t.Errorf("slow: %v %q", err, text(res))
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("1 s timeout took %s", d)
	}
	res, err = call(t, c, "flood", nil)
	if err != nil || res.IsError {
		t.Fatalf("flood: %v %+v", err, res)
	}
	txt := text(res)
	if !strings.Contains(txt, fmt.Sprintf("[truncated: %d bytes dropped]\n[exit=0 ", 52428800-65536)) {
		t.Errorf("flood text tail = %q", txt[max(0, len(txt)-120):])
	}
}

func TestRefusals(t *testing.T) {
	c, _ := start(t, "2025-06-18", probeConf(t, ""))
	// Unknown and exposed-off tools: the same JSON-RPC error.
	_, errUnknown := call(t, c, "no_such_tool", nil)
	_, errHidden := call(t, c, "hidden", nil)
	if errUnknown == nil || errHidden == nil {
		t.Fatalf("unknown: %v, hidden: %v; want errors", errUnknown, errHidden)
	}
	if strings.ReplaceAll(errUnknown.Error(), "no_such_tool", "X") != strings.ReplaceAll(errHidden.Error(), "hidden", "X") {
		t.Errorf("exposed-off error %q differs from unknown-tool error %q", errHidden, errUnknown)
	}
	// Arguments are refused with isError.
	res, err := call(t, c, "hello", map[string]any{"extra": "--rm -rf"})
	if err != nil || !res.IsError || !strings.Contains(text(res), "callers pass no arguments") {
		t.Errorf("call with arguments: %v %+v", err, res)
	}
}

func TestRefusedConfServesBuiltinsOnly(t *testing.T) {
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf("tool good %s read 10 4096 off %s -- echo hi\ntool bad /bin/bash read 10 4096 off %s -- -c id\n", probe, dir, dir))
	c, _ := start(t, "2025-06-18", conf)
	for _, n := range names(t, c) {
		if n == "good" || n == "bad" {
			t.Errorf("refused conf still serves %q", n)
		}
	}
	res, err := call(t, c, "checkpoint_status", nil)
	if err != nil || res.IsError {
		t.Fatalf("checkpoint_status: %v", err)
	}
	txt := text(res)
	for _, want := range []string{"refused", "refused line 2", `basename "bash"`, "built-ins stay on"} {
		if !strings.Contains(txt, want) {
			t.Errorf("checkpoint_status lacks %q:\n%s", want, txt)
		}
	}
	sc, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(sc), `"state":"refused"`) || !strings.Contains(string(sc), `"line":2`) {
		t.Errorf("structuredContent = %s", sc)
	}
}

func TestConcurrentCalls(t *testing.T) {
	var extra strings.Builder
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	for i := range 16 {
		fmt.Fprintf(&extra, "tool c%d %s read 20 4096 off %s -- echo call %d\n", i, probe, dir, i)
	}
	c, _ := start(t, "2025-06-18", writeConf(t, extra.String()))
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for i := range 16 {
		wg.Go(func() {
			res, err := call(t, c, fmt.Sprintf("c%d", i), nil)
			if err != nil {
				errs <- err.Error()
				return
			}
			if want := fmt.Sprintf("call %d\n[exit=0 ", i); !strings.HasPrefix(text(res), want) {
				errs <- fmt.Sprintf("c%d: %q", i, text(res))
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestStdoutIsOnlyJSONRPC drives the binary with raw lines and checks every
// line it writes to stdout is a JSON-RPC 2.0 message, while its logs go to
// stderr.
func TestStdoutIsOnlyJSONRPC(t *testing.T) {
	srv := serveCmd(t, probeConf(t, ""), "--log-level", "debug")
	cmd := exec.Command(srv.argv[0], srv.argv[1:]...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"hello"}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"env"}}`,
		`not json at all`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"checkpoint_status"}}`,
	} {
		fmt.Fprintln(stdin, l)
		time.Sleep(50 * time.Millisecond)
	}
	// Closing stdin cancels the calls still in flight, which then answer
	// nothing: it waits for the six answers (a loaded machine's calls
	// can take seconds), then for anything more a moment.
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			lines <- bytes.Clone(sc.Bytes())
		}
	}()
	n := 0
	check := func(line []byte) {
		n++
		var msg map[string]any
		if err := json.Unmarshal(line, &msg); err != nil || msg["jsonrpc"] != "2.0" {
			t.Errorf("stdout line %d is not JSON-RPC: %q", n, line)
		}
	}
	deadline := time.After(60 * time.Second)
wait:
	for n < 6 {
		select {
		case line, ok := <-lines:
			if !ok {
				break wait
			}
			check(line)
		case <-deadline:
			break wait
		}
	}
	time.Sleep(200 * time.Millisecond)
	stdin.Close()
	for line := range lines {
		check(line)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("toolgate exited with %v after stdin closed; stderr:\n%s", err, stderr.String())
	}
	if n != 6 { // five answers and one parse error
		t.Errorf("%d stdout lines, want 6", n)
	}
	if !strings.Contains(stderr.String(), "serving MCP on stdio") {
		t.Errorf("logs did not reach stderr: %q", stderr.String())
	}
}

func TestCheckCommand(t *testing.T) {
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	good := writeConf(t, fmt.Sprintf("tool hello %s read 10 4096 off %s -- echo hi\n", probe, dir))
	out, err := toolgateCmd(t, good, "--list-tools").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hello") || !strings.Contains(string(out), ": loaded") {
		t.Errorf("--list-tools: %v\n%s", err, out)
	}
	bad := writeConf(t, "tool x /bin/sh read 1 1 off / --\n")
	cmd := toolgateCmd(t, bad, "check")
	out, err = cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "line 1: exe:") {
		t.Errorf("check of a refused conf: exit %d, %v\n%s", cmd.ProcessState.ExitCode(), err, out)
	}
}

// TestManySessions: 8 MCP sessions (8 server processes) with 8 concurrent
// calls each: 64 calls in flight, no output or id ever mixed.
func TestManySessions(t *testing.T) {
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	var conf strings.Builder
	for i := range 8 {
		fmt.Fprintf(&conf, "tool r%d %s read 30 4096 off %s -- echo read %d\n", i, probe, dir, i)
		fmt.Fprintf(&conf, "tool t%d %s test 30 4096 on %s -- echo test %d\n", i, probe, dir, i)
	}
	path := writeConf(t, conf.String())
	clients := make([]*client.Client, 8)
	for s := range clients {
		clients[s], _ = start(t, "2025-06-18", path)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for s, c := range clients {
		for i := range 8 {
			wg.Go(func() {
				kind := []string{"read", "test"}[(s+i)%2]
				name := fmt.Sprintf("%c%d", kind[0], i)
				res, err := call(t, c, name, nil)
				if err != nil {
					errs <- fmt.Sprintf("session %d %s: %v", s, name, err)
					return
				}
				if want := fmt.Sprintf("%s %d\n[exit=0 ", kind, i); !strings.HasPrefix(text(res), want) {
					errs <- fmt.Sprintf("session %d %s: %q, want %q", s, name, text(res), want)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestRefusedConfAudited: a refused tools.conf is audited at start-up line
// by line — one record per refused line with its number, field and reason,
// none for the accepted line, and nothing else of the file.
func TestRefusedConfAudited(t *testing.T) {
	probe, dir := testbin.Probe(t), testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf("tool good %[1]s read 10 4096 off %[2]s -- echo hi\ntool bad /bin/bash read 10 4096 off %[2]s -- MARKER_ARG\ntool slow %[1]s read 0 4096 off %[2]s --\n", probe, dir))
	srv := serveCmd(t, conf)
	cmd := exec.Command(srv.argv[0], srv.argv[1:]...)
	cmd.Stdin = strings.NewReader("")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr.String())
	}
	var recs []map[string]any
	for l := range strings.SplitSeq(stderr.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["kind"] == "conf" {
			recs = append(recs, m)
		}
	}
	if len(recs) != 2 {
		t.Fatalf("%d conf audit records, want 2 (lines 2 and 3):\n%s", len(recs), stderr.String())
	}
	for i, want := range []struct {
		line          float64
		field, reason string
	}{{2, "exe", `basename "bash"`}, {3, "timeout-s", "0 out of range: want 1 to 3600"}} {
		r := recs[i]
		if r["line"] != want.line || r["field"] != want.field || r["state"] != "refused" || r["msg"] != "conf refused" ||
			!strings.Contains(fmt.Sprint(r["reason"]), want.reason) {
			t.Errorf("record %d = %v, want line %v field %s and a reason with %q", i, r, want.line, want.field, want.reason)
		}
	}
	if b, _ := json.Marshal(recs); strings.Contains(string(b), "MARKER_ARG") {
		t.Errorf("the audit records carry the refused line's text: %s", b)
	}
}
