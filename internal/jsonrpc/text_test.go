package jsonrpc

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBoundText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{strings.Repeat("a", 100) + "END", 60, strings.Repeat("a", 14) + " …[toolgate: 85 bytes cut]… " + "aEND"},
		{strings.Repeat("é", 100), 60, strings.Repeat("é", 7) + " …[toolgate: 182 bytes cut]… " + "éé"},
	} {
		got := BoundText(tc.in, tc.max)
		if got != tc.want || len(got) > tc.max || !utf8.ValidString(got) {
			t.Errorf("BoundText(%.20q…, %d) = %q (%d bytes), want %q", tc.in, tc.max, got, len(got), tc.want)
		}
	}
}

// TestNoArgs: only an absent, null or empty-object payload is accepted;
// anything else names what it got.
func TestNoArgs(t *testing.T) {
	for _, tc := range []struct {
		name, args, wantErr string
	}{
		{"absent", "", ""},
		{"null", "null", ""},
		{"empty object", "{}", ""},
		{"keys", `{"b":1,"a":2}`, `takes no arguments, got "a", "b"`},
		{"array", "[1]", "arguments must be an object"},
		{"string", `"x"`, "arguments must be an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := NoArgs(json.RawMessage(tc.args))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("NoArgs(%q) = %v, want %q", tc.args, err, tc.wantErr)
			}
		})
	}
}

// TestCanonicalID: ids mcp-go takes for one are one.
func TestCanonicalID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"7", "7"}, {"7.0", "7"}, {"1e1", "10"}, {`"a"`, `"a"`}, {`"\u0061"`, `"a"`}, {"not json", "not json"},
	} {
		if got := CanonicalID(json.RawMessage(tc.in)); got != tc.want {
			t.Errorf("CanonicalID(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
