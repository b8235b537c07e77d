package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/egress/allowlist"
)

const testSecret = "Bearer sk-injected-0123456789"

// injectFixture: two TLS servers on 127.0.0.1 that remember the headers
// they got, a proxy listing both that holds a credential for the first.
type injectFixture struct {
	proxy        *Proxy
	proxyURL     *url.URL
	keyed, plain *httptest.Server
	keyedDest    string
	ca           *CA
	mu           sync.Mutex
	seen         map[string][]http.Header // server name → requests' headers
	records      []Record
}

func newInjectFixture(t testing.TB) *injectFixture {
	t.Helper()
	f := &injectFixture{seen: map[string][]http.Header{}}
	serve := func(name string) *httptest.Server {
		s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			f.seen[name] = append(f.seen[name], r.Header.Clone())
			f.mu.Unlock()
			// A server that reflects the header in its own, in part, in
			// another case and in a trailer: the proxy drops them all on
			// the way back.
			auth := r.Header.Get("Authorization")
			w.Header().Set("X-Echo", auth)
			w.Header().Set("X-Token", strings.ToUpper(strings.TrimPrefix(auth, "Bearer ")))
			w.Header().Set("Trailer", "X-Trailer-Echo")
			fmt.Fprintf(w, "%s answered %s", name, r.Method)
			w.Header().Set("X-Trailer-Echo", auth)
		}))
		t.Cleanup(s.Close)
		return s
	}
	f.keyed, f.plain = serve("keyed"), serve("plain")
	f.keyedDest = f.keyed.Listener.Addr().String()
	allow, err := allowlist.ParseList([]string{f.keyedDest, f.plain.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(f.keyed.Certificate())
	roots.AddCert(f.plain.Certificate())
	if f.ca, err = NewCA(); err != nil {
		t.Fatal(err)
	}
	f.proxy = New(Config{
		Allow:         allow,
		Inject:        map[string]Injection{f.keyedDest: {Header: "Authorization", Value: testSecret}},
		CA:            f.ca,
		UpstreamRoots: roots,
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
	f.proxyURL = &url.URL{Scheme: "http", Host: l.Addr().String()}
	return f
}

// client is a tool's HTTP client through the proxy: it trusts the server
// CA (as a sandbox with a credential does) and the plain server's own
// certificate (tunnelled as it is).
func (f *injectFixture) client() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.ca.PEM())
	pool.AddCert(f.plain.Certificate())
	return &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(f.proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: pool},
	}}
}

func (f *injectFixture) do(t *testing.T, method, rawURL string, h http.Header) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(req.Header, h)
	resp, err := f.client().Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	got := resp.Header.Clone()
	for k, v := range resp.Trailer { // what came after the body too
		got["Trailer-"+k] = v
	}
	return resp.StatusCode, string(b), got
}

// TestInjectCredential: a request to the credentialed destination reaches
// it with the operator's header, replacing (not adding to) what the tool
// set, and with no other credential-bearing header; what the destination
// reflects is not given back; the record says a credential was injected,
// never which. Another destination is tunnelled as it is and gets nothing.
func TestInjectCredential(t *testing.T) {
	f := newInjectFixture(t)
	code, body, hdr := f.do(t, "GET", "https://"+f.keyedDest+"/v1/models", http.Header{
		"Authorization":       {"Bearer the-tools-own"},
		"Proxy-Authorization": {"Basic eDp5"},
		"X-Other":             {"kept"},
	})
	if code != 200 || body != "keyed answered GET" {
		t.Fatalf("keyed: %d %q", code, body)
	}
	if strings.Contains(strings.ToLower(fmt.Sprint(hdr)), "sk-injected") {
		t.Errorf("the response gives the credential back to the tool: %v", hdr)
	}
	code, body, _ = f.do(t, "GET", "https://"+f.plain.Listener.Addr().String()+"/", http.Header{"Authorization": {"Bearer the-tools-own"}})
	if code != 200 || body != "plain answered GET" {
		t.Fatalf("plain: %d %q", code, body)
	}
	// The records are written as connections close (the proxy keeps an
	// injected destination's alive): close it, as a call's end does.
	f.proxy.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.seen["keyed"]); n != 1 {
		t.Fatalf("keyed got %d requests", n)
	}
	got := f.seen["keyed"][0]
	if v := got.Values("Authorization"); len(v) != 1 || v[0] != testSecret {
		t.Errorf("keyed got Authorization %q, want exactly the credential", v)
	}
	if got.Get("Proxy-Authorization") != "" || got.Get("X-Other") != "kept" {
		t.Errorf("keyed got %v: want no Proxy-Authorization and the tool's other headers", got)
	}
	if v := f.seen["plain"][0].Values("Authorization"); len(v) != 1 || v[0] != "Bearer the-tools-own" {
		t.Errorf("the destination without a credential got Authorization %q, want the tool's own only", v)
	}
	var injected, plain int
	for _, r := range f.records {
		if strings.Contains(fmt.Sprint(r.Fields()), "sk-injected") {
			t.Errorf("a record holds the credential: %v", r.Fields())
		}
		switch {
		case r.Credential == CredentialInjected && r.Decision == Allowed:
			injected++
		case r.Credential == "" && r.Decision == Allowed:
			plain++
		}
	}
	if injected != 1 || plain != 1 {
		t.Errorf("records %+v: want one allowed with credential injected, one without", f.records)
	}
}

// TestInjectRefusals: to a credentialed destination, plain HTTP (the key
// would travel in clear), TRACE (it would echo the key back), and a
// request for another host inside its tunnel are refused, and reach
// nothing.
func TestInjectRefusals(t *testing.T) {
	f := newInjectFixture(t)
	if code, body, _ := f.do(t, "GET", "http://"+f.keyedDest+"/", nil); code != 403 || !strings.Contains(body, "never travels in clear") {
		t.Errorf("plain http to the credentialed destination: %d %q", code, body)
	}
	for _, m := range []string{"TRACE", "trace", "CONNECT", "PROPFIND"} {
		if code, body, _ := f.do(t, m, "https://"+f.keyedDest+"/", nil); code != 403 || !strings.Contains(body, strings.ToUpper(m)+" is refused") {
			t.Errorf("%s: %d %q", m, code, body)
		}
	}
	// By hand: CONNECT to the keyed destination, TLS with the server CA,
	// then a request whose Host is the other server.
	c, err := net.Dial("tcp", f.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", f.keyedDest, f.keyedDest)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.ca.PEM())
	host, _, _ := net.SplitHostPort(f.keyedDest)
	tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: host})
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", f.plain.Listener.Addr().String())
	resp, err = http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(b), "one destination per tunnel") {
		t.Errorf("another host inside the tunnel: %d %q", resp.StatusCode, b)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen["keyed"])+len(f.seen["plain"]) != 0 {
		t.Errorf("a refused request reached a server: %v", f.seen)
	}
}

// BenchmarkInjected and BenchmarkTunnelled: one HTTPS request through the
// proxy to a destination with a credential (terminated, injected, sent on
// over the proxy's own TLS) and to one without (tunnelled), the tool's
// client keeping its connection alive as HTTP clients do.
// The Fresh ones open a new connection for each request: the first
// request to a destination (its certificate is made once, at the first).
func BenchmarkInjected(b *testing.B)       { benchRequest(b, true, false) }
func BenchmarkTunnelled(b *testing.B)      { benchRequest(b, false, false) }
func BenchmarkInjectedFresh(b *testing.B)  { benchRequest(b, true, true) }
func BenchmarkTunnelledFresh(b *testing.B) { benchRequest(b, false, true) }

func benchRequest(b *testing.B, keyed, fresh bool) {
	f := newInjectFixture(b)
	dest := f.plain.Listener.Addr().String()
	if keyed {
		dest = f.keyedDest
	}
	cl := f.client()
	for b.Loop() {
		if fresh {
			cl.CloseIdleConnections() // a tool's client ends its connections
			cl = f.client()
		}
		resp, err := cl.Get("https://" + dest + "/")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// TestInjectionPrintsNoValue: an Injection never shows its value in print.
func TestInjectionPrintsNoValue(t *testing.T) {
	i := Injection{Header: "Authorization", Value: testSecret}
	for _, s := range []string{fmt.Sprint(i), fmt.Sprintf("%v %+v %#v %s", i, i, i, i), fmt.Sprint(map[string]Injection{"a:1": i})} {
		if strings.Contains(s, "sk-injected") || !strings.Contains(s, "[redacted]") {
			t.Errorf("printed %q", s)
		}
	}
}

// dialTunnel opens a terminated tunnel to the keyed destination by hand:
// CONNECT, then TLS with the server CA.
func (f *injectFixture) dialTunnel(t *testing.T) (*tls.Conn, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", f.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", f.keyedDest, f.keyedDest)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.ca.PEM())
	host, _, _ := net.SplitHostPort(f.keyedDest)
	return tls.Client(c, &tls.Config{RootCAs: pool, ServerName: host}), c
}

// TestInjectTunnelBounded: a terminated tunnel is bounded as an HTTP
// server's connection is: a request header past its bound is refused
// (it was read without end: 808 MB of heap for one CONNECT), and Close
// ends every tunnel, one that never sent a TLS hello included.
func TestInjectTunnelBounded(t *testing.T) {
	f := newInjectFixture(t)
	tc, _ := f.dialTunnel(t)
	go func() {
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nX-Big: ", f.keyedDest)
		chunk := []byte(strings.Repeat("a", 64<<10))
		for range 64 { // 4 MiB, no line end
			if _, err := tc.Write(chunk); err != nil {
				return
			}
		}
	}()
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err == nil && resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 4 MiB request header inside the tunnel: %d, want 431 or the connection closed", resp.StatusCode)
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a 4 MiB request header inside the tunnel: no answer in 10 s (%v): it is read without a bound", err)
	}
	// A tunnel left at its CONNECT, never a TLS hello: Close ends it.
	c, err := net.Dial("tcp", f.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", f.keyedDest, f.keyedDest)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	done := make(chan struct{})
	go func() { f.proxy.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited on a tunnel that sent nothing")
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("after Close the idle tunnel is still open: %v", err)
	}
}
