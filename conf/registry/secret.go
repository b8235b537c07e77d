package registry

// Credential heuristics of the tool-MCP registry. A registry names
// credentials by environment variable only; these rules refuse a literal
// that looks like one. They are deliberately broad: a false positive costs
// the operator one line (forward the value by name with env_vars or
// env_http_headers instead), a false negative leaks a secret into a file
// that is copied, diffed and printed.
//
// Security caveat: no heuristic recognises every secret. These catch the
// common shapes (credential-named variables and headers, Authorization
// schemes, well-known key prefixes, JWTs, URLs with passwords, long
// high-entropy strings); they do not make a literal safe.

import (
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// plaintextCredentialFields are server fields that would hold a credential
// value. None is part of the schema; each is refused with ErrCredential.
var plaintextCredentialFields = map[string]bool{
	"bearer_token": true, "token": true, "access_token": true, "api_key": true, "apikey": true,
	"password": true, "secret": true, "auth_token": true, "authorization": true,
}

// oauthFields are OAuth settings of other MCP clients; refused with ErrOAuth.
var oauthFields = map[string]bool{
	"oauth": true, "auth": true, "client_id": true, "client_secret": true, "scopes": true,
	"scope": true, "refresh_token": true, "token_url": true, "authorization_url": true,
	"redirect_uri": true, "credentials": true,
}

func isPlaintextCredentialField(f string) bool { return plaintextCredentialFields[strings.ToLower(f)] }

func isOAuthField(f string) bool {
	f = strings.ToLower(f)
	return oauthFields[f] || strings.HasPrefix(f, "oauth") || strings.HasPrefix(f, "mcp_oauth")
}

// credentialNameRule is one rule of credentialName.
type credentialNameRule struct {
	rule  string // how the rule reads in a refusal
	match func(norm string, segs []string) bool
}

func nameContains(s string) func(string, []string) bool {
	return func(n string, _ []string) bool { return strings.Contains(n, s) }
}

// credentialNameRules are the names (of env variables, headers, URL query
// parameters, --flags) that hold credentials. Names are matched upper-cased
// with '-' and '.' read as '_'.
var credentialNameRules = []credentialNameRule{
	{"contains SECRET", nameContains("SECRET")},
	{"contains PASSWORD", nameContains("PASSWORD")},
	{"contains PASSWD", nameContains("PASSWD")},
	{"contains PASSPHRASE", nameContains("PASSPHRASE")},
	{"contains CREDENTIAL", nameContains("CREDENTIAL")},
	{"contains API_KEY", nameContains("API_KEY")},
	{"contains APIKEY", nameContains("APIKEY")},
	{"contains PRIVATE_KEY", nameContains("PRIVATE_KEY")},
	{"contains AUTHORIZATION", nameContains("AUTHORIZATION")},
	{"contains COOKIE", nameContains("COOKIE")},
	{"is or ends in _TOKEN", func(_ string, segs []string) bool {
		for _, s := range segs {
			if strings.HasSuffix(s, "TOKEN") || s == "TOKENS" {
				return true
			}
		}
		return false
	}},
	{"is or ends in _KEY", func(_ string, segs []string) bool {
		last := segs[len(segs)-1]
		return last == "KEY" || last == "KEYS"
	}},
	{"has an AUTH or PAT part", func(_ string, segs []string) bool {
		for _, s := range segs {
			if s == "AUTH" || s == "PAT" {
				return true
			}
		}
		return false
	}},
}

// credentialName reports whether name looks like it names a credential,
// and which rule says so.
func credentialName(name string) (string, bool) {
	norm := strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(name))
	segs := strings.FieldsFunc(norm, func(r rune) bool { return r == '_' })
	if len(segs) == 0 {
		return "", false
	}
	for _, r := range credentialNameRules {
		if r.match(norm, segs) {
			return r.rule, true
		}
	}
	return "", false
}

// keyPrefixes are prefixes of well-known API keys and tokens. A value
// matches when it starts with one and at least minKeyTail key characters
// follow.
var keyPrefixes = []string{
	"sk-", "sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_",
	"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "gldt-",
	"xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-", "xapp-",
	"AKIA", "ASIA", "AIza", "ya29.", "hf_", "npm_", "pypi-", "fc-", "shpat_", "shpss_",
	"dop_v1_", "lin_api_", "glsa_", "SG.", "sq0atp-", "sq0csp-", "xai-", "pplx-", "tvly-",
}

const minKeyTail = 16

var (
	authSchemeRE = regexp.MustCompile(`(?i)^\s*(bearer|basic|digest|token|negotiate)\s+\S`)
	jwtRE        = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.`)
	keyCharsRE   = regexp.MustCompile(`^[A-Za-z0-9_\-.=+/~]+$`)
	hexishRE     = regexp.MustCompile(`^[0-9a-fA-F-]+$`)
)

// credentialValue reports whether a literal value looks like a credential,
// and why. The reason never quotes the value.
func credentialValue(v string) (string, bool) {
	switch {
	case authSchemeRE.MatchString(v):
		return "it is an Authorization scheme and credential", true
	case strings.Contains(v, "-----BEGIN"):
		return "it contains a PEM block", true
	case jwtRE.MatchString(v):
		return "it contains a JSON web token", true
	}
	for _, p := range keyPrefixes {
		if tail, ok := strings.CutPrefix(v, p); ok && len(tail) >= minKeyTail && keyCharsRE.MatchString(tail) {
			return "it starts with " + p + ", the prefix of a well-known key", true
		}
	}
	if why, ok := urlCredential(v); ok {
		return why, true
	}
	if highEntropy(v) {
		return "it is a long high-entropy string", true
	}
	return "", false
}

// urlCredential reports a URL that carries a credential: a password in its
// userinfo, or a query parameter with a credential name or value.
func urlCredential(v string) (string, bool) {
	if !strings.Contains(v, "://") {
		return "", false
	}
	u, err := url.Parse(strings.TrimSpace(v))
	if err != nil {
		return "", false
	}
	if _, ok := u.User.Password(); ok {
		return "it is a URL with a password", true
	}
	for name, vals := range u.Query() {
		if rule, ok := credentialName(name); ok {
			return "it is a URL whose query parameter " + quoteName(name) + " " + rule, true
		}
		for _, qv := range vals {
			if _, ok := credentialValue(qv); ok {
				return "it is a URL whose query parameter " + quoteName(name) + " holds a credential", true
			}
		}
	}
	return "", false
}

func quoteName(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// highEntropy reports a long random-looking token: 20 or more key
// characters, not a path, mixing letters and digits, with a Shannon entropy
// of at least 4 bits per character; or 32 or more hex digits (hyphens
// allowed, so UUIDs count).
func highEntropy(v string) bool {
	if len(v) < 20 || strings.HasPrefix(v, "/") || !keyCharsRE.MatchString(v) {
		return false
	}
	var letters, digits int
	for _, r := range v {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
			letters++
		}
	}
	if digits == 0 || letters == 0 {
		return false
	}
	if hexishRE.MatchString(v) && len(strings.ReplaceAll(v, "-", "")) >= 32 {
		return true
	}
	return shannon(v) >= 4.0
}

// shannon is the empirical entropy of s in bits per byte.
func shannon(s string) float64 {
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	var h float64
	n := float64(len(s))
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}

// credentialFlag reports an argument of the form --name=value whose name
// looks like a credential's.
func credentialFlag(arg string) (string, bool) {
	if !strings.HasPrefix(arg, "-") {
		return "", false
	}
	name, _, ok := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	if !ok {
		return "", false
	}
	if rule, ok := credentialName(name); ok {
		return "it sets the option " + quoteName(name) + ", whose name " + rule, true
	}
	return "", false
}

// redactMessage replaces every word of a library message that looks like a
// credential: decoder messages are not ours, and must not carry a value out.
func redactMessage(msg string) string {
	words := strings.Fields(msg)
	for i, w := range words {
		bare := strings.Trim(w, `"'(),:;[]{}`)
		if _, ok := credentialValue(bare); ok {
			words[i] = "[redacted]"
		}
	}
	return strings.Join(words, " ")
}

// redactedValue stands in for a value that looks like a credential.
const redactedValue = "[a value that looks like a credential]"

// quoteValue quotes an operator-written string for a refusal, unless it
// looks like a credential: a value pasted into the wrong field must not be
// printed back.
func quoteValue(s string) string {
	if containsCredential(s) {
		return redactedValue
	}
	return strconv.Quote(s)
}

// containsCredential reports whether s, or one of its parts between
// separators (/ = : , ; ? & and whitespace), looks like a credential.
func containsCredential(s string) bool {
	if _, ok := credentialValue(s); ok {
		return true
	}
	for _, part := range strings.FieldsFunc(s, func(r rune) bool {
		return strings.ContainsRune("/=:,;?& \t\n\"'", r)
	}) {
		if _, ok := credentialValue(part); ok {
			return true
		}
	}
	return false
}
