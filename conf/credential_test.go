package conf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testbin"
)

// secretFile writes a secret file under the fixture's root (outside DIR).
func secretFile(t *testing.T, f fixture, name, content string, mode os.FileMode) string {
	t.Helper()
	d := filepath.Join(f.root, "secrets")
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(d, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCredentialRules: a credential line gives a test-class tool a header
// for one of its egress destinations, its value read from a safe file and
// never printed; every misplaced one, unsafe file or bad header refuses the
// file with its line, field and reason.
func TestCredentialRules(t *testing.T) {
	if os.Geteuid() != 0 {
		testbin.Missing(t, "secret files are trusted as tools.conf is: this test makes them as root")
	}
	f := newFixture(t)
	key := secretFile(t, f, "openai", "Bearer sk-test-123\n", 0o600)
	ro := secretFile(t, f, "ro", "k2", 0o400)
	base := "tool api EXE test 60 4096 on DIR -- fetch\ntool rd EXE read 60 4096 off DIR --\negress api api.example.com:443 127.0.0.1:8080 *.example.org:443\n"
	c := parse(t, f.line(base+"credential api api.example.com:443 authorization "+key+"\ncredential api 127.0.0.1:8080 x-api-key "+ro+"\n"))
	if c.State != StateLoaded {
		t.Fatalf("refused: %v", c.Errors)
	}
	cr := c.Tools[0].Credentials
	if len(cr) != 2 || cr[0].Dest.String() != "api.example.com:443" || cr[0].Header != "Authorization" || cr[0].Value.Reveal() != "Bearer sk-test-123" ||
		cr[0].Line != 4 || cr[1].Header != "X-Api-Key" || cr[1].Value.Reveal() != "k2" {
		t.Fatalf("credentials = %+v", cr)
	}
	// The value shows nowhere it could be printed or encoded.
	js, _ := json.Marshal(c.Tools[0])
	for _, shown := range []string{fmt.Sprintf("%v %+v %#v %s", cr[0], cr[0], cr[0], cr[0].Value), string(js)} {
		if strings.Contains(shown, "sk-test") {
			t.Errorf("the secret is shown: %s", shown)
		}
	}
	if err := os.WriteFile(filepath.Join(f.dir, "key"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tooMany := secretFile(t, f, "loose", "x", 0o640)
	empty := secretFile(t, f, "empty", "\n", 0o600)
	twoLines := secretFile(t, f, "two", "a\nb\n", 0o600)
	visible := secretFile(t, f, "visible", "x", 0o600)
	for _, tc := range []struct {
		name, line, field, want string
		opts                    Options
	}{
		{"unknown tool", "credential nosuch api.example.com:443 Authorization " + key, "credential", `unknown tool "nosuch"`, Options{}},
		{"read-class tool", "credential rd api.example.com:443 Authorization " + key, "credential", "read-class tool", Options{}},
		{"not on the egress line", "credential api other.example.com:443 Authorization " + key, "destination", "not on \"api\"'s egress line", Options{}},
		{"a wildcard", "credential api *.example.org:443 Authorization " + key, "destination", "never a wildcard", Options{}},
		{"a hop header", "credential api api.example.com:443 Host " + key, "header", "the connection's or the proxy's own", Options{}},
		{"a proxy header", "credential api api.example.com:443 Proxy-Authorization " + key, "header", "the connection's or the proxy's own", Options{}},
		{"a bad header", "credential api api.example.com:443 x:y " + key, "header", "want a header name", Options{}},
		{"a relative file", "credential api api.example.com:443 Authorization secrets/openai", "secret-file", "absolute, clean", Options{}},
		{"no file", "credential api api.example.com:443 Authorization " + f.root + "/secrets/none", "secret-file", "no such file", Options{}},
		{"mode 0640", "credential api api.example.com:443 Authorization " + tooMany, "secret-file", "mode 0640", Options{}},
		{"empty", "credential api api.example.com:443 Authorization " + empty, "secret-file", "is empty", Options{}},
		{"two lines", "credential api api.example.com:443 Authorization " + twoLines, "secret-file", "control character", Options{}},
		{"in a sandbox's dir", "credential api api.example.com:443 Authorization " + filepath.Join(f.dir, "key"), "secret-file", "sandbox binds", Options{}},
		{
			"seen by every sandbox", "credential api api.example.com:443 Authorization " + visible, "secret-file", "every sandbox sees",
			Options{Visible: func(p string) bool { return p == visible }},
		},
		{"fields", "credential api api.example.com:443 Authorization", "credential", "want `credential <tool>", Options{}},
		{"twice", "credential api api.example.com:443 Authorization " + key + "\ncredential api api.example.com:443 X-Other " + ro, "credential", "already: one per destination", Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Builtins = testBuiltins
			c := Parse("tools.conf", []byte(f.line(base+tc.line+"\n")), opts)
			e := firstErr(t, c)
			if e.Field != tc.field || !strings.Contains(e.Err.Error(), tc.want) || strings.Contains(e.Error(), "sk-test") {
				t.Errorf("error %+v, want field %s, %q", e, tc.field, tc.want)
			}
		})
	}
}

// TestEnvRules: an env line adds non-secret variables to a test-class
// tool; a read-class tool's, a reserved name, a secret-looking one, a
// second line are refused with line and reason.
func TestEnvRules(t *testing.T) {
	f := newFixture(t)
	base := "tool api EXE test 60 4096 on DIR -- fetch\ntool rd EXE read 60 4096 off DIR --\n"
	c := parse(t, f.line(base+"env api HOME=/tmp CODEX_HOME=/tmp/codex RUST_LOG=warn\n"))
	if c.State != StateLoaded {
		t.Fatalf("refused: %v", c.Errors)
	}
	if got := strings.Join(c.Tools[0].Env, " "); got != "HOME=/tmp CODEX_HOME=/tmp/codex RUST_LOG=warn" || c.Tools[0].EnvLine != 3 {
		t.Errorf("env = %q line %d", got, c.Tools[0].EnvLine)
	}
	for _, tc := range []struct{ name, line, want string }{
		{"read class", "env rd HOME=/tmp", "seed 000"},
		{"unknown tool", "env nosuch HOME=/tmp", `unknown tool "nosuch"`},
		{"PATH", "env api PATH=/x", "toolgate's, the loader's or the sandbox's own"},
		{"LD_PRELOAD", "env api LD_PRELOAD=/x.so", "the loader's"},
		{"a proxy", "env api https_proxy=http://x:1", "the sandbox's own"},
		{"SSL_CERT_FILE", "env api SSL_CERT_FILE=/x", "the sandbox's own"},
		{"a key", "env api OPENAI_API_KEY=sk-1", "use credential"},
		{"a token", "env api GH_TOKEN=x", "use credential"},
		{"a password", "env api DB_PASSWORD=x", "use credential"},
		{"no value", "env api HOME", "want KEY=VALUE"},
		{"a bad name", "env api 1X=2", "want KEY=VALUE"},
		{"twice", "env api A=1 A=2", "set twice"},
		{"two lines", "env api A=1\nenv api B=2", "env line already, line 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := firstErr(t, parse(t, f.line(base+tc.line+"\n")))
			if e.Field != "env" || !strings.Contains(e.Err.Error(), tc.want) {
				t.Errorf("error %+v, want field env, %q", e, tc.want)
			}
		})
	}
}
