//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/mcptest"
	"github.com/toolgate/toolgate/internal/testbin"
)

// TestHTTPUnixSocket: serve --listen unix:/PATH serves local clients
// without a token, on a socket of mode 0600 (0660 and the group with
// --listen-group); the calls are principal "local", audited with the
// peer's uid; SIGTERM removes the socket and exits 0.
func TestHTTPUnixSocket(t *testing.T) {
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf("tool hello %[1]s read 20 4096 off %[2]s -- echo hello\n", probe, dir))
	for _, tc := range []struct {
		name  string
		extra []string
		mode  os.FileMode
		gid   uint32
	}{
		{"owner only", nil, 0o600, uint32(os.Getegid())},
		{"--listen-group nogroup", []string{"--listen-group", "nogroup"}, 0o660, 65534},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sockDir, err := os.MkdirTemp("", "tge2e")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(sockDir) })
			path := filepath.Join(sockDir, "mcp.sock")
			s := startHTTPServer(t, conf, append([]string{"--listen", "unix:" + path}, tc.extra...)...)
			if s.sock != path {
				t.Fatalf("serve named the socket %q, want %q", s.sock, path)
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != tc.mode || st.Gid != tc.gid {
				t.Errorf("socket %s gid %d, want a socket %04o gid %d", fi.Mode(), st.Gid, tc.mode, tc.gid)
			}
			c := mcptest.Connect(t, s.url, mcptest.Options{Legacy: true, HTTP: unixHTTPClient(path), Name: "toolgate-e2e-http"})
			if res, err := call1(c, "hello"); err != nil || !strings.Contains(text(res), "hello") {
				t.Fatalf("hello over the socket: %v %v", res, err)
			}
			recs := s.auditRecords(t)
			if len(recs) != 1 || recs[0]["principal"] != "local" || recs[0]["auth"] != "local" || recs[0]["peer_uid"] != float64(os.Geteuid()) {
				t.Errorf("audit %v: want principal local, auth local, peer_uid %d", recs, os.Geteuid())
			}
			if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-s.exited:
				s.exited <- err
				if err != nil {
					t.Errorf("exit after SIGTERM: %v, want 0", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("toolgate did not exit after SIGTERM")
			}
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Errorf("the socket after exit: %v, want removed", err)
			}
		})
	}
}

// TestHTTPHostsAndConnections: the binary's Host check and connection
// bounds, through its flags: a rebinding Host is refused 403 on /readyz of
// both listeners and an --allow-host name or the pod IP is served; with
// --max-connections-per-client 2 a client's third connection is closed at
// once and counted in /metrics, beside the configured bounds.
func TestHTTPHostsAndConnections(t *testing.T) {
	conf := writeConf(t, "")
	mport := freePort(t)
	s := startHTTPServer(t, conf, "--auth-tokens", writeTokens(t, "ci "+e2eToken), "--metrics-listen", "127.0.0.1:"+mport,
		"--allow-host", "toolgate.internal", "--max-connections-per-client", "2", "--max-connections", "100", "--idle-timeout", "30s")
	mbase := "http://127.0.0.1:" + mport
	waitFor(t, 20*time.Second, func() bool {
		r, err := http.Get(mbase + "/healthz")
		if err == nil {
			drain(r)
		}
		return err == nil
	})
	for _, base := range []string{s.base, mbase} {
		for _, tc := range []struct {
			host string
			want int
		}{
			{"evil.example.com", 403},
			{"toolgate.internal", 200},
			{"10.244.0.9:8080", 200},
		} {
			req, _ := http.NewRequest(http.MethodGet, base+"/healthz", nil)
			req.Host = tc.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
			if resp.StatusCode != tc.want {
				t.Errorf("GET %s/healthz with Host %q = %d, want %d", base, tc.host, resp.StatusCode, tc.want)
			}
		}
	}
	metrics := func() string {
		resp, err := http.Get(mbase + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// The Host checks' idle connection holds a place of 127.0.0.1 until
	// it is closed.
	http.DefaultClient.CloseIdleConnections()
	waitFor(t, 10*time.Second, func() bool {
		return strings.Contains(metrics(), `toolgate_http_connections{listener="mcp"} 0`+"\n")
	})
	addr := strings.TrimPrefix(s.base, "http://")
	held := make([]net.Conn, 0, 3)
	for range 3 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	answered := func(c net.Conn) bool {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	if !answered(held[0]) || !answered(held[1]) {
		t.Fatal("the first two connections were not served")
	}
	if answered(held[2]) {
		t.Error("the third connection of 127.0.0.1 was served, want closed (--max-connections-per-client 2)")
	}
	b := metrics()
	for _, want := range []string{
		`toolgate_http_connections{listener="mcp"} 2`,
		`toolgate_http_connections_max{listener="mcp",per="client"} 2`,
		`toolgate_http_connections_max{listener="mcp",per="listener"} 100`,
		`toolgate_http_connections_refused_total{limit="max_connections_per_client",listener="mcp"} 1`,
		`toolgate_http_auth_failures_total{reason="host"} 2`,
	} {
		if !strings.Contains(b, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// drain reads the rest of resp's body and closes it, so that its
// connection goes back to the client's idle ones. A body closed unread
// closes the connection instead, and the next request dials a new one
// while the server may still count the old one: with
// --max-connections-per-client 2, a third dial in a row could be refused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// freePort is a TCP port of 127.0.0.1 free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}
