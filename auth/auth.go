// Package auth authenticates the requests of toolgate's HTTP transport:
// the principal a request was authenticated as (Principal, carried in its
// context), bearer tokens checked against a token file (StaticTokens) or
// as JWT access tokens of an OAuth 2.1 issuer (OAuth), and the RFC 6750
// refusals. It knows nothing of tools or of the MCP server: what a
// principal may call is the server's (--tool-scope).
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/toolgate/toolgate/conf"
)

// Principal is who an HTTP request was authenticated as: the name audit
// records and per-principal limits use, how it was authenticated, and the
// scopes it holds.
type Principal struct {
	// Name is how audit records and logs show the principal: the token
	// file's name of the token, or the OAuth token's subject as
	// showClaim escapes it (two subjects never show the same).
	Name string
	// Method is MethodToken, MethodOAuth or MethodLocal.
	Method string
	// Issuer and Subject are an OAuth principal's iss and sub exactly as
	// the token says: the pair is who it is (Key), whatever Name shows.
	Issuer, Subject string
	// Scopes are the scopes the token carries (token file or the JWT's
	// scope/scp claim).
	Scopes []string
	// Client is the OAuth client the token was issued to (azp or
	// client_id), when the token says.
	Client string
	// peerUID is the uid of the process at the other end of a unix
	// socket (SO_PEERCRED): the local principal's, when hasPeer.
	peerUID int
	hasPeer bool
}

// The ways a principal is authenticated.
const (
	MethodToken = "token" // a static bearer token of --auth-tokens
	MethodOAuth = "oauth" // a JWT access token of --oauth-issuer
	MethodLocal = "local" // a unix socket listener without authentication: whoever the socket's mode lets connect
)

// LocalPrincipal is the principal of every request over a unix socket
// listener without authentication; its audit records carry the peer's uid
// too (peer_uid), and sessions and queues are each uid's own.
const LocalPrincipal = "local"

// Local is the principal of a request over a unix socket listener without
// authentication, from a process of uid.
func Local(uid int) Principal {
	return Principal{Name: LocalPrincipal, Method: MethodLocal, peerUID: uid, hasPeer: true}
}

// PeerUID returns the uid of a local principal's process; ok is false for
// a principal a token authenticated.
func (p Principal) PeerUID() (uid int, ok bool) { return p.peerUID, p.hasPeer }

// Key identifies p in sessions, queues and cancellation. It is
// injective: a token file's name and an OAuth subject that happen to be
// equal are not one principal, nor are two uids on a unix socket, and an
// OAuth principal is its exact (issuer, subject) pair, each quoted
// (strconv.Quote is reversible, and a quoted string ends where its
// closing quote is), never the Name that shows it.
func (p Principal) Key() string {
	if p.Method == MethodOAuth {
		return p.Method + "/" + strconv.Quote(p.Issuer) + "/" + strconv.Quote(p.Subject)
	}
	if p.hasPeer {
		return p.Method + "/" + p.Name + "/" + strconv.Itoa(p.peerUID)
	}
	return p.Method + "/" + p.Name
}

// HasScope reports whether p holds scope.
func (p Principal) HasScope(scope string) bool { return slices.Contains(p.Scopes, scope) }

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal of an HTTP request's context; ok
// is false over stdio.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Authenticator checks a bearer token.
type Authenticator interface {
	// Authenticate returns the principal of token, or an error: an
	// *Error for a token that is refused, anything else when the token
	// could not be checked now (ErrUnavailable).
	Authenticate(ctx context.Context, token string) (Principal, error)
}

// Error is a refused token: the RFC 6750 error code and a description
// that never quotes the token.
type Error struct {
	Code        string // invalid_token, invalid_request
	Description string
}

func (e *Error) Error() string { return e.Code + ": " + e.Description }

// ErrUnavailable wraps why a token could not be checked at all (the
// issuer's keys are not loaded): the client should retry, not discard its
// token.
var ErrUnavailable = errors.New("authentication unavailable")

func invalidToken(format string, a ...any) error {
	return &Error{Code: "invalid_token", Description: fmt.Sprintf(format, a...)}
}

// StaticTokens authenticates the bearer tokens of a token file.
// Replace swaps the whole set at once (a reload of the token file).
type StaticTokens struct {
	tokens atomic.Pointer[[]conf.Token]
}

// NewStaticTokens serves the tokens of t.
func NewStaticTokens(t *conf.Tokens) *StaticTokens {
	s := &StaticTokens{}
	s.Replace(t)
	return s
}

// Replace serves the tokens of t from the next request on, and no
// other: a request already authenticated keeps its principal.
func (s *StaticTokens) Replace(t *conf.Tokens) {
	tokens := slices.Clone(t.Tokens)
	s.tokens.Store(&tokens)
}

// Authenticate compares the SHA-256 of token with every entry's, in
// constant time and without stopping at a match, so that neither the
// comparison nor the number of entries compared tells how much of a token
// was right.
func (s *StaticTokens) Authenticate(_ context.Context, token string) (Principal, error) {
	sum := sha256.Sum256([]byte(token))
	match := -1
	tokens := *s.tokens.Load()
	for i := range tokens {
		if subtle.ConstantTimeCompare(sum[:], tokens[i].Digest[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return Principal{}, errUnknownToken
	}
	t := tokens[match]
	return Principal{Name: t.Name, Method: MethodToken, Scopes: slices.Clone(t.Scopes)}, nil
}

var errUnknownToken = invalidToken("unknown token")

// chain tries each authenticator in turn: the first that accepts the token
// wins. Otherwise the most telling refusal is the answer (one that says
// more than "unknown token"), unless an authenticator could not check the
// token at all and no other refused it for a reason of its own.
type chain []Authenticator

// Chain accepts a token any of auths accepts (static tokens, then
// OAuth).
func Chain(auths ...Authenticator) Authenticator { return chain(auths) }

func (c chain) Authenticate(ctx context.Context, token string) (Principal, error) {
	var refused, unavailable error
	for _, a := range c {
		p, err := a.Authenticate(ctx, token)
		switch {
		case err == nil:
			return p, nil
		case errors.Is(err, ErrUnavailable):
			unavailable = err
		case refused == nil || errors.Is(refused, errUnknownToken):
			refused = err
		}
	}
	if unavailable != nil && (refused == nil || errors.Is(refused, errUnknownToken)) {
		return Principal{}, unavailable
	}
	if refused == nil {
		refused = errUnknownToken
	}
	return Principal{}, refused
}

// BearerToken returns the token of an Authorization: Bearer header. ok is
// false when there is no Authorization header; err says why a header is
// refused.
func BearerToken(r *http.Request) (token string, ok bool, err error) {
	h := r.Header.Values("Authorization")
	if len(h) == 0 {
		return "", false, nil
	}
	if len(h) > 1 {
		return "", true, &Error{Code: "invalid_request", Description: "more than one Authorization header"}
	}
	scheme, tok, found := strings.Cut(h[0], " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", true, &Error{Code: "invalid_request", Description: "want Authorization: Bearer <token>"}
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", true, &Error{Code: "invalid_request", Description: "empty bearer token"}
	}
	if len(tok) > conf.MaxTokenLength {
		return "", true, invalidToken("token over %d bytes", conf.MaxTokenLength)
	}
	if r.URL.Query().Has("access_token") {
		return "", true, &Error{Code: "invalid_request", Description: "a token in the query string is not accepted"}
	}
	return tok, true, nil
}
