package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/gateway"
)

// floodArgs are the arguments of the flood fake's "flood" tool: a result
// whose text is Bytes bytes, with the id first (mcp-go's order), last (the
// TypeScript SDK's), or absent.
type floodArgs struct {
	Bytes int64  `json:"bytes"`
	ID    string `json:"id"` // first, last or none
}

// writeFlood writes the JSON-RPC response of a flood call to w without
// holding it: the fake stays small whatever the size.
func writeFlood(w io.Writer, id json.RawMessage, a floodArgs) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	switch a.ID {
	case "first":
		fmt.Fprintf(bw, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, id)
	default:
		fmt.Fprint(bw, `{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"`)
	}
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	for left := a.Bytes; left > 0; {
		n := min(left, int64(len(chunk)))
		if _, err := bw.Write(chunk[:n]); err != nil {
			return err
		}
		left -= n
	}
	switch a.ID {
	case "last":
		fmt.Fprintf(bw, `"}]},"id":%s}`+"\n", id)
	default:
		fmt.Fprint(bw, `"}]}}`+"\n")
	}
	return bw.Flush()
}

// runFloodMCP is a hand-written stdio MCP server (TOOLGATE_FAKE_MCP=flood)
// with two tools: flood, whose result is as large as asked, streamed; and
// pid.
func runFloodMCP() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := os.Stdout
	reply := func(id json.RawMessage, result string) {
		fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", id, result)
	}
	for in.Scan() {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string    `json:"protocolVersion"`
				Name            string    `json:"name"`
				Arguments       floodArgs `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &msg) != nil || msg.ID == nil {
			continue
		}
		switch msg.Method {
		case "initialize":
			reply(msg.ID, fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{"tools":{}},"serverInfo":{"name":"flood","version":"1"}}`, msg.Params.ProtocolVersion))
		case "tools/list":
			reply(msg.ID, `{"tools":[{"name":"flood","inputSchema":{"type":"object"}},{"name":"pid","inputSchema":{"type":"object"}}]}`)
		case "tools/call":
			if msg.Params.Name == "flood" {
				if err := writeFlood(out, msg.ID, msg.Params.Arguments); err != nil {
					os.Exit(1)
				}
				continue
			}
			reply(msg.ID, fmt.Sprintf(`{"content":[{"type":"text","text":"%d"}]}`, os.Getpid()))
		default:
			reply(msg.ID, `{}`)
		}
	}
}

const floodRegistry = `schema_version = 8

[tool_mcp_servers.flood]
transport = "stdio"
command = "SELF"
env = { TOOLGATE_FAKE_MCP = "flood" }
sandbox = false
enabled_tools = ["flood", "pid"]
default_tools_approval_mode = "auto"
startup_timeout_sec = 20
tool_timeout_sec = 60
`

// procStatus reads a field of /proc/self/status in KiB.
func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// peakSince returns a function that reports how far the process's peak RSS
// rose above its RSS now, in MiB: the kernel's high-water mark is reset
// (clear_refs 5) so that the peak is this test's.
func peakSince(t *testing.T) func() float64 {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("SKIPPING: cannot reset the peak RSS (/proc/self/clear_refs): %v", err)
	}
	base := procStatus(t, "VmRSS")
	return func() float64 { return float64(procStatus(t, "VmHWM")-base) / 1024 }
}

// floodMiB is the size of the big flood: 1 GiB, or TOOLGATE_FLOOD_MIB.
func floodMiB() int64 {
	if n, err := strconv.ParseInt(os.Getenv("TOOLGATE_FLOOD_MIB"), 10, 64); err == nil && n > 0 {
		return n
	}
	return 1024
}

// TestDownstreamFloodBounded: a stdio server that answers a call with a
// 1 GiB result costs toolgate less than 64 MiB: the message is discarded
// as it is read, the call answers isError with the size and the cap, and
// the stream is in step again for the next call, whether the id comes
// before the result (mcp-go) or after it (the TypeScript SDK). A message
// whose id cannot be read ends the connection; the next call starts the
// server again.
func TestDownstreamFloodBounded(t *testing.T) {
	r := loadRegistry(t, map[string]string{"10-flood.toml": floodRegistry})
	if r.State != conf.StateLoaded {
		t.Fatalf("registry %s: %v", r.State, r.Err())
	}
	h := newHarness(t, Options{}, gateway.Options{Registry: r, Eager: true}, nil)
	pid := resultText(h.call(t, "flood__pid", nil))
	if _, err := strconv.Atoi(pid); err != nil {
		t.Fatalf("flood__pid = %q", pid)
	}
	limit := gateway.DefaultMaxBytes + 64<<10

	size := floodMiB() << 20
	peak := peakSince(t)
	res := h.call(t, "flood__flood", map[string]any{"bytes": size, "id": "first"})
	grew := peak()
	t.Logf("a %d MiB downstream result: peak RSS %.1f MiB over the RSS before the call", size>>20, grew)
	if grew >= 64 {
		t.Errorf("a %d MiB downstream result raised the peak RSS by %.1f MiB, want < 64 MiB", size>>20, grew)
	}
	text := resultText(res)
	wantSize := fmt.Sprintf("a response of %d bytes, over toolgate's cap of %d bytes", size+int64(len(`{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":""}]}}`)), limit)
	if !res.IsError || !strings.Contains(text, wantSize) || !strings.Contains(text, "discarded as it was read") {
		t.Errorf("flood = %.300q (isError %v)\nwant isError with %q", text, res.IsError, wantSize)
	}
	if got := resultText(h.call(t, "flood__pid", nil)); got != pid {
		t.Errorf("after the flood: pid %q, want the same server %q (the stream resynchronised)", got, pid)
	}

	// The id after the result.
	res = h.call(t, "flood__flood", map[string]any{"bytes": 8 << 20, "id": "last"})
	if !res.IsError || !strings.Contains(resultText(res), "discarded as it was read") {
		t.Errorf("flood, id last = %.300q (isError %v)", resultText(res), res.IsError)
	}
	if got := resultText(h.call(t, "flood__pid", nil)); got != pid {
		t.Errorf("after the flood with the id last: pid %q, want %q", got, pid)
	}
	// Just under the message cap: read whole, then cut by capResult.
	res = h.call(t, "flood__flood", map[string]any{"bytes": limit - 200, "id": "first"})
	if !res.IsError || !strings.Contains(resultText(res), "over the cap of 1048576 bytes; dropped: the end of a text item") {
		t.Errorf("flood under the message cap = %.200q (isError %v), want it cut", resultText(res), res.IsError)
	}

	// No id: the connection ends, and the next call gets a new server.
	res = h.call(t, "flood__flood", map[string]any{"bytes": 8 << 20, "id": "none"})
	if !res.IsError || !strings.Contains(resultText(res), "with no id toolgate could read; it was stopped") {
		t.Errorf("flood, no id = %.300q (isError %v)", resultText(res), res.IsError)
	}
	if got := resultText(h.call(t, "flood__pid", nil)); got == pid || got == "" {
		t.Errorf("after a flood with no id: pid %q, want a new server (was %q)", got, pid)
	}
}

// floodHTTP is a streamable-HTTP MCP server whose "flood" tool answers
// with a body (application/json, chunked) or an SSE event as large as
// asked, streamed.
func floodHTTP(t *testing.T) string {
	t.Helper()
	m := mcpserver.NewMCPServer("flood", "1", mcpserver.WithToolCapabilities(false))
	m.AddTool(mcp.NewTool("flood", mcp.WithDescription("big")), func(_ context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, fmt.Errorf("served by the wrapper")
	})
	m.AddTool(mcp.NewTool("ok", mcp.WithDescription("small")), func(_ context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("ok"), nil
	})
	inner := mcpserver.NewStreamableHTTPServer(m)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string `json:"name"`
				Arguments struct {
					floodArgs
					SSE bool `json:"sse"`
				} `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" && msg.Params.Name == "flood" {
			a := msg.Params.Arguments
			if a.SSE {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "event: message\ndata: ")
				writeFlood(w, msg.ID, a.floodArgs)
				fmt.Fprint(w, "\n")
				return
			}
			w.Header().Set("Content-Type", "application/json")
			writeFlood(w, msg.ID, a.floodArgs)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// TestHTTPDownstreamFloodBounded: the same bound for a streamable-HTTP
// server, for a JSON body and for an SSE event, whatever the order of the
// id; the session keeps working.
func TestHTTPDownstreamFloodBounded(t *testing.T) {
	url := floodHTTP(t)
	r := loadRegistry(t, map[string]string{"10-web.toml": fmt.Sprintf(`schema_version = 8

[tool_mcp_servers.web]
transport = "streamable_http"
url = %q
enabled_tools = ["flood", "ok"]
default_tools_approval_mode = "auto"
tool_timeout_sec = 60
`, url)})
	if r.State != conf.StateLoaded {
		t.Fatalf("registry %s: %v", r.State, r.Err())
	}
	h := newHarness(t, Options{}, gateway.Options{Registry: r, Eager: true}, nil)
	for _, tc := range []struct {
		name string
		args map[string]any
	}{
		{"json, id first", map[string]any{"bytes": 256 << 20, "id": "first"}},
		{"json, id last", map[string]any{"bytes": 64 << 20, "id": "last"}},
		{"json, no id", map[string]any{"bytes": 64 << 20, "id": "none"}},
		{"sse, id first", map[string]any{"bytes": 256 << 20, "id": "first", "sse": true}},
		{"sse, id last", map[string]any{"bytes": 64 << 20, "id": "last", "sse": true}},
		{"sse, no id", map[string]any{"bytes": 64 << 20, "id": "none", "sse": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peak := peakSince(t)
			res := h.call(t, "web__flood", tc.args)
			grew := peak()
			t.Logf("%s: %d MiB result, peak RSS %.1f MiB over the RSS before the call", tc.name, tc.args["bytes"].(int)>>20, grew)
			if grew >= 64 {
				t.Errorf("peak RSS grew by %.1f MiB, want < 64 MiB", grew)
			}
			if text := resultText(res); !res.IsError || !strings.Contains(text, "bytes, over toolgate's cap of") {
				t.Errorf("flood = %.300q (isError %v), want isError naming the size and the cap", text, res.IsError)
			}
			if res := h.call(t, "web__ok", nil); res.IsError || resultText(res) != "ok" {
				t.Errorf("the next call = %q (isError %v)", resultText(res), res.IsError)
			}
		})
	}
}
