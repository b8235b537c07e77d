package server

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/mcptest"
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
