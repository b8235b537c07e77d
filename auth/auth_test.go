package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestShowClaim(t *testing.T) {
	digest := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	long := strings.Repeat("a", 300)
	for _, tc := range []struct{ in, want string }{
		{"alice", "alice"},
		{"system:serviceaccount:agents:ci runner", "system:serviceaccount:agents:ci runner"},
		{"élève", "élève"},
		{"a\x01", "a%01"},
		{"a\n{\"principal\":\"root\"}", "a%0A{\"principal\":\"root\"}"},
		{"a%01", "a%2501"},
		{"a\xff", "a%FF"},
		{"a\uFFFD", "a\uFFFD"},            // the replacement character itself prints
		{"a\u202Eevil", "a%E2%80%AEevil"}, // a bidi override is a format character
		{"a\u00A0b", "a%C2%A0b"},          // no space but ' '
		{strings.Repeat("a", 256), strings.Repeat("a", 256)},
		{long, long[:183] + "%~sha256:" + digest(long)},
		// The cut never splits an escape or a character.
		{strings.Repeat("a", 182) + "\x01" + long, strings.Repeat("a", 182) + "%~sha256:" + digest(strings.Repeat("a", 182)+"\x01"+long)},
		{strings.Repeat("a", 182) + "é" + long, strings.Repeat("a", 182) + "%~sha256:" + digest(strings.Repeat("a", 182)+"é"+long)},
		// A short claim that spells a long one's shape shows as itself, escaped.
		{"a%~sha256:" + digest(long), "a%25~sha256:" + digest(long)},
	} {
		if got := showClaim(tc.in); got != tc.want {
			t.Errorf("showClaim(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := showClaim(tc.in); len(got) > maxShownClaim {
			t.Errorf("showClaim(%q) is %d bytes, want at most %d", tc.in, len(got), maxShownClaim)
		}
	}
	// No two of these claims, which the old cut-and-replace showed alike
	// in pairs, show the same.
	claims := []string{
		"a?", "a\x01", "a\x02", "a%01", "a%2501", "a\xff", "a\uFFFD",
		long + "x", long + "y", long, long[:256], long[:255] + "%",
	}
	seen := map[string]string{}
	for _, c := range claims {
		s := showClaim(c)
		if prev, ok := seen[s]; ok {
			t.Errorf("showClaim(%q) = showClaim(%q) = %q", c, prev, s)
		}
		seen[s] = c
	}
}

// TestPrincipalKey: the key of sessions and queues is the exact
// (issuer, subject) pair of an OAuth principal, apart from every token
// file name, whatever the shown names.
func TestPrincipalKey(t *testing.T) {
	ps := []Principal{
		{Name: "alice", Method: MethodToken},
		{Name: "alice", Method: MethodOAuth, Issuer: "https://a.test", Subject: "alice"},
		{Name: "alice", Method: MethodOAuth, Issuer: "https://b.test", Subject: "alice"},
		{Name: "a%01", Method: MethodOAuth, Issuer: "https://a.test", Subject: "a\x01"},
		{Name: "a%01", Method: MethodOAuth, Issuer: "https://a.test", Subject: "a%01"}, // a Name that lies
		{Name: "x", Method: MethodOAuth, Issuer: `https://a.test"/"b`, Subject: "c"},
		{Name: "x", Method: MethodOAuth, Issuer: "https://a.test", Subject: `b"/"c`},
	}
	seen := map[string]int{}
	for i, p := range ps {
		k := p.Key()
		if j, ok := seen[k]; ok {
			t.Errorf("principals %+v and %+v share the key %q", ps[j], p, k)
		}
		seen[k] = i
	}
	if got, want := ps[3].Key(), `oauth/"https://a.test"/"a\x01"`; got != want {
		t.Errorf("key() = %q, want %q", got, want)
	}
}
