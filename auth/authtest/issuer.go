// Package authtest is an OAuth authorization server for tests: RFC 8414
// metadata and a JWKS on 127.0.0.1, and the keys to sign access tokens
// with. The tests of auth and of the HTTP transport share it.
package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Issuer is an OAuth authorization server on 127.0.0.1 over plain http:
// its metadata at /.well-known/oauth-authorization-server names its URL
// as the issuer and /jwks as its key set.
type Issuer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	keys    []jose.JSONWebKey // public, served
	priv    map[string]crypto.Signer
	fetches int
}

// NewIssuer starts an issuer with two signing keys, "rsa1" (RS256) and
// "ec1" (ES256); it stops when t ends.
func NewIssuer(t testing.TB) *Issuer {
	t.Helper()
	is := &Issuer{priv: map[string]crypto.Signer{}}
	mux := http.NewServeMux()
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, _ *http.Request) {
		is.mu.Lock()
		defer is.mu.Unlock()
		is.fetches++
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: is.keys})
	})
	is.AddRSA(t, "rsa1")
	is.AddEC(t, "ec1")
	return is
}

// URL is the issuer identifier (http://127.0.0.1:PORT).
func (is *Issuer) URL() string { return is.srv.URL }

func (is *Issuer) add(kid, alg string, k crypto.Signer) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.priv[kid] = k
	is.keys = append(is.keys, jose.JSONWebKey{Key: k.Public(), KeyID: kid, Algorithm: alg, Use: "sig"})
}

// AddRSA adds an RS256 signing key to the key set.
func (is *Issuer) AddRSA(t testing.TB, kid string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is.add(kid, "RS256", k)
}

// AddEC adds an ES256 signing key to the key set.
func (is *Issuer) AddEC(t testing.TB, kid string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is.add(kid, "ES256", k)
}

// Withdraw takes kid out of the key set served (a rotation); its tokens
// can still be signed.
func (is *Issuer) Withdraw(kid string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys = slices.DeleteFunc(is.keys, func(k jose.JSONWebKey) bool { return k.KeyID == kid })
}

// Public is kid's public key.
func (is *Issuer) Public(kid string) crypto.PublicKey {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.priv[kid].Public()
}

// KeySet is the key set served now.
func (is *Issuer) KeySet() jose.JSONWebKeySet {
	is.mu.Lock()
	defer is.mu.Unlock()
	return jose.JSONWebKeySet{Keys: slices.Clone(is.keys)}
}

// Fetches counts the requests for the key set so far.
func (is *Issuer) Fetches() int {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.fetches
}

// Claims are a valid access token's for resource: subject alice, client
// agent-1, valid for an hour from now.
func (is *Issuer) Claims(resource string) map[string]any {
	now := time.Now()
	return map[string]any{
		"iss": is.srv.URL, "sub": "alice", "aud": resource, "client_id": "agent-1",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
}

// Sign returns an at+jwt token of claims signed with kid.
func (is *Issuer) Sign(t testing.TB, kid string, claims map[string]any) string {
	t.Helper()
	is.mu.Lock()
	k := is.priv[kid]
	is.mu.Unlock()
	alg := jose.RS256
	if _, ok := k.(*ecdsa.PrivateKey); ok {
		alg = jose.ES256
	}
	return SignWith(t, jose.SigningKey{Algorithm: alg, Key: k}, kid, claims)
}

// SignWith returns an at+jwt token of claims signed with key, naming kid
// (none when empty).
func SignWith(t testing.TB, key jose.SigningKey, kid string, claims map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("at+jwt")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	sig, err := jose.NewSigner(key, opts)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(sig).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Unsigned returns a token of claims with alg none, naming kid rsa1.
func Unsigned(claims map[string]any) string {
	enc := base64.RawURLEncoding
	h, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT", "kid": "rsa1"})
	c, _ := json.Marshal(claims)
	return enc.EncodeToString(h) + "." + enc.EncodeToString(c) + "."
}
