package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/mcptest"
	"github.com/toolgate/toolgate/policy"
	rt "github.com/toolgate/toolgate/runtime"
)

// BenchmarkHTTPCall is the cost of one tools/call over the HTTP
// transport on 127.0.0.1 with a static bearer token, the tool a fake
// runner (no process): what the transport, its checks and mcp-go add to
// a call. Both eras, one client each.
func BenchmarkHTTPCall(b *testing.B) {
	dir := b.TempDir()
	p := filepath.Join(dir, "tokens")
	if err := os.WriteFile(p, []byte("alice "+aliceToken+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	toks, err := conf.LoadTokens(p)
	if err != nil {
		b.Fatal(err)
	}
	quiet := logrus.New()
	quiet.SetOutput(discard{})
	s := New(Options{
		Version: "bench", Conf: loadConf(b, httpConf), Direct: &fakeRunner{res: rt.Result{Output: []byte("hi\n")}},
		Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{}), MaxConcurrent: 8, Log: quiet, Audit: quiet, Metrics: true,
	})
	h, err := NewHTTP(s, HTTPOptions{Auth: auth.NewStaticTokens(toks)})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, ln, nil) }()
	defer func() { cancel(); <-done }()
	url := "http://" + ln.Addr().String() + MCPPath
	for _, era := range []struct {
		name   string
		legacy bool
	}{{"2025-11-25", true}, {"2026-07-28", false}} {
		b.Run(era.name, func(b *testing.B) {
			c := mcptest.Connect(b, url, mcptest.Options{Token: aliceToken, Legacy: era.legacy, Name: "bench", Timeout: 10 * time.Second})
			req := mcp.CallToolRequest{}
			req.Params.Name = "hello"
			b.ResetTimer()
			for range b.N {
				res, err := c.CallTool(context.Background(), req)
				if err != nil || res.IsError {
					b.Fatalf("call: %v %v", res, err)
				}
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// listConf is a tools.conf of n read-class tools, t000 on: a big
// deployment's listing (500 tools are about 1 MB of JSON).
func listConf(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "tool t%03d EXE read 1 100 off DIR --\n", i)
	}
	return b.String()
}

// countingTransport counts the response body bytes that reach the client.
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.n}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// BenchmarkHTTPList is what a client pays for tools/list of a 500-tool
// tools.conf (about 1 MB) over HTTP on 127.0.0.1 with a static bearer
// token: the bytes of each answer's body (B/list) and its time
// (µs/list, also ns/op). mcp-go's client, which decodes the list as an
// agent's would, in both eras; raw, a stateless client that reads the
// answer's bytes and decodes nothing: the server's and the wire's share;
// raw-policy, the same under a policy that decides each tool for the
// caller (every one permitted: the decisions, no audit record). The
// ttl-client is an agent that lists before each turn, a turn every 5 s
// of a virtual clock, and reuses its list while the ttlMs the server
// sent (DefaultListTTL) says it is fresh: what it pays a turn (B/turn,
// lists/turn, ns/op a turn).
func BenchmarkHTTPList(b *testing.B) {
	const tools = 500
	dir := b.TempDir()
	p := filepath.Join(dir, "tokens")
	if err := os.WriteFile(p, []byte("alice "+aliceToken+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	toks, err := conf.LoadTokens(p)
	if err != nil {
		b.Fatal(err)
	}
	permitRead, err := policy.Parse("read.cedar", []byte(`permit (principal == Principal::"alice", action, resource) when { resource.class == "read" };`))
	if err != nil {
		b.Fatal(err)
	}
	c := loadConf(b, listConf(tools))
	for _, tc := range []struct {
		name      string
		legacy    bool
		policy    *policy.Engine
		turnEvery time.Duration // a ttl-client: one turn this often
		raw       bool          // posts the request and reads the answer's bytes, decoding nothing
	}{
		{name: "2025-11-25", legacy: true},
		{name: "2026-07-28"},
		{name: "2026-07-28/raw", raw: true},
		{name: "2026-07-28/raw-policy", raw: true, policy: permitRead},
		{name: "2026-07-28/ttl-client", turnEvery: 5 * time.Second},
	} {
		b.Run(tc.name, func(b *testing.B) {
			url := serveList(b, c, toks, tc.policy)
			wire := &countingTransport{next: http.DefaultTransport.(*http.Transport).Clone()}
			hc := &http.Client{Transport: wire}
			cl, err := mcptest.Dial(context.Background(), url, mcptest.Options{
				Token: aliceToken, Legacy: tc.legacy, HTTP: hc, Name: "bench", Timeout: 10 * time.Second,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close() // before the server stops (serveList's cleanup)
			list := func() *mcp.ListToolsResult {
				if tc.raw {
					rawList(b, hc, url)
					return nil
				}
				res, err := cl.ListTools(context.Background(), mcp.ListToolsRequest{})
				if err != nil || len(res.Tools) < tools {
					b.Fatalf("tools/list: %v, want %d tools and the built-ins", err, tools)
				}
				return res
			}
			list() // warm: the connection, the first encoding
			wire.n.Store(0)
			b.ResetTimer()
			if tc.turnEvery > 0 {
				lists := ttlTurns(b.N, tc.turnEvery, list)
				b.StopTimer()
				b.ReportMetric(float64(wire.n.Load())/float64(b.N), "B/turn")
				b.ReportMetric(float64(lists)/float64(b.N), "lists/turn")
				return
			}
			for range b.N {
				list()
			}
			b.StopTimer()
			b.ReportMetric(float64(wire.n.Load())/float64(b.N), "B/list")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/list")
		})
	}
}

// serveList serves c over HTTP on 127.0.0.1 (tokens toks, policy e,
// --list-ttl's default) until b ends, and returns the MCP URL.
func serveList(b *testing.B, c *conf.Config, toks *conf.Tokens, e *policy.Engine) string {
	b.Helper()
	quiet := logrus.New()
	quiet.SetOutput(discard{})
	s := New(Options{
		Version: "bench", Conf: c, Direct: &fakeRunner{}, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{}),
		Log: quiet, Audit: quiet, Metrics: true, Policy: e, ListTTL: DefaultListTTL,
	})
	h, err := NewHTTP(s, HTTPOptions{Auth: auth.NewStaticTokens(toks)})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, ln, nil) }()
	b.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String() + MCPPath
}

// rawList posts a stateless tools/list with hc and reads the answer's
// bytes.
func rawList(b *testing.B, hc *http.Client, url string) {
	b.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(modernList))
	if err != nil {
		b.Fatal(err)
	}
	req.Header = http.Header{
		"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Authorization": {"Bearer " + aliceToken},
		"Mcp-Protocol-Version": {mcp.ProtocolVersion20260728}, "Mcp-Method": {"tools/list"},
	}
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || n < 500_000 {
		b.Fatalf("tools/list: %d, %d bytes", resp.StatusCode, n)
	}
}

// ttlTurns plays n turns, one every every of a virtual clock, each
// listing first unless the last list's ttlMs says it is still fresh, and
// returns how many lists it made.
func ttlTurns(n int, every time.Duration, list func() *mcp.ListToolsResult) int {
	lists := 0
	var fetched, fresh time.Duration
	for i := range n {
		now := time.Duration(i) * every
		if lists > 0 && now-fetched < fresh {
			continue
		}
		fetched, fresh = now, 0
		if ms, ok := list().TTL(); ok {
			fresh = time.Duration(ms) * time.Millisecond
		}
		lists++
	}
	return lists
}

// modernList is a stateless 2026-07-28 tools/list request.
const modernList = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
