package conf

import (
	"fmt"
	"io"
	"maps"
	"net/textproto"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/egress/allowlist"
)

// Credential is one credential directive: the egress proxy sets Header to
// the secret file's content on every request the tool sends to Dest, and
// the sandbox never holds it.
type Credential struct {
	// Dest is the destination, one of the tool's egress rules (never a
	// wildcard).
	Dest allowlist.Rule
	// Header is the header's canonical name (Authorization, X-Api-Key).
	Header string
	// File is the secret file as written.
	File string
	// Value is the file's content less one trailing newline.
	Value Secret
	// Line is the credential line's number.
	Line int
}

// Secret is a credential's value: it prints as [redacted] however it is
// formatted or encoded; Reveal gives it to the one place that sends it
// (the egress proxy).
type Secret struct{ v string }

// NewSecret wraps v.
func NewSecret(v string) Secret { return Secret{v} }

// Reveal returns the value.
func (s Secret) Reveal() string { return s.v }

func (Secret) String() string               { return "[redacted]" }
func (Secret) GoString() string             { return "[redacted]" }
func (Secret) Format(f fmt.State, _ rune)   { _, _ = io.WriteString(f, "[redacted]") }
func (Secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

// MaxSecretBytes bounds a secret file.
const MaxSecretBytes = 8 << 10

// hopHeaders are headers a credential may not name: the proxy's and the
// connection's own.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Host": true, "Content-Length": true, "Content-Type": true,
}

// credentialLine is a credential directive before it is attached.
type credentialLine struct {
	name   string
	dest   allowlist.Rule
	header string
	file   string
	line   int
}

// decodeCredential parses credential <tool> <host:port> <header-name> <secret-file>.
func decodeCredential(l line) (credentialLine, []error) {
	if len(l.tokens) != 5 {
		return credentialLine{}, []error{fieldErrf("credential", "want `credential <tool> <host:port> <header-name> <secret-file>`, got %d fields", len(l.tokens))}
	}
	c := credentialLine{name: l.tokens[1], line: l.num}
	var errs []error
	dest, err := CredentialDest(l.tokens[2])
	if err != nil {
		errs = append(errs, fieldErr("destination", err))
	}
	c.dest = dest
	if err := CheckCredentialHeader(l.tokens[3]); err != nil {
		errs = append(errs, fieldErr("header", err))
	}
	c.header = textproto.CanonicalMIMEHeaderKey(l.tokens[3])
	if err := CheckSecretPath(l.tokens[4]); err != nil {
		errs = append(errs, fieldErr("secret-file", err))
	}
	c.file = l.tokens[4]
	return c, errs
}

// CredentialDest parses a credential's destination: one host:port, never
// a wildcard (tools.conf's credential line and the registry's
// egress_credentials alike).
func CredentialDest(s string) (allowlist.Rule, error) {
	r, err := allowlist.ParseRule(s)
	if err != nil {
		return r, err
	}
	if r.Wildcard() {
		return r, fmt.Errorf("%q: a credential goes to one destination, never a wildcard", s)
	}
	return r, nil
}

// CheckCredentialHeader refuses a header name that is no token, or is the
// connection's or the proxy's own.
func CheckCredentialHeader(h string) error {
	switch {
	case !validToken(h):
		return fmt.Errorf("%q: want a header name (letters, digits and !#$%%&'*+-.^_`|~)", h)
	case hopHeaders[textproto.CanonicalMIMEHeaderKey(h)] || strings.HasPrefix(strings.ToLower(h), "proxy-"):
		return fmt.Errorf("%q is the connection's or the proxy's own header, not a credential", h)
	}
	return nil
}

// CheckSecretPath refuses a secret file's path that is not absolute and
// clean (the file itself is judged by ReadSecret).
func CheckSecretPath(f string) error {
	if !filepath.IsAbs(f) || filepath.Clean(f) != f {
		return fmt.Errorf("%q: want an absolute, clean path", f)
	}
	return nil
}

// validToken reports an RFC 9110 token.
func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// attachCredentials gives each credential line to its tool (after the
// egress lines): a test-class tool whose egress line lists the
// destination, one credential per destination, the secret file safe.
func attachCredentials(path string, lines []line, creds []credentialLine, tools []Tool, opts Options) []error {
	byNum := lineIndex(lines)
	byName := toolIndex(tools)
	var errs []error
	for _, c := range creds {
		i, ok := byName[c.name]
		var err error
		switch {
		case !ok:
			err = fieldErrf("credential", "unknown tool %q: credential names a tool that a tool line defines", c.name)
		case tools[i].Class != ClassTest:
			err = fieldErrf("credential", "%q is a %s-class tool: a credential is for a test-class tool, which uses it through toolgate's proxy and never holds it", c.name, tools[i].Class)
		case !Listed(tools[i].Egress, c.dest):
			err = fieldErrf("destination", "%s is not on %q's egress line: a credential goes to a listed destination", c.dest, c.name)
		case hasCredential(tools[i], c.dest):
			err = fieldErrf("credential", "%q has a credential for %s already: one per destination", c.name, c.dest)
		default:
			var v Secret
			v, err = ReadSecret(c.file, SandboxDirs(tools), opts.Visible)
			if err == nil {
				tools[i].Credentials = append(tools[i].Credentials, Credential{Dest: c.dest, Header: c.header, File: c.file, Value: v, Line: c.line})
			} else {
				err = fieldErr("secret-file", err)
			}
		}
		if err != nil {
			errs = append(errs, lineErrors(path, byNum[c.line], []error{err})...)
		}
	}
	return errs
}

func Listed(l allowlist.List, r allowlist.Rule) bool {
	for _, x := range l {
		if x.String() == r.String() {
			return true
		}
	}
	return false
}

func hasCredential(t Tool, r allowlist.Rule) bool {
	for _, c := range t.Credentials {
		if c.Dest.String() == r.String() {
			return true
		}
	}
	return false
}

// SandboxDirs are the dirs the sandboxes of tools bind, each with whose.
func SandboxDirs(tools []Tool) map[string]string {
	m := map[string]string{}
	for _, t := range tools {
		if t.Class != ClassTest {
			continue
		}
		for _, d := range []string{t.DirResolved, t.Dir} {
			if d != "" {
				m[d] = fmt.Sprintf("%q's sandbox", t.Name)
			}
		}
	}
	return m
}

// ReadSecret reads a secret file that is trusted as tools.conf is (owned by
// root or toolgate's user, in directories no one else can write), mode
// 0600 or 0400, a regular file that no sandbox binds (none of bound, a
// path → whose sandbox binds it, nothing visible says every sandbox sees),
// holding one line of printable characters.
func ReadSecret(p string, bound map[string]string, visible func(string) bool) (Secret, error) {
	fi, err := checkTrusted(p, os.Geteuid())
	if err != nil {
		return Secret{}, err
	}
	if !fi.Mode().IsRegular() {
		return Secret{}, fmt.Errorf("%s is not a regular file", p)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 && perm != 0o400 {
		return Secret{}, fmt.Errorf("%s has mode %04o: a secret file is 0600 or 0400 (chmod 0600)", p, perm)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return Secret{}, err
	}
	for _, d := range slices.Sorted(maps.Keys(bound)) {
		if bundle.Within(real, filepath.Clean(d)) {
			return Secret{}, fmt.Errorf("%s is inside %s, which %s binds: keep secret files where no sandbox sees them", p, d, bound[d])
		}
	}
	if visible != nil && visible(real) {
		return Secret{}, fmt.Errorf("%s is a path every sandbox sees: keep secret files where no sandbox sees them (e.g. /etc/toolgate/secrets, mode 0700)", p)
	}
	f, err := OpenFile(p, syscall.O_NOFOLLOW)
	if err != nil {
		return Secret{}, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return Secret{}, fmt.Errorf("%s is not a regular file", p)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretBytes+1))
	if err != nil {
		return Secret{}, err
	}
	if len(b) > MaxSecretBytes {
		return Secret{}, fmt.Errorf("%s is larger than %d bytes", p, MaxSecretBytes)
	}
	v := strings.TrimSuffix(string(b), "\n")
	if v == "" {
		return Secret{}, fmt.Errorf("%s is empty", p)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return Secret{}, fmt.Errorf("%s: byte %d is a control character: a header value is one line of printable characters", p, i+1)
		}
	}
	return NewSecret(v), nil
}

// envLine is an env directive before it is attached.
type envLine struct {
	name string
	vars []string
	line int
}

// reservedEnv are names a tool's env line may not set: the four of seed
// 000, the loader's, the proxy's, the TLS trust settings toolgate sets.
var reservedEnv = map[string]bool{
	"PATH": true, "PAGER": true, "GIT_PAGER": true, "GIT_CONFIG_NOSYSTEM": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true, "ALL_PROXY": true, "FTP_PROXY": true,
	"NODE_EXTRA_CA_CERTS": true, "NODE_OPTIONS": true, "REQUESTS_CA_BUNDLE": true, "CURL_CA_BUNDLE": true,
	"GIT_SSL_CAINFO": true, "GIT_SSL_NO_VERIFY": true, "NODE_TLS_REJECT_UNAUTHORIZED": true,
	"GCONV_PATH": true, "GLIBC_TUNABLES": true, "HOSTALIASES": true, "LOCALDOMAIN": true,
	"RES_OPTIONS": true, "NLSPATH": true, "LOCPATH": true, "TMPDIR": true,
}

// secretSuffixes mark a name whose value is a secret: it belongs in a
// credential line.
var secretSuffixes = []string{"_KEY", "_TOKEN", "_SECRET", "_PASSWORD"}

// MaxEnvVars bounds one env line.
const MaxEnvVars = 32

// decodeEnv parses env <tool> KEY=VALUE...
func decodeEnv(l line) (envLine, []error) {
	if len(l.tokens) < 3 {
		return envLine{}, []error{fieldErrf("env", "want `env <tool> KEY=VALUE...`, got %d fields", len(l.tokens))}
	}
	e := envLine{name: l.tokens[1], line: l.num}
	var errs []error
	seen := map[string]bool{}
	if len(l.tokens)-2 > MaxEnvVars {
		errs = append(errs, fieldErrf("env", "%d variables: at most %d", len(l.tokens)-2, MaxEnvVars))
	}
	for _, kv := range l.tokens[2:] {
		k, v, ok := strings.Cut(kv, "=")
		up := strings.ToUpper(k)
		switch {
		case !ok || !validEnvName(k):
			errs = append(errs, fieldErrf("env", "%q: want KEY=VALUE, KEY of letters, digits and _ not starting with a digit", kv))
		case seen[k]:
			errs = append(errs, fieldErrf("env", "%s is set twice", k))
		case reservedEnv[up] || strings.HasPrefix(up, "LD_") || strings.HasPrefix(up, "SSL_") || strings.HasPrefix(up, "MALLOC_") || strings.HasPrefix(up, "TOOLGATE"):
			errs = append(errs, fieldErrf("env", "%s is toolgate's, the loader's or the sandbox's own: it cannot be set", k))
		case hasSecretSuffix(up):
			errs = append(errs, fieldErrf("env", "%s looks like a secret: use credential, so that the proxy adds it to the requests and the sandbox never holds it", k))
		case len(v) > 4096:
			errs = append(errs, fieldErrf("env", "%s: value longer than 4096 bytes", k))
		}
		seen[k] = true
		e.vars = append(e.vars, kv)
	}
	return e, errs
}

func validEnvName(k string) bool {
	if k == "" || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func hasSecretSuffix(up string) bool {
	for _, s := range secretSuffixes {
		if strings.HasSuffix(up, s) || up == strings.TrimPrefix(s, "_") {
			return true
		}
	}
	return false
}

// attachEnv gives each env line to its tool: a test-class tool (a
// read-class tool's environment is seed 000's four variables, exactly),
// one env line per tool.
func attachEnv(path string, lines []line, envs []envLine, tools []Tool) []error {
	byNum := lineIndex(lines)
	byName := toolIndex(tools)
	var errs []error
	for _, e := range envs {
		i, ok := byName[e.name]
		var err error
		switch {
		case !ok:
			err = fieldErrf("env", "unknown tool %q: env names a tool that a tool line defines", e.name)
		case tools[i].Class != ClassTest:
			err = fieldErrf("env", "%q is a %s-class tool: its environment is exactly PATH, PAGER, GIT_PAGER and GIT_CONFIG_NOSYSTEM (seed 000); env is for a test-class tool", e.name, tools[i].Class)
		case tools[i].EnvLine != 0:
			err = fieldErrf("env", "%q has an env line already, line %d: set every variable on one line", e.name, tools[i].EnvLine)
		default:
			tools[i].Env, tools[i].EnvLine = e.vars, e.line
		}
		if err != nil {
			errs = append(errs, lineErrors(path, byNum[e.line], []error{err})...)
		}
	}
	return errs
}

func lineIndex(lines []line) map[int]line {
	m := make(map[int]line, len(lines))
	for _, l := range lines {
		m[l.num] = l
	}
	return m
}

func toolIndex(tools []Tool) map[string]int {
	m := map[string]int{}
	for i, t := range tools {
		if _, dup := m[t.Name]; !dup {
			m[t.Name] = i
		}
	}
	return m
}
