package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/conf"
)

// DefaultOAuthAlgorithms is the signature allow-list when none is given:
// the asymmetric algorithms every issuer offers. HMAC and "none" are never
// accepted.
var DefaultOAuthAlgorithms = []string{"RS256", "PS256", "ES256", "EdDSA"}

// allowedAlgorithms are the algorithms --oauth-algs may name: asymmetric
// signatures only, so that a public key can never verify a token as an
// HMAC secret, and never "none".
var allowedAlgorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// OAuthOptions configure the OAuth 2.1 resource server.
type OAuthOptions struct {
	// Issuer is the authorization server's issuer identifier: the iss a
	// token must carry, and where its metadata is discovered.
	Issuer string
	// Resource is this server's canonical URL (RFC 8707, RFC 9728): the
	// audience a token must name.
	Resource string
	// JWKSURL is the issuer's key set; empty means discovered from the
	// issuer's metadata (RFC 8414, then OpenID Connect discovery).
	JWKSURL string
	// Algorithms is the signature allow-list (DefaultOAuthAlgorithms when
	// empty).
	Algorithms []string
	// Leeway is the clock skew allowed on exp, nbf and iat (default 30 s).
	Leeway time.Duration
	// Refresh is how often the key set is fetched again (default 10 min);
	// MinRefresh is how soon after a fetch a token signed with a key the
	// set lacks may fetch it again (default 10 s), so that a stream of
	// tokens with made-up key ids cannot turn toolgate against the issuer.
	Refresh, MinRefresh time.Duration
	// Client fetches metadata and keys (default: 10 s timeout). NewOAuth
	// uses a copy that follows no redirect.
	Client *http.Client
	// Log receives fetch failures.
	Log *logrus.Logger
	// Now is the clock (tests).
	Now func() time.Time
}

// OAuth verifies JWT access tokens against an issuer's JWKS.
type OAuth struct {
	opts OAuthOptions
	algs []jose.SignatureAlgorithm

	mu      sync.Mutex
	keys    *jose.JSONWebKeySet
	fetched time.Time // last fetch attempt
	jwksURL string    // resolved
	lastErr error
	loaded  chan struct{} // closed at the first successful fetch
	fetchMu sync.Mutex    // one fetch at a time
	stop    context.CancelFunc
}

// NewOAuth checks opts and starts fetching the issuer's keys in the
// background (again every Refresh). Close stops it.
func NewOAuth(opts OAuthOptions) (*OAuth, error) {
	iss, err := url.Parse(opts.Issuer)
	if err != nil || iss.Host == "" || (iss.Scheme != "https" && iss.Scheme != "http") {
		return nil, fmt.Errorf("--oauth-issuer %q: want an absolute https URL", opts.Issuer)
	}
	if err := secureURL(opts.Issuer); err != nil {
		return nil, fmt.Errorf("--oauth-issuer: %w", err)
	}
	res, err := url.Parse(opts.Resource)
	if err != nil || res.Host == "" || (res.Scheme != "https" && res.Scheme != "http") || res.Fragment != "" {
		return nil, fmt.Errorf("--oauth-resource %q: want this server's absolute URL (https://host/mcp), without a fragment", opts.Resource)
	}
	o := &OAuth{opts: opts, jwksURL: opts.JWKSURL, loaded: make(chan struct{})}
	if opts.JWKSURL != "" {
		if err := o.fetchable(opts.JWKSURL); err != nil {
			return nil, fmt.Errorf("--oauth-jwks-url: %w", err)
		}
	}
	names := opts.Algorithms
	if len(names) == 0 {
		names = DefaultOAuthAlgorithms
	}
	for _, n := range names {
		a := jose.SignatureAlgorithm(n)
		if !slices.Contains(allowedAlgorithms, a) {
			return nil, fmt.Errorf("--oauth-algs: %q is not accepted: want asymmetric signature algorithms (%s); HMAC and none never are", n, algNames(allowedAlgorithms))
		}
		o.algs = append(o.algs, a)
	}
	if o.opts.Leeway <= 0 {
		o.opts.Leeway = 30 * time.Second
	}
	if o.opts.Refresh <= 0 {
		o.opts.Refresh = 10 * time.Minute
	}
	if o.opts.MinRefresh <= 0 {
		o.opts.MinRefresh = 10 * time.Second
	}
	// A copy of the client, so that no redirect is followed whatever the
	// caller's client would do.
	client := &http.Client{Timeout: 10 * time.Second}
	if opts.Client != nil {
		c := *opts.Client
		client = &c
	}
	client.CheckRedirect = refuseRedirect
	o.opts.Client = client
	if o.opts.Now == nil {
		o.opts.Now = time.Now
	}
	if o.opts.Log == nil {
		o.opts.Log = logrus.New()
		o.opts.Log.SetOutput(io.Discard)
	}
	ctx, cancel := context.WithCancel(context.Background())
	o.stop = cancel
	go o.background(ctx)
	return o, nil
}

func algNames(algs []jose.SignatureAlgorithm) string {
	s := make([]string, len(algs))
	for i, a := range algs {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}

// secureURL refuses a URL that is not https, except on a loopback host.
func secureURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q is not an absolute URL", raw)
	}
	if u.Scheme == "https" || (u.Scheme == "http" && IsLoopbackHost(u.Hostname())) {
		return nil
	}
	return fmt.Errorf("%q: want https (http only on a loopback host)", raw)
}

// fetchable refuses a URL the issuer's metadata or keys may not be read
// from: https, or plain http only when the operator named an http issuer
// on a loopback host (a test's or a sidecar's) and the URL is on a
// loopback host too. An https issuer's keys never come over plain http,
// whatever its metadata names.
func (o *OAuth) fetchable(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q is not an absolute URL", raw)
	}
	if u.Scheme == "https" {
		return nil
	}
	iss, _ := url.Parse(o.opts.Issuer)
	if u.Scheme == "http" && iss.Scheme == "http" && IsLoopbackHost(iss.Hostname()) && IsLoopbackHost(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("%q: want https (plain http only for an http issuer on loopback)", raw)
}

// refuseRedirect is the CheckRedirect of the client that fetches the
// issuer's metadata and keys: no redirect is followed, not even to https
// on the same host. The URLs fetched are the issuer's own (RFC 8414 and
// OpenID Connect place the metadata under it) and what that metadata, or
// the operator, names; a redirect would let whoever answers the first
// request choose where the keys come from, over plain http too. An issuer
// that has moved its keys says so in its metadata.
func refuseRedirect(req *http.Request, _ []*http.Request) error {
	return fmt.Errorf("redirected to %s: toolgate follows no redirect for the issuer's metadata or keys (name the final URL: --oauth-jwks-url, or the issuer's metadata)", req.URL.Redacted())
}

// IsLoopbackHost reports a loopback IP literal or localhost.
func IsLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Close stops the background refresh.
func (o *OAuth) Close() { o.stop() }

// Issuer returns the issuer identifier tokens must carry.
func (o *OAuth) Issuer() string { return o.opts.Issuer }

// Algorithms returns the signature allow-list.
func (o *OAuth) Algorithms() []string {
	s := make([]string, len(o.algs))
	for i, a := range o.algs {
		s[i] = string(a)
	}
	return s
}

// Ready reports whether the issuer's keys have been loaded, and the last
// fetch error while they have not.
func (o *OAuth) Ready() (bool, error) {
	select {
	case <-o.loaded:
		return true, nil
	default:
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return false, o.lastErr
}

func (o *OAuth) background(ctx context.Context) {
	backoff := time.Second
	for {
		err := o.fetch(ctx, true)
		wait := o.opts.Refresh
		if err != nil {
			o.opts.Log.WithError(err).Warn("oauth: fetching the issuer's keys")
			if ok, _ := o.Ready(); !ok {
				wait = backoff
				backoff = min(backoff*2, time.Minute)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// fetch loads the key set; unless force, not sooner than MinRefresh after
// the last attempt.
func (o *OAuth) fetch(ctx context.Context, force bool) error {
	o.fetchMu.Lock()
	defer o.fetchMu.Unlock()
	o.mu.Lock()
	if !force && o.opts.Now().Sub(o.fetched) < o.opts.MinRefresh {
		o.mu.Unlock()
		return nil
	}
	o.fetched = o.opts.Now()
	jwksURL := o.jwksURL
	o.mu.Unlock()

	keys, resolved, err := o.load(ctx, jwksURL)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		o.lastErr = err
		return err
	}
	o.jwksURL = resolved
	o.keys = keys
	o.lastErr = nil
	select {
	case <-o.loaded:
	default:
		close(o.loaded)
	}
	return nil
}

// maxMetadata bounds a metadata document or key set.
const maxMetadata = 1 << 20

func (o *OAuth) getJSON(ctx context.Context, u string, v any) error {
	if err := o.fetchable(u); err != nil {
		return fmt.Errorf("GET %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := o.opts.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadata+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	if len(body) > maxMetadata {
		return fmt.Errorf("GET %s: over %d bytes", u, maxMetadata)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}

// discover finds the issuer's jwks_uri: RFC 8414 metadata first, then
// OpenID Connect discovery; the metadata's issuer must be the issuer.
func (o *OAuth) discover(ctx context.Context) (string, error) {
	iss, _ := url.Parse(o.opts.Issuer)
	path := strings.TrimSuffix(iss.Path, "/")
	candidates := []string{
		iss.Scheme + "://" + iss.Host + "/.well-known/oauth-authorization-server" + path,
		strings.TrimSuffix(o.opts.Issuer, "/") + "/.well-known/openid-configuration",
	}
	var errs []error
	for _, c := range candidates {
		var md struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := o.getJSON(ctx, c, &md); err != nil {
			errs = append(errs, err)
			continue
		}
		if md.Issuer != o.opts.Issuer {
			errs = append(errs, fmt.Errorf("%s names issuer %q, not %q", c, md.Issuer, o.opts.Issuer))
			continue
		}
		if md.JWKSURI == "" {
			errs = append(errs, fmt.Errorf("%s has no jwks_uri", c))
			continue
		}
		if err := o.fetchable(md.JWKSURI); err != nil {
			errs = append(errs, fmt.Errorf("%s: jwks_uri %w", c, err))
			continue
		}
		return md.JWKSURI, nil
	}
	return "", fmt.Errorf("discover the keys of issuer %q: %w", o.opts.Issuer, errors.Join(errs...))
}

func (o *OAuth) load(ctx context.Context, jwksURL string) (*jose.JSONWebKeySet, string, error) {
	if jwksURL == "" {
		var err error
		if jwksURL, err = o.discover(ctx); err != nil {
			return nil, "", err
		}
	}
	var set jose.JSONWebKeySet
	if err := o.getJSON(ctx, jwksURL, &set); err != nil {
		return nil, "", fmt.Errorf("key set: %w", err)
	}
	usable := &jose.JSONWebKeySet{}
	for _, k := range set.Keys {
		if !k.Valid() || !k.IsPublic() || (k.Use != "" && k.Use != "sig") {
			continue // symmetric, private or encryption keys are never used
		}
		if k.Algorithm != "" && !slices.Contains(o.algs, jose.SignatureAlgorithm(k.Algorithm)) {
			continue
		}
		usable.Keys = append(usable.Keys, k)
	}
	if len(usable.Keys) == 0 {
		return nil, "", fmt.Errorf("key set %s: no public signing key for %s", jwksURL, algNames(o.algs))
	}
	return usable, jwksURL, nil
}

// keysFor returns the keys that may have signed a token with key id kid,
// fetching the set again (at most every MinRefresh) when it has none.
func (o *OAuth) keysFor(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	find := func() ([]jose.JSONWebKey, bool) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.keys == nil {
			return nil, false
		}
		if kid == "" {
			return slices.Clone(o.keys.Keys), true
		}
		return o.keys.Key(kid), true
	}
	if keys, _ := find(); len(keys) > 0 {
		return keys, nil
	}
	// A key the set lacks (rotation), or no set yet.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := o.fetch(fctx, false)
	keys, loaded := find()
	switch {
	case len(keys) > 0:
		return keys, nil
	case !loaded:
		if err == nil {
			_, err = o.Ready()
		}
		if err == nil {
			err = errors.New("no fetch has answered yet")
		}
		return nil, fmt.Errorf("%w: the issuer's keys are not loaded: %w", ErrUnavailable, err)
	}
	return nil, invalidToken("signed with a key the issuer's key set does not have")
}

// accessTokenTypes are the JWT typ values accepted: RFC 9068's, and the
// plain JWT many issuers still set. Anything else (an ID token's logout or
// DPoP proof types) is refused.
var accessTokenTypes = []string{"at+jwt", "application/at+jwt", "jwt"}

type tokenExtra struct {
	Scope    string          `json:"scope"`
	Scp      json.RawMessage `json:"scp"`
	ClientID string          `json:"client_id"`
	Azp      string          `json:"azp"`
}

// Authenticate verifies a JWT access token: an allowed algorithm, a key of
// the issuer's set, the issuer, this resource among the audiences, exp
// present and not passed, nbf and iat not in the future (all within
// Leeway), a subject; and returns the principal of its issuer and exact
// subject (shown escaped: showClaim), with its scopes.
func (o *OAuth) Authenticate(ctx context.Context, raw string) (Principal, error) {
	tok, err := jwt.ParseSigned(raw, o.algs)
	if err != nil {
		return Principal{}, invalidToken("not a JWT signed with an accepted algorithm (%s)", algNames(o.algs))
	}
	if len(tok.Headers) != 1 {
		return Principal{}, invalidToken("want exactly one signature")
	}
	h := tok.Headers[0]
	if typ, ok := h.ExtraHeaders[jose.HeaderType].(string); ok && !slices.Contains(accessTokenTypes, strings.ToLower(typ)) {
		return Principal{}, invalidToken("typ %s is not an access token's", showClaim(typ))
	}
	keys, err := o.keysFor(ctx, h.KeyID)
	if err != nil {
		return Principal{}, err
	}
	var claims jwt.Claims
	var extra tokenExtra
	verified := false
	for _, k := range keys {
		if k.Algorithm != "" && k.Algorithm != h.Algorithm {
			continue
		}
		if tok.Claims(k.Key, &claims, &extra) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return Principal{}, invalidToken("signature does not verify")
	}
	if claims.Expiry == nil {
		return Principal{}, invalidToken("no exp claim")
	}
	if claims.Subject == "" {
		return Principal{}, invalidToken("no sub claim")
	}
	err = claims.ValidateWithLeeway(jwt.Expected{
		Issuer:      o.opts.Issuer,
		AnyAudience: jwt.Audience{o.opts.Resource},
		Time:        o.opts.Now(),
	}, o.opts.Leeway)
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrExpired):
		return Principal{}, invalidToken("expired")
	case errors.Is(err, jwt.ErrNotValidYet):
		return Principal{}, invalidToken("not valid yet (nbf)")
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return Principal{}, invalidToken("issued in the future (iat)")
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return Principal{}, invalidToken("issued by another issuer")
	case errors.Is(err, jwt.ErrInvalidAudience):
		return Principal{}, invalidToken("not issued for this resource (aud must name %s)", o.opts.Resource)
	default:
		return Principal{}, invalidToken("claims do not validate")
	}
	p := Principal{
		Name: showClaim(claims.Subject), Method: MethodOAuth, Scopes: scopesOf(extra),
		Issuer: claims.Issuer, Subject: claims.Subject,
	}
	p.Client = showClaim(extra.Azp)
	if p.Client == "" {
		p.Client = showClaim(extra.ClientID)
	}
	return p, nil
}

// scopesOf reads the scope claim (RFC 9068: space-separated) or scp (a
// list or a string, as some issuers write it); what is not a scope token
// is dropped.
func scopesOf(e tokenExtra) []string {
	var raw []string
	raw = append(raw, strings.Fields(e.Scope)...)
	if len(e.Scp) > 0 {
		var list []string
		var one string
		if json.Unmarshal(e.Scp, &list) == nil {
			raw = append(raw, list...)
		} else if json.Unmarshal(e.Scp, &one) == nil {
			raw = append(raw, strings.Fields(one)...)
		}
	}
	var out []string
	for _, s := range raw {
		if conf.ValidScope(s) && !slices.Contains(out, s) && len(out) < 256 {
			out = append(out, s)
		}
	}
	return out
}

// maxShownClaim bounds a claim as audit records, logs and refusals show
// it.
const maxShownClaim = 256

// longClaimMark separates the shown prefix of a claim too long to show
// whole from the SHA-256 of all of it. showClaim escapes every '%' of a
// claim as %25, so the mark never appears in the escaping of a claim.
const longClaimMark = "%~sha256:"

// showClaim returns a claim of a token as audit records and logs show it,
// so that a claim can neither forge nor flood a log line nor pass for
// another: every byte of what does not print (control and format
// characters, any space but ' ', invalid UTF-8) and of '%' itself is
// written %XX, an escaping that reverses, so two claims never show the
// same. A claim whose escaping is over maxShownClaim bytes is shown as
// the escaping's first bytes (never half an escape or a character),
// longClaimMark and the hex SHA-256 of the whole claim: two long claims
// that share those first bytes still show apart, and neither can show as
// a short one.
func showClaim(s string) string {
	var b strings.Builder
	var parts []string // each character's escaping, while it may still fit
	over := false
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		part := s[i : i+n]
		if r == '%' || !unicode.IsPrint(r) || (r == utf8.RuneError && n == 1) {
			var e strings.Builder
			for _, c := range []byte(part) {
				fmt.Fprintf(&e, "%%%02X", c)
			}
			part = e.String()
		}
		i += n
		if b.Len()+len(part) > maxShownClaim {
			over = true
			break
		}
		b.WriteString(part)
		parts = append(parts, part)
	}
	if !over {
		return b.String()
	}
	sum := sha256.Sum256([]byte(s))
	mark := longClaimMark + hex.EncodeToString(sum[:])
	b.Reset()
	for _, part := range parts {
		if b.Len()+len(part)+len(mark) > maxShownClaim {
			break
		}
		b.WriteString(part)
	}
	return b.String() + mark
}
