package mcptest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// TestPost: Post sends the method, the body, the JSON-RPC headers, the
// token as a bearer and Host as the request's host, and returns the
// status, headers and body; without a token it sends no Authorization.
func TestPost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Got", r.Method+" "+r.Host+" "+r.Header.Get("Content-Type")+" | "+r.Header.Get("Accept")+" | "+r.Header.Get("Authorization")+" | "+r.Header.Get("X-Extra"))
		w.WriteHeader(http.StatusTeapot)
		w.Write(b)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name string
		req  Request
		want string
	}{
		{
			"token and headers",
			Request{Token: "tok", Body: `{"id":1}`, Header: map[string]string{"Host": "h.test", "X-Extra": "x"}},
			"POST h.test application/json | application/json, text/event-stream | Bearer tok | x",
		},
		{
			"no token, GET",
			Request{Method: http.MethodGet, Body: `{"id":1}`},
			"GET " + srv.Listener.Addr().String() + " application/json | application/json, text/event-stream |  |",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := Post(t, nil, srv.URL, tc.req)
			if resp.Status != http.StatusTeapot || resp.Body != `{"id":1}` || resp.Header.Get("X-Got") != tc.want {
				t.Errorf("Post = %d %q %q, want 418 %q %q", resp.Status, resp.Body, resp.Header.Get("X-Got"), `{"id":1}`, tc.want)
			}
		})
	}
}

func TestText(t *testing.T) {
	r := &mcp.CallToolResult{Content: []mcp.Content{
		mcp.NewTextContent("a"), mcp.NewImageContent("AAAA", "image/png"), mcp.NewTextContent("b"),
	}}
	if got := Text(r); got != "ab" {
		t.Errorf("Text = %q, want %q", got, "ab")
	}
}
