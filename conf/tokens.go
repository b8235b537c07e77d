package conf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"unicode/utf8"
)

// The bearer-token file of `toolgate serve --listen` (--auth-tokens): one
// token per line,
//
//	<name> <token> [scope ...]
//
// where name is what the audit records and the metrics call the principal,
// token is the bearer token itself or "sha256:" and the hex SHA-256 of it
// (so that the file need not hold the secret), and the scopes are what the
// principal holds (see serve --tool-scope). '#' starts a comment at a line
// start or after whitespace. The file is trusted as tools.conf is (owner
// and every directory above it: checkTrusted), refused when group- or
// world-writable, refused when it holds a literal token and is
// world-readable, and refused when it holds a token that was published as
// an example (publishedTokens).

// MinTokenLength is the shortest literal token accepted: 32 characters,
// as a random token of at least 128 bits needs in hex or base64.
const MinTokenLength = 32

// MaxTokenLength is the longest bearer token toolgate reads (static or
// JWT): longer ones are refused before any parsing.
const MaxTokenLength = 8 << 10

// TokenDigestPrefix marks a token written as its SHA-256.
const TokenDigestPrefix = "sha256:"

// publishedTokens are the hex SHA-256 digests of tokens that have been
// published, and that anyone can therefore present, each with where: a
// token file holding one, as the token or as its digest, is refused. It
// is the one list of them: a token or digest shown in the README, docs/
// or deploy/ must be in it (TestPublishedTokensListed), and none of the
// manifests may hold one (deploy/kubernetes/manifests_test.go).
var publishedTokens = map[string]string{
	// The token "example-token-replace-me-0123456789abcdef", whose digest
	// deploy/kubernetes/secret.yaml shipped, with the token in its comment.
	"401fe3ccb9f5ffb678ecd700eb48039250d139152a40c65a83eccc706b997819": "the example of the deploy/kubernetes/secret.yaml toolgate shipped",
}

// PublishedToken reports whether digest is the SHA-256 of a token that
// has been published as an example, and where.
func PublishedToken(digest [sha256.Size]byte) (where string, published bool) {
	where, published = publishedTokens[hex.EncodeToString(digest[:])]
	return where, published
}

// Token is one line of the token file.
type Token struct {
	// Name names the principal in audit records and metrics.
	Name string
	// Digest is the SHA-256 of the token; the token itself is not kept.
	Digest [sha256.Size]byte
	// Scopes are the scopes the principal holds.
	Scopes []string
	// Line is the line number in the file.
	Line int
}

// Tokens is a loaded, validated token file.
type Tokens struct {
	Path   string
	Tokens []Token
}

var (
	tokenNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)
	// RFC 6750 b64token.
	tokenRe = regexp.MustCompile(`^[A-Za-z0-9\-._~+/]+=*$`)
	// RFC 6749 scope-token: %x21 / %x23-5B / %x5D-7E.
	scopeRe = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]{1,128}$`)
)

// ValidScope reports whether s is an RFC 6749 scope token (at most 128
// characters).
func ValidScope(s string) bool { return scopeRe.MatchString(s) }

// LoadTokens reads and validates the token file at path. Every refused
// line is reported (errors.Join of *Error); the error text never quotes a
// token.
func LoadTokens(path string) (*Tokens, error) {
	f, err := OpenFile(path, 0)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, &Error{File: path, Field: "file", Err: fmt.Errorf("not a regular file (mode %s)", fi.Mode())}
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return nil, &Error{File: path, Field: "file", Err: fmt.Errorf("group- or world-writable (mode %04o): anyone who can write it can give themselves a token; chmod go-w %s", perm, path)}
	}
	checked, err := checkTrusted(path, os.Geteuid())
	if err == nil {
		err = checkSame(path, fi, checked)
	}
	if err != nil {
		return nil, &Error{File: path, Field: "file", Err: err}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	t, err := parseTokens(path, data)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o004 != 0 && t.literal {
		return nil, &Error{File: path, Field: "file", Err: fmt.Errorf("world-readable (mode %04o) and it holds tokens: chmod o-r %s, or write each token as sha256:HEX", fi.Mode().Perm(), path)}
	}
	return &Tokens{Path: path, Tokens: t.tokens}, nil
}

type parsedTokens struct {
	tokens  []Token
	literal bool // a token was written as itself
}

// parseTokens validates the text of a token file.
func parseTokens(path string, data []byte) (*parsedTokens, error) {
	var errs []error
	fail := func(line int, field string, format string, a ...any) {
		errs = append(errs, &Error{File: path, Line: line, Field: field, Err: fmt.Errorf(format, a...)})
	}
	if len(data) > MaxFileSize {
		return nil, &Error{File: path, Field: "file", Err: fmt.Errorf("over %d bytes", MaxFileSize)}
	}
	if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		return nil, &Error{File: path, Field: "file", Err: errors.New("not UTF-8 text")}
	}
	out := &parsedTokens{}
	names := map[string]int{}
	digests := map[[sha256.Size]byte]int{}
	for i, raw := range strings.Split(string(data), "\n") {
		n := i + 1
		f := tokenFields(raw)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			fail(n, "token", "want <name> <token> [scope ...]")
			continue
		}
		t := Token{Name: f[0], Line: n}
		if !tokenNameRe.MatchString(t.Name) {
			fail(n, "name", "%q: want 1 to 64 of [A-Za-z0-9._@-], starting with a letter or digit", t.Name)
			continue
		}
		if prev, ok := names[t.Name]; ok {
			fail(n, "name", "%q is also on line %d", t.Name, prev)
			continue
		}
		names[t.Name] = n
		tok := f[1]
		if hexDigest, ok := strings.CutPrefix(tok, TokenDigestPrefix); ok {
			b, err := hex.DecodeString(hexDigest)
			if err != nil || len(b) != sha256.Size {
				fail(n, "token", "sha256: wants 64 hex digits")
				continue
			}
			copy(t.Digest[:], b)
		} else {
			// The token itself is never quoted in an error.
			switch {
			case len(tok) < MinTokenLength:
				fail(n, "token", "%d characters: a token needs at least %d (e.g. openssl rand -hex 32)", len(tok), MinTokenLength)
				continue
			case len(tok) > MaxTokenLength:
				fail(n, "token", "over %d characters", MaxTokenLength)
				continue
			case !tokenRe.MatchString(tok):
				fail(n, "token", "not an RFC 6750 bearer token (A-Z a-z 0-9 - . _ ~ + / then =)")
				continue
			}
			t.Digest = sha256.Sum256([]byte(tok))
			out.literal = true
		}
		if where, published := PublishedToken(t.Digest); published {
			fail(n, "token", "a published example token (%s): anyone can present it; make one of your own (openssl rand -hex 32)", where)
			continue
		}
		if prev, ok := digests[t.Digest]; ok {
			fail(n, "token", "the same token as line %d", prev)
			continue
		}
		digests[t.Digest] = n
		bad := false
		for _, s := range f[2:] {
			if !ValidScope(s) {
				fail(n, "scope", "%q is not an RFC 6749 scope token", s)
				bad = true
			}
		}
		if bad {
			continue
		}
		t.Scopes = f[2:]
		out.tokens = append(out.tokens, t)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(out.tokens) == 0 {
		return nil, &Error{File: path, Field: "file", Err: errors.New("no tokens: a server with an empty token file could be reached by no one")}
	}
	return out, nil
}

// tokenFields splits a line on whitespace, up to a comment.
func tokenFields(line string) []string {
	var out []string
	for f := range strings.FieldsSeq(line) {
		if strings.HasPrefix(f, "#") {
			break
		}
		out = append(out, f)
	}
	return out
}
