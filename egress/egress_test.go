package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/egress/allowlist"
)

// fixture is a proxy on 127.0.0.1 with a resolver of the test's own, and
// a target server (plain and TLS) on 127.0.0.1.
type fixture struct {
	proxy   *Proxy
	url     *url.URL
	plain   *httptest.Server
	tls     *httptest.Server
	port    string // the plain target's port
	tlsPort string
	mu      sync.Mutex
	records []Record
}

func newFixture(t *testing.T, rules func(f *fixture) []string, lim Limits) *fixture {
	t.Helper()
	f := &fixture{}
	f.plain = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "http://unlisted.test.example:"+f.port+"/", http.StatusFound)
		case "/big":
			w.Write([]byte(strings.Repeat("x", 1<<20)))
		default:
			fmt.Fprintf(w, "hello from %s", r.Host)
		}
	}))
	t.Cleanup(f.plain.Close)
	f.tls = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "tls hello") }))
	t.Cleanup(f.tls.Close)
	_, f.port, _ = net.SplitHostPort(f.plain.Listener.Addr().String())
	_, f.tlsPort, _ = net.SplitHostPort(f.tls.Listener.Addr().String())
	allow, err := allowlist.ParseList(rules(f))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string][]netip.Addr{
		"api.test.example":      {netip.MustParseAddr("127.0.0.1")},
		"loopback.test.example": {netip.MustParseAddr("127.0.0.1")},
		"meta.test.example":     {netip.MustParseAddr("169.254.169.254")},
		"unlisted.test.example": {netip.MustParseAddr("127.0.0.1")},
	}
	f.proxy = New(Config{
		Allow:  allow,
		Limits: lim,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			if a, ok := names[host]; ok {
				return a, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		},
		Record: func(r Record) {
			f.mu.Lock()
			f.records = append(f.records, r)
			f.mu.Unlock()
		},
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.proxy.Serve(l)
	t.Cleanup(f.proxy.Close)
	f.url = &url.URL{Scheme: "http", Host: l.Addr().String()}
	return f
}

// get fetches u through the proxy, not following redirects.
func (f *fixture) get(t *testing.T, u string) (int, string) {
	t.Helper()
	c := &http.Client{
		Transport:     &http.Transport{Proxy: http.ProxyURL(f.url), TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProxyDecisions: a listed name is reached (resolved by the proxy to
// an address it then dials), over plain HTTP and through CONNECT; an
// unlisted name, an unlisted IP literal, another port, and a listed name
// that resolves to loopback or to the metadata address are refused; a
// redirect is handed back, never followed. Every connection is one
// record.
func TestProxyDecisions(t *testing.T) {
	f := newFixture(t, func(f *fixture) []string {
		return []string{
			"api.test.example:" + f.port, "api.test.example:" + f.tlsPort, "127.0.0.1:" + f.port, "127.0.0.1:" + f.tlsPort,
			"loopback.test.example:" + f.port, "meta.test.example:80",
		}
	}, Limits{})
	for _, tc := range []struct {
		name, url  string
		wantStatus int
		wantBody   string
	}{
		{"listed name, plain", "http://api.test.example:" + f.port + "/", 200, "hello from api.test.example"},
		{"listed name, CONNECT", "https://api.test.example:" + f.tlsPort + "/", 200, "tls hello"},
		{"listed IP literal", "http://127.0.0.1:" + f.port + "/", 200, "hello"},
		{"redirect not followed", "http://api.test.example:" + f.port + "/redirect", 302, ""},
		{"unlisted name", "http://unlisted.test.example:" + f.port + "/", 403, "not in the allowlist"},
		{"unlisted name, CONNECT", "https://unlisted.test.example:" + f.tlsPort + "/", 0, "Forbidden"},
		{"unlisted IP literal", "http://127.0.0.2:" + f.port + "/", 403, "IP literal not in the allowlist"},
		{"another port", "http://api.test.example:1/", 403, "not in the allowlist"},
		{"listed name resolving to loopback", "http://loopback.test.example:" + f.port + "/", 403, "never reached unless listed"},
		{"listed name resolving to metadata", "http://meta.test.example/", 403, "169.254.0.0/16"},
	} {
		// loopback.test.example resolves to 127.0.0.1, which is listed on
		// that port: allowed. Its refusal is checked below without the IP.
		if tc.name == "listed name resolving to loopback" {
			continue
		}
		status, body := f.get(t, tc.url)
		if status != tc.wantStatus || !strings.Contains(body, tc.wantBody) {
			t.Errorf("%s: %d %q, want %d with %q", tc.name, status, body, tc.wantStatus, tc.wantBody)
		}
	}

	g := newFixture(t, func(f *fixture) []string { return []string{"loopback.test.example:" + f.port} }, Limits{})
	if status, body := g.get(t, "http://loopback.test.example:"+g.port+"/"); status != 403 || !strings.Contains(body, "127.0.0.1 (127.0.0.0/8)") {
		t.Errorf("a listed name resolving to loopback: %d %q, want 403 naming the range", status, body)
	}

	f.proxy.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	allowed, refused := 0, 0
	for _, r := range f.records {
		switch r.Decision {
		case Allowed:
			allowed++
			if r.Addr == "" || r.Down == 0 {
				t.Errorf("an allowed record without its address or bytes: %+v", r)
			}
		case Refused:
			refused++
			if r.Reason == "" || r.Addr != "" {
				t.Errorf("a refused record without a reason, or with an address dialled: %+v", r)
			}
		}
	}
	if allowed != 4 || refused != 5 {
		t.Errorf("%d allowed and %d refused records, want 4 and 5: %+v", allowed, refused, f.records)
	}
}

// TestProxyLimits: past the call's connections or bytes, the proxy
// refuses and names the limit.
func TestProxyLimits(t *testing.T) {
	f := newFixture(t, func(f *fixture) []string { return []string{"127.0.0.1:" + f.port} }, Limits{Conns: 2})
	for i := range 2 {
		if status, _ := f.get(t, "http://127.0.0.1:"+f.port+"/"); status != 200 {
			t.Fatalf("call %d: %d", i, status)
		}
	}
	if status, body := f.get(t, "http://127.0.0.1:"+f.port+"/"); status != 403 || !strings.Contains(body, LimitConns) || f.proxy.Limit() != LimitConns {
		t.Errorf("third connection: %d %q, limit %q; want 403 naming %s", status, body, f.proxy.Limit(), LimitConns)
	}

	g := newFixture(t, func(f *fixture) []string { return []string{"127.0.0.1:" + f.port} }, Limits{Bytes: 64 << 10})
	status, body := g.get(t, "http://127.0.0.1:"+g.port+"/big")
	if len(body) > 64<<10 || g.proxy.Limit() != LimitBytes {
		t.Errorf("a 1 MiB body under a 64 KiB cap: %d, %d bytes, limit %q; want it cut at the cap and %s named", status, len(body), g.proxy.Limit(), LimitBytes)
	}
	if _, used := g.proxy.Used(); used != 64<<10 {
		t.Errorf("the proxy moved %d bytes under a %d-byte cap: want exactly the cap", used, 64<<10)
	}
	if status, body := g.get(t, "http://127.0.0.1:"+g.port+"/"); status != 403 || !strings.Contains(body, LimitBytes) {
		t.Errorf("after the cap: %d %q, want 403 naming %s", status, body, LimitBytes)
	}
}

// TestProxyNAT64: the proxy judges a name that resolves into NAT64's
// well-known prefix by the IPv4 address it carries (refused for loopback
// or metadata unless that IPv4 is listed, dialled as resolved when
// allowed), refuses the local-use prefix unless the address itself is
// listed, and treats an IP literal of the well-known prefix as its IPv4.
func TestProxyNAT64(t *testing.T) {
	names := map[string][]netip.Addr{
		"loop.test.example":   {netip.MustParseAddr("64:ff9b::7f00:1")},
		"meta.test.example":   {netip.MustParseAddr("64:ff9b::a9fe:a9fe")},
		"public.test.example": {netip.MustParseAddr("64:ff9b::5db8:d822")},
		"local.test.example":  {netip.MustParseAddr("64:ff9b:1::5db8:d822")},
	}
	resolve := func(_ context.Context, host string) ([]netip.Addr, error) { return names[host], nil }
	for _, tc := range []struct {
		name    string
		rules   []string
		ask     string
		want    string // the address allowed, or "" when refused
		wantErr string
	}{
		{"loopback via NAT64", []string{"loop.test.example:80"}, "loop.test.example:80", "", "[64:ff9b::7f00:1 (127.0.0.0/8 via 64:ff9b::/96)]"},
		{"loopback via NAT64, its IPv4 listed", []string{"loop.test.example:80", "127.0.0.1:80"}, "loop.test.example:80", "[64:ff9b::7f00:1]:80", ""},
		{"loopback via NAT64, its IPv4 listed on another port", []string{"loop.test.example:80", "127.0.0.1:81"}, "loop.test.example:80", "", "127.0.0.0/8 via 64:ff9b::/96"},
		{"metadata via NAT64", []string{"meta.test.example:80"}, "meta.test.example:80", "", "169.254.0.0/16 via 64:ff9b::/96"},
		{"public via NAT64", []string{"public.test.example:443"}, "public.test.example:443", "[64:ff9b::5db8:d822]:443", ""},
		{"local-use NAT64", []string{"local.test.example:443"}, "local.test.example:443", "", "64:ff9b:1::/48"},
		{"local-use NAT64, the address listed", []string{"local.test.example:443", "[64:ff9b:1::5db8:d822]:443"}, "local.test.example:443", "[64:ff9b:1::5db8:d822]:443", ""},
		{"local-use NAT64, its /96 IPv4 listed", []string{"local.test.example:443", "93.184.216.34:443"}, "local.test.example:443", "", "64:ff9b:1::/48"},
		{"NAT64 literal, its IPv4 listed", []string{"127.0.0.1:80"}, "[64:ff9b::7f00:1]:80", "[64:ff9b::7f00:1]:80", ""},
		{"NAT64 literal, not listed", []string{"127.0.0.2:80"}, "[64:ff9b::7f00:1]:80", "", "an IP literal not in the allowlist"},
		{"IPv4 literal, its NAT64 form listed", []string{"[64:ff9b::7f00:1]:80"}, "127.0.0.1:80", "127.0.0.1:80", ""},
	} {
		allow, err := allowlist.ParseList(tc.rules)
		if err != nil {
			t.Fatal(err)
		}
		p := New(Config{Allow: allow, Resolve: resolve})
		got, err := p.check(context.Background(), tc.ask)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: check(%s) = %v, %v; want refused with %q", tc.name, tc.ask, got, err, tc.wantErr)
			}
		case err != nil || got.String() != tc.want:
			t.Errorf("%s: check(%s) = %v, %v; want %s", tc.name, tc.ask, got, err, tc.want)
		}
	}
}
