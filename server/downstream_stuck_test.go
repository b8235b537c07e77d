package server

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/internal/testbin"
)

// deafRegistry is the probe's MCP server (internal/probes, mode mcp),
// unsandboxed, serialised, with a 2 s tool timeout: a call of its "deaf"
// tool makes it stop reading its stdin.
const deafRegistry = `schema_version = 8

[tool_mcp_servers.deaf]
transport = "stdio"
command = "PROBE"
args = ["mcp", "deaf"]
sandbox = false
enabled_tools = ["deaf", "echo", "pid"]
default_tools_approval_mode = "auto"
startup_timeout_sec = 20
tool_timeout_sec = 2
`

// largeArgs are the arguments of a request four times the size of a pipe's
// buffer: its write cannot finish while the server does not read.
func largeArgs() map[string]any {
	return map[string]any{"text": strings.Repeat("x", 256<<10)}
}

func deafHarness(t *testing.T, eager bool) *harness {
	t.Helper()
	reg := strings.ReplaceAll(deafRegistry, "PROBE", testbin.Probe(t))
	r := loadRegistry(t, map[string]string{"10-deaf.toml": reg})
	if r.State != conf.StateLoaded {
		t.Fatalf("registry %s: %v", r.State, r.Err())
	}
	return newHarness(t, Options{}, gateway.Options{Registry: r, Eager: eager}, nil)
}

// callWithin calls name on h's session with a deadline of d for the
// answer, and fails the test when it does not come.
func callWithin(t *testing.T, h *harness, d time.Duration, name string, args any) (*mcp.CallToolResult, time.Duration) {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := h.sess.CallTool(ctx, req) // in process: the handler's own time
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("call %s: %v", name, a.err)
		}
		return a.res, time.Since(start)
	case <-time.After(d):
		t.Fatalf("call %s: no answer within %s", name, d)
		return nil, 0
	}
}

// TestDownstreamStopsReading: a stdio server that stops reading its stdin
// while a request larger than the pipe's buffer is written to it cannot
// hold a call past tool_timeout_sec: the call answers [timeout] saying why,
// the server is stopped with everything it started, and the next call of
// this serialised server runs on a new one instead of answering "queued".
// A small request that the pipe takes whole times out as before.
func TestDownstreamStopsReading(t *testing.T) {
	h := deafHarness(t, true)
	pid := resultText(h.call(t, "deaf__pid", nil))
	res, took := callWithin(t, h, 15*time.Second, "deaf__deaf", largeArgs())
	t.Logf("a 256 KiB request to a server that stopped reading answered in %s", took.Round(time.Millisecond))
	if took > 4*time.Second {
		t.Errorf("the call answered after %s, want about tool_timeout_sec (2s)", took)
	}
	text := resultText(res)
	if !res.IsError || !strings.Contains(text, "[timeout] no result within tool_timeout_sec (2s)") ||
		!strings.Contains(text, "it did not read its stdin: the tools/call request was still being written") {
		t.Errorf("deaf (large) = %q (isError %v)", text, res.IsError)
	}
	var n int
	fmt.Sscan(pid, &n)
	if err := waitGone(n, 5*time.Second); err != nil {
		t.Error(err)
	}
	res, took = callWithin(t, h, 15*time.Second, "deaf__echo", map[string]any{"text": "x"})
	if res.IsError || !strings.HasPrefix(resultText(res), "echo: ") || took > 3*time.Second {
		t.Errorf("the next call = %q (isError %v) after %s, want it run at once on a new server", resultText(res), res.IsError, took)
	}

	res, took = callWithin(t, h, 15*time.Second, "deaf__deaf", map[string]any{"text": "small"})
	if !res.IsError || !strings.Contains(resultText(res), "[timeout] no result within tool_timeout_sec (2s)") || took > 4*time.Second {
		t.Errorf("deaf (small) = %q (isError %v) after %s", resultText(res), res.IsError, took)
	}
}

// TestDownstreamStopsReadingCancelled: notifications/cancelled of a call
// whose large request is stuck in the pipe ends it at once (it answers
// nothing), and the server that does not read is stopped, so the next
// call of the serialised server runs instead of waiting behind it.
func TestDownstreamStopsReadingCancelled(t *testing.T) {
	h := deafHarness(t, true)
	pid := resultText(h.call(t, "deaf__pid", nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name = "deaf__deaf"
		req.Params.Arguments = largeArgs()
		_, err := h.sess.CallTool(ctx, req)
		done <- err
	}()
	waitLog(t, h, "deaf from now on")
	cancel() // mcp-go's client sends notifications/cancelled
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled call did not end within 5 s")
	}
	res, took := callWithin(t, h, 15*time.Second, "deaf__echo", map[string]any{"text": "x"})
	if res.IsError || !strings.HasPrefix(resultText(res), "echo: ") || took > 1500*time.Millisecond {
		t.Errorf("the call after the cancelled one = %q (isError %v) after %s, want it run at once", resultText(res), res.IsError, took)
	}
	var n int
	fmt.Sscan(pid, &n)
	if err := waitGone(n, 5*time.Second); err != nil {
		t.Errorf("the server that stopped reading: %v", err)
	}
	if !strings.Contains(h.logs.String(), "it did not read its stdin") {
		t.Errorf("the log does not say why the server was stopped:\n%s", h.logs.String())
	}
}

// TestServeStdioStopsWithStuckDownstream: stdin closed while a call's
// large request is stuck in the pipe of a server that stopped reading:
// ServeStdio returns within 2 s, and the server is gone.
func TestServeStdioStopsWithStuckDownstream(t *testing.T) {
	h := deafHarness(t, true)
	pid := resultText(h.call(t, "deaf__pid", nil))
	inR, inW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- h.s.ServeStdio(context.Background(), inR, io.Discard) }()
	fmt.Fprintln(inW, initLine)
	line := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"deaf__deaf","arguments":{"text":"%s"}}}`, strings.Repeat("x", 256<<10))
	fmt.Fprintln(inW, line)
	waitLog(t, h, "deaf from now on")
	time.Sleep(100 * time.Millisecond) // the write is blocked now
	start := time.Now()
	inW.Close()
	select {
	case <-done:
		t.Logf("ServeStdio returned %s after stdin closed", time.Since(start).Round(time.Millisecond))
	case <-time.After(2 * time.Second):
		t.Fatalf("ServeStdio still serving 2 s after stdin closed, with a downstream server that stopped reading")
	}
	n, _ := strconv.Atoi(pid)
	if err := waitGone(n, 3*time.Second); err != nil {
		t.Error(err)
	}
}

// waitLog waits until the log holds s.
func waitLog(t *testing.T, h *harness, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(h.logs.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("%q never logged:\n%s", s, h.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDownstreamWaitForStartBounded: a call that finds another call
// starting the server (a slow one: 3 s) waits for it only as long as its
// own context allows: cancelled after 300 ms, it returns then.
func TestDownstreamWaitForStartBounded(t *testing.T) {
	r := loadRegistry(t, map[string]string{"10-slow.toml": fmt.Sprintf(`schema_version = 8

[tool_mcp_servers.slow]
transport = "stdio"
command = %q
args = ["mcp", "slowstart=3"]
sandbox = false
enabled_tools = ["echo"]
default_tools_approval_mode = "auto"
startup_timeout_sec = 20
supports_parallel_tool_calls = true
`, testbin.Probe(t))})
	if r.State != conf.StateLoaded {
		t.Fatalf("registry %s: %v", r.State, r.Err())
	}
	h := newHarness(t, Options{}, gateway.Options{Registry: r}, nil) // lazy: the first call starts it
	h.s.mu.RLock()
	d := h.s.down.servers[0].d
	h.s.mu.RUnlock()
	req := mcp.CallToolRequest{}
	req.Params.Name = "slow__echo"
	first := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := d.Handler("echo")(context.Background(), req)
		first <- res
	}()
	time.Sleep(200 * time.Millisecond) // the first call is starting the server
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := d.Handler("echo")(ctx, req)
	took := time.Since(start)
	if err != nil || !res.IsError || took > time.Second {
		t.Errorf("the second call returned after %s (%v, %q), want at its 300 ms deadline", took, err, resultText(res))
	}
	if res := <-first; res.IsError || !strings.HasPrefix(resultText(res), "echo: ") {
		t.Errorf("the first call = %q", resultText(res))
	}
}
