package conf

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const tok32 = "0123456789abcdef0123456789abcdef"

func TestParseTokenFile(t *testing.T) {
	sum := sha256.Sum256([]byte("another-token-0123456789abcdef0123"))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	for _, tc := range []struct {
		name    string
		text    string
		want    []string // name:scopes
		literal bool
		wantErr string
	}{
		{
			name: "literal and digest", text: "# comment\nci " + tok32 + " tools.read tools.test # trailing\n\nops " + digest + "\n",
			want: []string{"ci:tools.read,tools.test", "ops:"}, literal: true,
		},
		{name: "digests only", text: "ops " + digest + "\n", want: []string{"ops:"}},
		{name: "short token", text: "ci 0123456789\n", wantErr: "1: token: 10 characters: a token needs at least 32"},
		{name: "no token", text: "ci\n", wantErr: "want <name> <token>"},
		{name: "bad name", text: "-ci " + tok32 + "\n", wantErr: "name: \"-ci\""},
		{name: "duplicate name", text: "ci " + tok32 + "\nci " + digest + "\n", wantErr: "2: name: \"ci\" is also on line 1"},
		{name: "duplicate token", text: "ci " + tok32 + "\nops sha256:" + hexSum(tok32) + "\n", wantErr: "2: token: the same token as line 1"},
		{name: "bad digest", text: "ci sha256:abc\n", wantErr: "sha256: wants 64 hex digits"},
		{name: "not a bearer token", text: "ci " + tok32 + "\"x\n", wantErr: "not an RFC 6750 bearer token"},
		{name: "bad scope", text: "ci " + tok32 + " a\"b\n", wantErr: "scope: \"a\\\"b\""},
		{name: "empty", text: "# nothing\n", wantErr: "no tokens"},
		{name: "every error at once", text: "ci 1\nops sha256:zz\n", wantErr: "1: token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTokens("tokens", []byte(tc.text))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseTokens = %v, want an error with %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), tok32) {
					t.Errorf("the error %q quotes a token", err)
				}
				if _, ok := errors.AsType[*Error](err); !ok {
					t.Errorf("the error is not a *conf.Error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tk := range got.tokens {
				names = append(names, tk.Name+":"+strings.Join(tk.Scopes, ","))
			}
			if !slices.Equal(names, tc.want) || got.literal != tc.literal {
				t.Errorf("parseTokens = %v (literal %v), want %v (literal %v)", names, got.literal, tc.want, tc.literal)
			}
		})
	}
	if e := errorsOf(t, "ci 1\nops sha256:zz\n"); e != 2 {
		t.Errorf("two bad lines gave %d errors, want 2", e)
	}
}

func hexSum(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func errorsOf(t *testing.T, text string) int {
	_, err := parseTokens("tokens", []byte(text))
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		return len(j.Unwrap())
	}
	return 1
}

func TestLoadTokensModes(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		text    string
		mode    os.FileMode
		wantErr string
	}{
		{"0600 literal", "ci " + tok32 + "\n", 0o600, ""},
		{"0640 literal", "ci " + tok32 + "\n", 0o640, ""},
		{"0644 literal", "ci " + tok32 + "\n", 0o644, "world-readable (mode 0644) and it holds tokens"},
		{"0644 digests", "ci sha256:" + hexSum(tok32) + "\n", 0o644, ""},
		{"0620", "ci " + tok32 + "\n", 0o620, "group- or world-writable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(p, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			got, err := LoadTokens(p)
			if tc.wantErr == "" {
				if err != nil || len(got.Tokens) != 1 || got.Tokens[0].Name != "ci" {
					t.Fatalf("LoadTokens = %v, %v", got, err)
				}
				if want := sha256.Sum256([]byte(tok32)); got.Tokens[0].Digest != want {
					t.Errorf("digest of the token is not its SHA-256")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("LoadTokens = %v, want %q", err, tc.wantErr)
			}
		})
	}
	// The trust rules of tools.conf: a directory others may write.
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	p := filepath.Join(open, "tokens")
	os.WriteFile(p, []byte("ci "+tok32+"\n"), 0o600)
	if _, err := LoadTokens(p); !errors.Is(err, ErrUntrusted) {
		t.Errorf("LoadTokens in a world-writable directory = %v, want ErrUntrusted", err)
	}
}

// TestTokenFileRefusesPublishedTokens: a token file holding a token that
// was published as an example (the one deploy/kubernetes/secret.yaml
// shipped), as itself or as its digest, is refused with the line and why,
// never quoting it; a token of one's own on the line beside is not what
// is refused.
func TestTokenFileRefusesPublishedTokens(t *testing.T) {
	const shipped = "example-token-replace-me-0123456789abcdef"
	for _, tc := range []struct{ name, line string }{
		{"the shipped digest", "ci-runner sha256:401fe3ccb9f5ffb678ecd700eb48039250d139152a40c65a83eccc706b997819"},
		{"the shipped token itself", "ci-runner " + shipped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(p, []byte("ops "+tok32+"\n"+tc.line+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadTokens(p)
			want := p + ":2: token: a published example token"
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "openssl rand -hex 32") {
				t.Fatalf("LoadTokens = %v, want %q and how to make one's own", err, want)
			}
			if strings.Contains(err.Error(), shipped) || strings.Contains(err.Error(), "401fe3cc") {
				t.Errorf("the error %q quotes the token or its digest", err)
			}
			if strings.Contains(err.Error(), ":1:") {
				t.Errorf("the error %q refuses line 1, a token of the operator's own", err)
			}
		})
	}
}
