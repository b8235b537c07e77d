package server

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/auth/authtest"
)

// hostGet GETs base+path (POSTs an initialize to /mcp) with the Host
// header host (and a token when given), returning the status.
func hostGet(t *testing.T, base, path, host, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if path == MCPPath {
		req, err = http.NewRequest(http.MethodPost, base+path, strings.NewReader(initBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestHTTPHostCheckedEverywhere: DNS rebinding (a page of evil.example
// whose name now resolves to toolgate's address) is refused 403 on every
// path of both listeners, the unauthenticated /healthz, /readyz and the
// metrics listener's /metrics included; a request by IP literal (what a
// kubelet probe and Prometheus send: Host is the pod's IP:port) or by
// localhost is served.
func TestHTTPHostCheckedEverywhere(t *testing.T) {
	f := startHTTPWith(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken))}, true)
	for _, l := range []struct {
		name, base string
		paths      []string
	}{
		{"main listener", f.base, []string{"/healthz", "/readyz", "/metrics", MCPPath}},
		{"metrics listener", f.metrics, []string{"/healthz", "/readyz", "/metrics"}},
	} {
		port := l.base[strings.LastIndex(l.base, ":")+1:]
		for _, path := range l.paths {
			for _, tc := range []struct {
				host string
				want int
			}{
				{"evil.example.com:" + port, 403},
				{"evil.example.com", 403},
				{"127.0.0.1.nip.io:" + port, 403},
				{"127.0.0.1:" + port, 0},
				{"localhost:" + port, 0},
				{"10.244.1.7:" + port, 0}, // a pod IP
				{"[::1]:" + port, 0},
			} {
				got := hostGet(t, l.base, path, tc.host, aliceToken)
				served := got != 403 && got != 421
				if tc.want == 403 && served || tc.want == 0 && !served {
					t.Errorf("%s: GET %s with Host %q = %d, want %s", l.name, path, tc.host, got,
						map[bool]string{true: "refused 403", false: "served"}[tc.want == 403])
				}
			}
		}
	}
}

// TestHTTPAllowHost: a name given to --allow-host (any case, with or
// without the root's dot), the host of --oauth-resource and any Host over
// a unix socket are served; another name is refused and counted; an
// --allow-host that is not a host name is refused at start.
func TestHTTPAllowHost(t *testing.T) {
	f := startHTTPWith(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken)), AllowHosts: []string{"toolgate.internal"}}, true)
	for _, base := range []string{f.base, f.metrics} {
		port := base[strings.LastIndex(base, ":")+1:]
		for _, tc := range []struct {
			host string
			want int
		}{
			{"toolgate.internal:" + port, 200},
			{"TOOLGATE.Internal.:" + port, 200},
			{"toolgate.internal", 200},
			{"other.internal:" + port, 403},
			{"toolgate.internal.evil.example:" + port, 403},
		} {
			if got := hostGet(t, base, "/healthz", tc.host, ""); got != tc.want {
				t.Errorf("GET %s/healthz with Host %q = %d, want %d", base, tc.host, got, tc.want)
			}
		}
	}
	if got := testutil.ToFloat64(f.h.metrics.auth.WithLabelValues("host")); got != 4 {
		t.Errorf(`toolgate_http_auth_failures_total{reason="host"} = %v, want 4`, got)
	}

	is := authtest.NewIssuer(t)
	o, _ := startOAuth(t, is, nil)
	if got := hostGet(t, o.base, "/readyz", "toolgate.test", ""); got == 403 {
		t.Errorf("GET /readyz with the --oauth-resource host: %d, want served", got)
	}

	u := startHTTP(t, HTTPOptions{})
	req, _ := http.NewRequest(http.MethodGet, u.base+"/healthz", nil)
	req.Host = "evil.example.com"
	resp, err := testHTTPClient(u.base).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /healthz over a unix socket with Host evil.example.com = %d, want 200 (no browser reaches a socket)", resp.StatusCode)
	}

	for _, bad := range []string{"toolgate.internal:8080", "https://toolgate.internal", "", "[::1]"} {
		s := New(Options{Conf: loadConf(t, httpConf)})
		if _, err := NewHTTP(s, HTTPOptions{AllowHosts: []string{bad}}); err == nil || !strings.Contains(err.Error(), "--allow-host") {
			t.Errorf("NewHTTP(--allow-host %q) = %v, want refused", bad, err)
		}
	}
}
