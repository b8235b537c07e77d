package server

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolgate/toolgate/auth"
)

// dialFrom opens a TCP connection to addr from the local address src
// (127.0.0.1 and 127.0.0.2 are two clients of one machine's loopback).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// served sends one request on c and reports whether it was answered (a
// refused connection is closed before it is read).
func served(c net.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// TestHTTPConnectionBounds: with --max-connections 3 and
// --max-connections-per-client 2, a client's third connection and the
// listener's fourth are closed as soon as accepted, the connections open
// go on serving, the refusals and the open count are in /metrics, and a
// closed connection's place is taken again.
func TestHTTPConnectionBounds(t *testing.T) {
	f := startHTTPWith(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken)), MaxConns: 3, MaxConnsPerClient: 2}, true)
	m := f.h.metrics
	addr := strings.TrimPrefix(f.base, "http://")
	a1, a2 := dialFrom(t, "127.0.0.1", addr), dialFrom(t, "127.0.0.1", addr)
	if !served(a1) || !served(a2) {
		t.Fatal("the first two connections of 127.0.0.1 were not served")
	}
	if served(dialFrom(t, "127.0.0.1", addr)) {
		t.Error("the third connection of 127.0.0.1 was served, want closed (--max-connections-per-client 2)")
	}
	b1 := dialFrom(t, "127.0.0.2", addr)
	if !served(b1) {
		t.Fatal("the first connection of 127.0.0.2 was not served")
	}
	if served(dialFrom(t, "127.0.0.2", addr)) {
		t.Error("the listener's fourth connection was served, want closed (--max-connections 3)")
	}
	if !served(a2) || !served(b1) {
		t.Error("a connection within the bounds stopped serving after the refusals")
	}
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{`toolgate_http_connections{listener="mcp"}`, testutil.ToFloat64(m.conns.WithLabelValues(listenerMCP)), 3},
		{`toolgate_http_connections_refused_total{listener="mcp",limit="max_connections_per_client"}`, testutil.ToFloat64(m.refused.WithLabelValues(listenerMCP, limitConnsPerClient)), 1},
		{`toolgate_http_connections_refused_total{listener="mcp",limit="max_connections"}`, testutil.ToFloat64(m.refused.WithLabelValues(listenerMCP, limitConns)), 1},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// The same, as Prometheus reads it from the metrics listener (whose
	// own connection is its listener's first).
	code, body := getStatus(t, f.metrics+"/metrics", "")
	for _, want := range []string{
		`toolgate_http_connections{listener="mcp"} 3`,
		`toolgate_http_connections{listener="metrics"} 1`,
		`toolgate_http_connections_max{listener="mcp",per="listener"} 3`,
		`toolgate_http_connections_max{listener="mcp",per="client"} 2`,
		`toolgate_http_connections_refused_total{limit="max_connections",listener="mcp"} 1`,
		`toolgate_http_connections_refused_total{limit="max_connections_per_client",listener="mcp"} 1`,
		`toolgate_http_connections_refused_total{limit="max_connections",listener="metrics"} 0`,
	} {
		if code != 200 || !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}
	a1.Close()
	waitFor(t, func() bool { return testutil.ToFloat64(m.conns.WithLabelValues(listenerMCP)) == 2 })
	if !served(dialFrom(t, "127.0.0.1", addr)) {
		t.Error("a new connection of 127.0.0.1 after one closed was not served")
	}
}

// TestHTTPIdleTimeout: a keep-alive connection idle past --idle-timeout is
// closed, and its place given back.
func TestHTTPIdleTimeout(t *testing.T) {
	f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken)), IdleTimeout: 200 * time.Millisecond})
	c := dialFrom(t, "127.0.0.1", strings.TrimPrefix(f.base, "http://"))
	if !served(c) {
		t.Fatal("not served")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes of an idle connection, want it closed", n)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the idle connection was closed after %s, want about 200ms", d)
	}
	waitFor(t, func() bool { return testutil.ToFloat64(f.h.metrics.conns.WithLabelValues(listenerMCP)) == 0 })
}
