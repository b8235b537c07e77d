package server

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// TestHTTPOAuthSubjectsAreExact: two subjects that differ only past the
// 256th byte, or only in a byte that does not print (or in one shown as
// an escape), are two principals: neither can use or end the other's
// session, and the audit shows each under a name of its own.
func TestHTTPOAuthSubjectsAreExact(t *testing.T) {
	is := newIssuer(t)
	f, resource := startOAuth(t, is, nil)
	long := strings.Repeat("a", 256)
	digest := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	for _, tc := range []struct {
		name         string
		a, b         string
		showA, showB string // the audit's principal
	}{
		{"a control byte", "a\x01", "a\x02", "a%01", "a%02"},
		{"a control byte and the old replacement", "a?", "a\x01", "a?", "a%01"},
		{"the escape itself", "a%01", "a\x01", "a%2501", "a%01"},
		{"past 256 bytes", long + "x", long + "y",
			long[:183] + "%~sha256:" + digest(long+"x"), long[:183] + "%~sha256:" + digest(long+"y")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token := func(sub string) string {
				c := is.claims(resource)
				c["sub"] = sub
				return is.sign(t, "rsa1", c)
			}
			ta, tb := token(tc.a), token(tc.b)
			init := f.post(t, rpcReq{token: ta, body: initBody})
			sid := init.header.Get("Mcp-Session-Id")
			if init.status != 200 || sid == "" {
				t.Fatalf("initialize as a (%.40q): %d, session %q", tc.a, init.status, sid)
			}
			h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
			before := f.ran()
			if got := f.post(t, rpcReq{token: tb, body: callBody("hello"), headers: h}); got.status != 404 {
				t.Errorf("b (%.40q) calling in a's session: %d, want 404", tc.b, got.status)
			}
			if got := f.post(t, rpcReq{token: tb, method: http.MethodDelete, headers: h}); got.status != 404 {
				t.Errorf("b (%.40q) ending a's session: %d, want 404", tc.b, got.status)
			}
			if n := f.ran() - before; n != 0 {
				t.Fatalf("%d runs in another principal's session, want 0", n)
			}
			if got := f.post(t, rpcReq{token: ta, body: callBody("hello"), headers: h}); got.status != 200 {
				t.Fatalf("a (%.40q) in its own session: %d %s", tc.a, got.status, got.body)
			}
			initB := f.post(t, rpcReq{token: tb, body: initBody})
			hb := map[string]string{"Mcp-Session-Id": initB.header.Get("Mcp-Session-Id"), "Mcp-Protocol-Version": "2025-11-25"}
			if got := f.post(t, rpcReq{token: tb, body: callBody("hello"), headers: hb}); got.status != 200 {
				t.Fatalf("b (%.40q) in its own session: %d %s", tc.b, got.status, got.body)
			}
			recs := f.auditRecords(t)
			if len(recs) < 2 {
				t.Fatalf("%d audit records, want the two calls'", len(recs))
			}
			gotA, gotB := recs[len(recs)-2]["principal"], recs[len(recs)-1]["principal"]
			if gotA != tc.showA || gotB != tc.showB {
				t.Errorf("audit principals %q and %q, want %q and %q", gotA, gotB, tc.showA, tc.showB)
			}
		})
	}
}

// TestHTTPOAuthSubjectsQueueApart: the per-principal queue is keyed on
// the exact subject too: a\x02 is not held up behind a\x01's call.
func TestHTTPOAuthSubjectsQueueApart(t *testing.T) {
	is := newIssuer(t)
	const resource = "https://toolgate.test/mcp"
	o, err := NewOAuth(OAuthOptions{Issuer: is.srv.URL, Resource: resource})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	f := startHTTP(t, HTTPOptions{Auth: o, OAuth: o, Resource: resource, MaxPerPrincipal: 1})
	f.direct.block = make(chan struct{})
	token := func(sub string) string {
		c := is.claims(resource)
		c["sub"] = sub
		return is.sign(t, "rsa1", c)
	}
	a, b := mcpClient(t, f.url, token("a\x01"), false), mcpClient(t, f.url, token("a\x02"), false)
	done := make(chan error, 2)
	go func() {
		_, err := callTool(t, a, "hello", nil)
		done <- err
	}()
	waitFor(t, func() bool { return len(f.direct.invocations()) == 1 })
	go func() {
		res, err := callTool(t, b, "hello", nil)
		if err == nil && res.IsError {
			err = errors.New(resultText(res))
		}
		done <- err
	}()
	waitFor(t, func() bool { return len(f.direct.invocations()) == 2 })
	close(f.direct.block)
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("a call: %v", err)
		}
	}
}

// redirectingIssuer is an issuer on 127.0.0.1 over TLS whose metadata
// and key set answer as the test says, and an attacker's plain-HTTP
// server on 127.0.0.1 serving metadata and a key set of its own.
type redirectingIssuer struct {
	tls      *httptest.Server
	attacker *httptest.Server
	evil     *rsa.PrivateKey
	good     *issuer      // its keys are the TLS issuer's own
	hits     atomic.Int32 // requests that reached the attacker
}

func newRedirectingIssuer(t *testing.T, metadata, jwks func(ri *redirectingIssuer, w http.ResponseWriter, r *http.Request)) *redirectingIssuer {
	t.Helper()
	ri := &redirectingIssuer{good: newIssuer(t)}
	var err error
	if ri.evil, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	am := http.NewServeMux()
	ri.attacker = httptest.NewServer(am)
	t.Cleanup(ri.attacker.Close)
	am.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		ri.hits.Add(1)
		switch r.URL.Path {
		case "/jwks":
			json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: ri.evil.Public(), KeyID: "evil", Algorithm: "RS256", Use: "sig"}}})
		default: // metadata naming the issuer, and the attacker's keys
			json.NewEncoder(w).Encode(map[string]string{"issuer": ri.tls.URL, "jwks_uri": ri.attacker.URL + "/jwks"})
		}
	})
	mux := http.NewServeMux()
	ri.tls = httptest.NewTLSServer(mux)
	t.Cleanup(ri.tls.Close)
	mux.HandleFunc("/.well-known/", func(w http.ResponseWriter, r *http.Request) { metadata(ri, w, r) })
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) { jwks(ri, w, r) })
	mux.HandleFunc("/jwks-moved", func(w http.ResponseWriter, r *http.Request) {
		ri.good.mu.Lock()
		defer ri.good.mu.Unlock()
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: ri.good.keys})
	})
	return ri
}

func serveMetadata(jwksURI func(ri *redirectingIssuer) string) func(ri *redirectingIssuer, w http.ResponseWriter, r *http.Request) {
	return func(ri *redirectingIssuer, w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"issuer": ri.tls.URL, "jwks_uri": jwksURI(ri)})
	}
}

func redirectTo(to func(ri *redirectingIssuer) string) func(ri *redirectingIssuer, w http.ResponseWriter, r *http.Request) {
	return func(ri *redirectingIssuer, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, to(ri), http.StatusFound)
	}
}

// TestOAuthFetchesNoRedirectNorPlainHTTP: an https issuer's metadata and
// key set are read from the URLs named and over https only: a redirect
// (to plain http, or even to https on the same host) is refused, and so is
// an http jwks_uri; the attacker's keys are never loaded, its token is
// refused, and the error says why. An https issuer with an https key set,
// and an http issuer on loopback (named so by the operator), are served.
func TestOAuthFetchesNoRedirectNorPlainHTTP(t *testing.T) {
	const resource = "https://toolgate.test/mcp"
	own := serveMetadata(func(ri *redirectingIssuer) string { return ri.tls.URL + "/jwks" })
	goodKeys := func(ri *redirectingIssuer, w http.ResponseWriter, r *http.Request) {
		ri.good.mu.Lock()
		defer ri.good.mu.Unlock()
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: ri.good.keys})
	}
	for _, tc := range []struct {
		name     string
		metadata func(*redirectingIssuer, http.ResponseWriter, *http.Request)
		jwks     func(*redirectingIssuer, http.ResponseWriter, *http.Request)
		wantErr  string // "": the issuer's own token is accepted
	}{
		{"the key set redirects to plain http", own,
			redirectTo(func(ri *redirectingIssuer) string { return ri.attacker.URL + "/jwks" }),
			"redirected to http://127.0.0.1:"},
		{"the metadata redirects to plain http", redirectTo(func(ri *redirectingIssuer) string { return ri.attacker.URL + "/md" }),
			goodKeys, "redirected to http://127.0.0.1:"},
		{"the key set redirects to https on the same host", own,
			redirectTo(func(ri *redirectingIssuer) string { return ri.tls.URL + "/jwks-moved" }),
			"/jwks-moved: toolgate follows no redirect"},
		{"the metadata names a plain-http key set", serveMetadata(func(ri *redirectingIssuer) string { return ri.attacker.URL + "/jwks" }),
			goodKeys, "plain http only for an http issuer on loopback"},
		{"https throughout", own, goodKeys, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ri := newRedirectingIssuer(t, tc.metadata, tc.jwks)
			o, err := NewOAuth(OAuthOptions{Issuer: ri.tls.URL, Resource: resource, Client: ri.tls.Client(), MinRefresh: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			claims := ri.good.claims(resource)
			claims["iss"] = ri.tls.URL
			evil := signWith(t, jose.SigningKey{Algorithm: jose.RS256, Key: ri.evil}, "evil", claims)
			_, err = o.Authenticate(context.Background(), evil)
			if tc.wantErr == "" {
				var ae *AuthError
				if !errors.As(err, &ae) || !strings.Contains(ae.Description, "a key the issuer's key set does not have") {
					t.Errorf("the attacker's token: %v, want refused: a key the set does not have", err)
				}
				if _, err := o.Authenticate(context.Background(), ri.good.sign(t, "rsa1", claims)); err != nil {
					t.Errorf("the issuer's own token: %v, want accepted", err)
				}
			} else {
				if !errors.Is(err, ErrAuthUnavailable) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("the attacker's token: %v, want refused: the keys are not loaded, because %q", err, tc.wantErr)
				}
				if ready, rerr := o.Ready(); ready || rerr == nil || !strings.Contains(rerr.Error(), tc.wantErr) {
					t.Errorf("Ready() = %v, %v; want not ready, because %q", ready, rerr, tc.wantErr)
				}
			}
			if n := ri.hits.Load(); n != 0 {
				t.Errorf("%d requests reached the attacker's plain-http server, want 0", n)
			}
		})
	}
	// An http issuer is accepted on loopback only, and its key set may then
	// be plain http on loopback too (the tests' own issuer).
	is := newIssuer(t)
	o, err := NewOAuth(OAuthOptions{Issuer: is.srv.URL, Resource: resource})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.Authenticate(context.Background(), is.sign(t, "ec1", is.claims(resource))); err != nil {
		t.Errorf("a loopback http issuer's token: %v, want accepted", err)
	}
	for _, tc := range []struct{ issuer, jwks, want string }{
		{"https://issuer.test", "http://127.0.0.1:1/jwks", "--oauth-jwks-url: \"http://127.0.0.1:1/jwks\": want https (plain http only for an http issuer on loopback)"},
		{"https://issuer.test", "http://issuer.test/jwks", "--oauth-jwks-url: \"http://issuer.test/jwks\": want https (plain http only for an http issuer on loopback)"},
		{"http://issuer.test", "", "--oauth-issuer: \"http://issuer.test\": want https (http only on a loopback host)"},
	} {
		o, err := NewOAuth(OAuthOptions{Issuer: tc.issuer, Resource: resource, JWKSURL: tc.jwks})
		if o != nil {
			o.Close()
		}
		if err == nil || err.Error() != tc.want {
			t.Errorf("NewOAuth(issuer %s, jwks %q) = %v, want %q", tc.issuer, tc.jwks, err, tc.want)
		}
	}
}
