// Package credscan is the tests' search of shipped files (the manifests,
// the Helm chart) for what must never ship in them: a literal bearer
// token, a token's sha256: digest, or a published example token.
package credscan

import (
	"crypto/sha256"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/conf"
)

var (
	// tokenish is what could be a literal bearer token: 32 or more
	// characters of RFC 6750's alphabet, without the '.' and '/' of names
	// and paths.
	tokenish = regexp.MustCompile(`[A-Za-z0-9_~+-]{32,}=*`)
	digest   = regexp.MustCompile(`sha256:[0-9A-Fa-f]{64}`)
)

// File reports, as errors of t naming name and the line, every such
// credential in b, the contents of the file name.
func File(t testing.TB, name string, b []byte) {
	t.Helper()
	for i, l := range strings.Split(string(b), "\n") {
		if m := digest.FindString(l); m != "" {
			t.Errorf("%s:%d: a token digest (%.16s...)", name, i+1, m)
		}
		if m := tokenish.FindString(l); m != "" {
			t.Errorf("%s:%d: %.8s... could be a token", name, i+1, m)
		}
		for _, w := range strings.FieldsFunc(l, func(r rune) bool { return strings.ContainsRune(" \t\"':=,", r) }) {
			if where, ok := conf.PublishedToken(sha256.Sum256([]byte(w))); ok {
				t.Errorf("%s:%d: a published token (%s)", name, i+1, where)
			}
		}
	}
}
