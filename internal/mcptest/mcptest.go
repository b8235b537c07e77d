// Package mcptest is the MCP HTTP client of toolgate's tests and bench:
// mcp-go's streamable HTTP client with a bearer token, in either era of
// the protocol, initialized; a raw JSON-RPC POST for what that client
// would not send; and the readers of a result's text and a tools/list.
package mcptest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// Options are how Dial connects.
type Options struct {
	// Token is the bearer token; none sends no Authorization header.
	Token string
	// Legacy is the 2025-11-25 session era (a session id, initialize
	// first); otherwise the stateless 2026-07-28 revision.
	Legacy bool
	// HTTP makes the requests; nil is http.DefaultClient.
	HTTP *http.Client
	// Name is the clientInfo name; none is "toolgate-test".
	Name string
	// Timeout bounds the start and the initialize; none is 20 s.
	Timeout time.Duration
}

// Dial connects mcp-go's streamable HTTP client to the MCP endpoint url
// and initializes it. The caller closes it.
func Dial(ctx context.Context, url string, o Options) (*client.Client, error) {
	hc := o.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	topts := []transport.StreamableHTTPCOption{transport.WithHTTPBasicClient(hc)}
	if o.Token != "" {
		topts = append(topts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + o.Token}))
	}
	tr, err := transport.NewStreamableHTTP(url, topts...)
	if err != nil {
		return nil, err
	}
	var copts []client.ClientOption
	if o.Legacy {
		copts = append(copts, client.WithLegacyProtocolOnly()) //nolint:staticcheck // SA1019: the 2025-11-25 session era is what the tests and the bench measure
	}
	c := client.NewClient(tr, copts...)
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 20 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	name := o.Name
	if name == "" {
		name = "toolgate-test"
	}
	req := mcp.InitializeRequest{}
	req.Params.ClientInfo = mcp.Implementation{Name: name, Version: "1"}
	if _, err := c.Initialize(ctx, req); err != nil {
		c.Close()
		return nil, fmt.Errorf("initialize over HTTP: %w", err)
	}
	return c, nil
}

// Connect is Dial for a test: a failure to connect fails t, and the
// client is closed at t's cleanup.
func Connect(t testing.TB, url string, o Options) *client.Client {
	t.Helper()
	c, err := Dial(context.Background(), url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Request is one raw HTTP request to an MCP endpoint.
type Request struct {
	Method string // POST when empty
	Token  string // the bearer token; none sends no Authorization header
	Body   string
	// Header are more headers; "Host" sets the request's Host.
	Header map[string]string
}

// Response is the answer to a Request, its body read whole (or as far
// as the server sent it).
type Response struct {
	Status int
	Header http.Header
	Body   string
}

// Post sends r to url with hc (nil is http.DefaultClient), as a
// JSON-RPC message: Content-Type application/json, and an Accept of
// JSON and an event stream.
func Post(t testing.TB, hc *http.Client, url string, r Request) Response {
	t.Helper()
	if hc == nil {
		hc = http.DefaultClient
	}
	m := r.Method
	if m == "" {
		m = http.MethodPost
	}
	req, err := http.NewRequest(m, url, strings.NewReader(r.Body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	for k, v := range r.Header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // a body cut short is what the test looks at
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

// Text is the text of a result's text contents, joined.
func Text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// Names lists the tools c is served, in tools/list order.
func Names(t testing.TB, c *client.Client) []string {
	t.Helper()
	res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	return out
}
