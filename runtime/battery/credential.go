package battery

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/egress/allowlist"
	"github.com/toolgate/toolgate/internal/probes"
	rt "github.com/toolgate/toolgate/runtime"
)

// The credential cases: a tool whose egress line lists a destination with
// a credential uses the credential there, through toolgate's proxy, and
// can read it nowhere. The destinations are TLS servers this process
// starts on 127.0.0.1 (the proxy verifies them with rt.UpstreamRoots);
// the secret is made for each case and never given to the sandbox.

// keyedServer is a TLS server on 127.0.0.1 that keeps the headers of the
// requests it gets.
type keyedServer struct {
	srv  *httptest.Server
	addr string
	mu   sync.Mutex
	got  []http.Header
}

func startKeyed() *keyedServer {
	k := &keyedServer{}
	k.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.mu.Lock()
		k.got = append(k.got, r.Header.Clone())
		k.mu.Unlock()
		fmt.Fprintln(w, "keyed server answered")
	}))
	// A tunnelled client that cannot verify it is a case's point, not
	// news for selftest's reader.
	k.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	k.srv.StartTLS()
	k.addr = k.srv.Listener.Addr().String()
	return k
}

func (k *keyedServer) headers() []http.Header {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]http.Header(nil), k.got...)
}

// credentialFixture starts n keyed servers, trusted by the proxy for the
// case's length, and makes a secret.
func credentialFixture(n int) ([]*keyedServer, string, func()) {
	roots := x509.NewCertPool()
	var servers []*keyedServer
	for range n {
		k := startKeyed()
		roots.AddCert(k.srv.Certificate())
		servers = append(servers, k)
	}
	old := rt.UpstreamRoots.Swap(roots)
	var b [16]byte
	_, _ = rand.Read(b[:])
	secret := "Bearer sk-battery-" + hex.EncodeToString(b[:])
	return servers, secret, func() {
		rt.UpstreamRoots.Store(old)
		for _, k := range servers {
			k.srv.Close()
		}
	}
}

// callCredential runs the probe with an egress allowlist and credentials
// (nil for none), and returns the proxy's records of the call too.
func (e *Env) callCredential(ctx context.Context, allow []string, inject map[string]egress.Injection, args ...string) (rt.Result, []egress.Record, error) {
	list, err := allowlist.ParseList(allow)
	if err != nil {
		return rt.Result{}, nil, err
	}
	var (
		mu   sync.Mutex
		recs []egress.Record
	)
	argv := append(append([]string{e.Probe.Path}, e.Probe.Prefix...), args...)
	argv = append(argv, e.tag)
	// Through a pool that can, in a sandbox prepared ahead (callInvocation),
	// which takes its proxy at its release.
	res, err := e.callInvocation(ctx, rt.Invocation{
		ID: fmt.Sprintf("battery-%s-%d", e.tag[4:12], e.seq.Add(1)),
		Template: rt.Template{
			Name: "probe", Path: e.Probe.Path, Argv: argv, Dir: e.Dir,
			Proxied: true, Trusted: len(inject) > 0,
		},
		Call:   rt.Call{Timeout: 30 * time.Second, MaxBytes: 16 << 10},
		Egress: list, Inject: inject,
		EgressRecord: func(r egress.Record) {
			mu.Lock()
			recs = append(recs, r)
			mu.Unlock()
		},
	})
	if err != nil {
		return res, nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	return res, recs, nil
}

func caseCredentialInjected(ctx context.Context, e *Env) error {
	ks, secret, done := credentialFixture(1)
	defer done()
	k := ks[0]
	res, recs, err := e.callCredential(ctx, []string{k.addr}, map[string]egress.Injection{k.addr: {Header: "Authorization", Value: secret}},
		"egress", "https:https://"+k.addr+"/v1/responses")
	if err != nil {
		return err
	}
	if err := want(res.Output, "https https://"+k.addr+"/v1/responses: 200 keyed server answered"); err != nil {
		return err
	}
	got := k.headers()
	if len(got) != 1 || strings.Join(got[0].Values("Authorization"), ",") != secret {
		return fmt.Errorf("the destination got %d requests, Authorization %q: want one, with the credential", len(got), authOf(got))
	}
	injected := 0
	for _, r := range recs {
		if r.Credential == egress.CredentialInjected {
			injected++
		}
		if strings.Contains(fmt.Sprint(r.Fields()), secret) {
			return fmt.Errorf("an egress record holds the credential: %v", r.Fields())
		}
	}
	if injected != 1 {
		return fmt.Errorf("records %+v: want one saying credential injected", recs)
	}
	return nil
}

func caseCredentialReplaced(ctx context.Context, e *Env) error {
	ks, secret, done := credentialFixture(1)
	defer done()
	k := ks[0]
	res, _, err := e.callCredential(ctx, []string{k.addr}, map[string]egress.Injection{k.addr: {Header: "X-Api-Key", Value: secret}},
		"egress", "header:X-Api-Key=the-tools-own", "header:Authorization=Bearer the-tools-own", "header:Proxy-Authorization=Basic eDp5",
		"https:https://"+k.addr+"/")
	if err != nil {
		return err
	}
	if err := want(res.Output, "https https://"+k.addr+"/: 200 keyed server answered"); err != nil {
		return err
	}
	got := k.headers()
	if len(got) != 1 {
		return fmt.Errorf("the destination got %d requests, want 1", len(got))
	}
	h := got[0]
	if v := h.Values("X-Api-Key"); len(v) != 1 || v[0] != secret {
		return fmt.Errorf("X-Api-Key reached the destination as %d values (the tool's kept?): want exactly the credential", len(v))
	}
	if h.Get("Authorization") != "" || h.Get("Proxy-Authorization") != "" {
		return fmt.Errorf("the tool's own Authorization or Proxy-Authorization reached a credentialed destination: %q %q", h.Get("Authorization"), h.Get("Proxy-Authorization"))
	}
	return nil
}

func caseCredentialNotElsewhere(ctx context.Context, e *Env) error {
	ks, secret, done := credentialFixture(2)
	defer done()
	keyed, other := ks[0], ks[1]
	// The other listed destination is tunnelled as it is: the tool's TLS
	// goes to it end to end, so the probe cannot verify it (it trusts the
	// server CA, not the test server): it gets a TLS error, and the
	// server, what the tool sent, which holds no credential.
	res, _, err := e.callCredential(ctx, []string{keyed.addr, other.addr}, map[string]egress.Injection{keyed.addr: {Header: "Authorization", Value: secret}},
		"egress", "https:https://"+other.addr+"/", "get:http://"+keyed.addr+"/", "https:https://unlisted.invalid:443/")
	if err != nil {
		return err
	}
	out := string(res.Output)
	if !strings.Contains(out, "get http://"+keyed.addr+"/: 403") || !strings.Contains(out, "never travels in clear") {
		return fmt.Errorf("plain HTTP to the credentialed destination was not refused:\n%s", clip(res.Output))
	}
	if !strings.Contains(out, "https https://unlisted.invalid:443/: error") {
		return fmt.Errorf("an unlisted destination was reached:\n%s", clip(res.Output))
	}
	for _, h := range append(keyed.headers(), other.headers()...) {
		if strings.Contains(fmt.Sprint(h), secret) {
			return fmt.Errorf("the credential reached a request it was not for: %v", h)
		}
	}
	if n := len(keyed.headers()); n != 0 {
		return fmt.Errorf("the credentialed destination got %d requests over plain HTTP", n)
	}
	return nil
}

func caseCredentialUnreadable(ctx context.Context, e *Env) error {
	ks, secret, done := credentialFixture(1)
	defer done()
	k := ks[0]
	seek := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "seek:" + hex.EncodeToString(sum[:]) + ":" + strconv.Itoa(len(s)) + ":" + strconv.FormatUint(probes.Rolling([]byte(s)), 10)
	}
	// While the credential is in use (one request first), the sandbox
	// looks for it everywhere it can read; first, as a control, for what
	// is there (its own environment and the CA's certificate).
	res, _, err := e.callCredential(ctx, []string{k.addr}, map[string]egress.Injection{k.addr: {Header: "Authorization", Value: secret}},
		"egress", "https:https://"+k.addr+"/", seek("GIT_CONFIG_NOSYSTEM=1"), seek("BEGIN CERTIFICATE"), seek(secret))
	if err != nil {
		return err
	}
	if !strings.Contains(string(res.Output), "seek: found in /proc/") || strings.Count(string(res.Output), "seek: found in") < 2 {
		return fmt.Errorf("control: the search does not find what the sandbox holds, so it proves nothing:\n%s", clip(res.Output))
	}
	if err := want(res.Output, "https https://"+k.addr+"/: 200 keyed server answered"); err != nil {
		return err
	}
	if strings.Contains(string(res.Output), secret) || strings.Contains(string(res.Output), "PRIVATE KEY") {
		return fmt.Errorf("the sandbox printed the credential or a key:\n%s", clip(res.Output))
	}
	if !strings.Contains(string(res.Output), "seek: found nowhere") {
		return fmt.Errorf("the sandbox found the credential:\n%s", clip(res.Output))
	}
	return nil
}

func authOf(hs []http.Header) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Values("Authorization")...)
	}
	return out
}
