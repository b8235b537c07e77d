package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/toolgate/toolgate/auth/authtest"
)

// redirectingIssuer is an issuer on 127.0.0.1 over TLS whose metadata
// and key set answer as the test says, and an attacker's plain-HTTP
// server on 127.0.0.1 serving metadata and a key set of its own.
type redirectingIssuer struct {
	tls      *httptest.Server
	attacker *httptest.Server
	evil     *rsa.PrivateKey
	good     *authtest.Issuer // its keys are the TLS issuer's own
	hits     atomic.Int32     // requests that reached the attacker
}

func newRedirectingIssuer(t *testing.T, metadata, jwks func(ri *redirectingIssuer, w http.ResponseWriter, r *http.Request)) *redirectingIssuer {
	t.Helper()
	ri := &redirectingIssuer{good: authtest.NewIssuer(t)}
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
		json.NewEncoder(w).Encode(ri.good.KeySet())
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
		json.NewEncoder(w).Encode(ri.good.KeySet())
	}
	for _, tc := range []struct {
		name     string
		metadata func(*redirectingIssuer, http.ResponseWriter, *http.Request)
		jwks     func(*redirectingIssuer, http.ResponseWriter, *http.Request)
		wantErr  string // "": the issuer's own token is accepted
	}{
		{
			"the key set redirects to plain http", own,
			redirectTo(func(ri *redirectingIssuer) string { return ri.attacker.URL + "/jwks" }),
			"redirected to http://127.0.0.1:",
		},
		{
			"the metadata redirects to plain http", redirectTo(func(ri *redirectingIssuer) string { return ri.attacker.URL + "/md" }),
			goodKeys, "redirected to http://127.0.0.1:",
		},
		{
			"the key set redirects to https on the same host", own,
			redirectTo(func(ri *redirectingIssuer) string { return ri.tls.URL + "/jwks-moved" }),
			"/jwks-moved: toolgate follows no redirect",
		},
		{
			"the metadata names a plain-http key set", serveMetadata(func(ri *redirectingIssuer) string { return ri.attacker.URL + "/jwks" }),
			goodKeys, "plain http only for an http issuer on loopback",
		},
		{"https throughout", own, goodKeys, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ri := newRedirectingIssuer(t, tc.metadata, tc.jwks)
			o, err := NewOAuth(OAuthOptions{Issuer: ri.tls.URL, Resource: resource, Client: ri.tls.Client(), MinRefresh: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			claims := ri.good.Claims(resource)
			claims["iss"] = ri.tls.URL
			evil := authtest.SignWith(t, jose.SigningKey{Algorithm: jose.RS256, Key: ri.evil}, "evil", claims)
			_, err = o.Authenticate(context.Background(), evil)
			if tc.wantErr == "" {
				var ae *Error
				if !errors.As(err, &ae) || !strings.Contains(ae.Description, "a key the issuer's key set does not have") {
					t.Errorf("the attacker's token: %v, want refused: a key the set does not have", err)
				}
				if _, err := o.Authenticate(context.Background(), ri.good.Sign(t, "rsa1", claims)); err != nil {
					t.Errorf("the issuer's own token: %v, want accepted", err)
				}
			} else {
				if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tc.wantErr) {
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
	is := authtest.NewIssuer(t)
	o, err := NewOAuth(OAuthOptions{Issuer: is.URL(), Resource: resource})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.Authenticate(context.Background(), is.Sign(t, "ec1", is.Claims(resource))); err != nil {
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

// TestOAuthMakesUpNoFetches: tokens naming key ids the set lacks fetch
// the key set again at most once per MinRefresh.
func TestOAuthMakesUpNoFetches(t *testing.T) {
	is := authtest.NewIssuer(t)
	o, err := NewOAuth(OAuthOptions{Issuer: is.URL(), Resource: "https://toolgate.test/mcp", MinRefresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	foreign, _ := rsa.GenerateKey(rand.Reader, 2048)
	if _, err := o.Authenticate(context.Background(), is.Sign(t, "rsa1", is.Claims("https://toolgate.test/mcp"))); err != nil {
		t.Fatal(err)
	}
	before := is.Fetches()
	for i := range 50 {
		tok := authtest.SignWith(t, jose.SigningKey{Algorithm: jose.RS256, Key: foreign}, fmt.Sprintf("made-up-%d", i), is.Claims("https://toolgate.test/mcp"))
		if _, err := o.Authenticate(context.Background(), tok); err == nil {
			t.Fatal("a token of a made-up key was accepted")
		}
	}
	if n := is.Fetches() - before; n != 0 {
		t.Errorf("50 tokens with made-up key ids fetched the JWKS %d times within MinRefresh, want 0", n)
	}
}

// TestOAuthAlgorithms: only asymmetric algorithms are accepted, and an
// http issuer only on loopback.
func TestOAuthAlgorithms(t *testing.T) {
	for _, tc := range []struct {
		algs    []string
		wantErr string
	}{
		{[]string{"RS256", "ES256"}, ""},
		{[]string{"HS256"}, `"HS256" is not accepted`},
		{[]string{"none"}, `"none" is not accepted`},
	} {
		o, err := NewOAuth(OAuthOptions{Issuer: "https://issuer.test", Resource: "https://toolgate.test/mcp", Algorithms: tc.algs})
		if o != nil {
			o.Close()
		}
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("NewOAuth(algs %v) = %v, want %q", tc.algs, err, tc.wantErr)
		}
	}
	if _, err := NewOAuth(OAuthOptions{Issuer: "http://issuer.test", Resource: "https://toolgate.test/mcp"}); err == nil || !strings.Contains(err.Error(), "want https") {
		t.Errorf("an http issuer off loopback: %v, want refused", err)
	}
}
