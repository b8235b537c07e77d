package registry

// Validating one registry entry: the named checks of the list checks,
// each giving every reason it finds.

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/egress/allowlist"
)

var (
	// serverIDRE is the rule for server ids: a lowercase letter, then
	// lowercase letters and digits in groups joined by single underscores
	// (no "__", no trailing "_"), 32 characters at most. So ID__TOOL splits
	// back at its first "__".
	serverIDRE = regexp.MustCompile(`^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$`)
	// downstreamToolRE is the rule for names in enabled_tools: MCP tool
	// name characters, 64 at most.
	downstreamToolRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	// envNameRE is the rule for environment variable names.
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// headerNameRE is an HTTP field name (RFC 9110 token).
	headerNameRE = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
	// bareCommandRE is a command name looked up in SearchPath.
	bareCommandRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)
)

// MaxServerIDLen is the longest server id.
const MaxServerIDLen = 32

// reservedServerIDs are ids no entry may take, and why.
var reservedServerIDs = map[string]string{
	"mmo_mesh": "the runtime-owned agent mesh of seed 002",
	"toolgate": "toolgate's own name",
}

// reservedServerIDPrefixes are id prefixes no entry may take, and why.
var reservedServerIDPrefixes = map[string]string{
	"checkpoint": "served names starting " + conf.ProtectedPrefix + " are toolgate's protected built-ins",
}

// ReservedServerIDs returns the reserved ids and id prefixes (ending in
// "*"), for docs.
func ReservedServerIDs() []string {
	out := sortedKeys(reservedServerIDs)
	for _, p := range sortedKeys(reservedServerIDPrefixes) {
		out = append(out, p+"*")
	}
	return out
}

// managedHeaders are HTTP headers toolgate's MCP client sets itself; an
// entry may not set them.
var managedHeaders = map[string]bool{
	"host": true, "content-length": true, "content-type": true, "accept": true, "connection": true,
	"transfer-encoding": true, "upgrade": true, "te": true, "trailer": true, "keep-alive": true,
	"mcp-session-id": true, "mcp-protocol-version": true, "last-event-id": true,
}

// check is one named validation rule. It returns every reason the
// entry breaks it.
type check func(e *entry) []error

// checks are the rules every entry must pass, in reporting order.
var checks = []check{
	checkServerID,
	checkTransport,
	checkCommand,
	checkArgs,
	checkCwd,
	checkEnv,
	checkEnvVars,
	checkSandboxNetwork,
	checkAllowedHosts,
	checkCredentials,
	checkURL,
	checkBearerTokenEnvVar,
	checkHeaders,
	checkEnabledTools,
	checkApprovalModes,
	checkTimeouts,
}

// validateEntry runs every check and returns all reasons.
func validateEntry(e *entry) []error {
	var errs []error
	for _, c := range checks {
		errs = append(errs, c(e)...)
	}
	return errs
}

// foreign reports whether field belongs to a transport other than the
// entry's (valid) one: checkTransport refuses it, and the field's own
// checks skip it.
func (e *entry) foreign(field string) bool {
	t, ok := e.transport()
	if !ok {
		return false
	}
	for other, spec := range transports {
		if other != t && slices.Contains(spec.fields, field) {
			return true
		}
	}
	return false
}

// transport returns the entry's transport when it is valid.
func (e *entry) transport() (Transport, bool) {
	if e.raw.Transport == nil {
		return "", false
	}
	t, err := ParseTransport(*e.raw.Transport)
	return t, err == nil
}

func checkServerID(e *entry) []error {
	id := e.id
	var err error
	switch {
	case len(id) > MaxServerIDLen || !serverIDRE.MatchString(id):
		err = fmt.Errorf("server id %s: want a lowercase letter, then lowercase letters and digits, words joined by single underscores (no __, no trailing _), %d characters or fewer", quoteValue(id), MaxServerIDLen)
	case reservedServerIDs[id] != "":
		err = fmt.Errorf("server id %q is reserved: %s", id, reservedServerIDs[id])
	default:
		for p, why := range reservedServerIDPrefixes {
			if strings.HasPrefix(id, p) {
				err = fmt.Errorf("server id %q is reserved (prefix %q): %s", id, p, why)
			}
		}
	}
	if err != nil {
		return []error{e.errf(nil, err)}
	}
	return nil
}

func checkTransport(e *entry) []error {
	if e.raw.Transport == nil {
		return []error{e.errf([]string{"transport"}, fmt.Errorf("required: want %s", joinQuoted(KnownTransports())))}
	}
	t, err := ParseTransport(*e.raw.Transport)
	if err != nil {
		return []error{e.errf([]string{"transport"}, err)}
	}
	var errs []error
	spec := transports[t]
	if !e.has(spec.required) {
		errs = append(errs, e.errf([]string{spec.required}, fmt.Errorf("required for transport %q", t)))
	}
	for _, other := range KnownTransports() {
		if other == t {
			continue
		}
		for _, f := range transports[other].fields {
			if e.has(f) {
				errs = append(errs, e.errf([]string{f}, fmt.Errorf("%w: %q belongs to transport %q, and this entry is %q", ErrTransportField, f, other, t)))
			}
		}
	}
	return errs
}

func checkCommand(e *entry) []error {
	if e.foreign("command") {
		return nil
	}
	if e.raw.Command == nil {
		return nil
	}
	c := *e.raw.Command
	var err error
	switch {
	case strings.TrimSpace(c) == "":
		err = errors.New("empty")
	case strings.ContainsAny(c, " \t") && !strings.HasPrefix(c, "/"):
		err = fmt.Errorf("%s contains whitespace: command is one executable, put its arguments in args", quoteValue(c))
	case strings.Contains(c, "/"):
		err = checkPath(c)
	case !bareCommandRE.MatchString(c):
		err = fmt.Errorf("%s: want an absolute path or a bare executable name ([A-Za-z0-9._+-])", quoteValue(c))
	}
	if err != nil {
		return []error{e.errf([]string{"command"}, err)}
	}
	return nil
}

// checkPath applies the lexical rules of absolute paths (command,
// cwd): absolute, clean, no "..", no control character, and none of the
// MCP-owned state of the state denylist.
func checkPath(p string) error {
	switch {
	case !filepath.IsAbs(p):
		return fmt.Errorf("%s is not an absolute path (a relative path would depend on toolgate's working directory)", quoteValue(p))
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Errorf("%s contains a .. component", quoteValue(p))
	case hasControl(p):
		return fmt.Errorf("%s contains a control character", quoteValue(p))
	case filepath.Clean(p) != p:
		return fmt.Errorf("%s is not clean: write %s", quoteValue(p), quoteValue(filepath.Clean(p)))
	}
	if d, bad := conf.DeniedSubstring(p); bad {
		return fmt.Errorf("%s contains %q: %w (MCP-owned build and package state)", quoteValue(p), d, conf.ErrDenied)
	}
	return nil
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

func checkArgs(e *entry) []error {
	if e.foreign("args") {
		return nil
	}
	if e.raw.Args == nil {
		return nil
	}
	var errs []error
	for i, a := range *e.raw.Args {
		at := []string{"args", arrayIndex(i)}
		if strings.ContainsRune(a, 0) {
			errs = append(errs, e.errf(at, errors.New("contains a NUL byte")))
			continue
		}
		if why, ok := credentialFlag(a); ok {
			errs = append(errs, e.errf(at, fmt.Errorf("%w: %s: pass the value in an environment variable named in env_vars, and have the server read it from there", ErrCredential, why)))
			continue
		}
		if why, ok := credentialValue(a); ok {
			errs = append(errs, e.errf(at, fmt.Errorf("%w: the argument looks like one (%s): pass it in an environment variable named in env_vars", ErrCredential, why)))
			continue
		}
		if d, bad := conf.DeniedSubstring(a); bad {
			errs = append(errs, e.errf(at, fmt.Errorf("contains %q: %w (MCP-owned build and package state)", d, conf.ErrDenied)))
		}
	}
	return errs
}

func checkCwd(e *entry) []error {
	if e.foreign("cwd") {
		return nil
	}
	if e.raw.Cwd == nil {
		return nil
	}
	if err := checkPath(*e.raw.Cwd); err != nil {
		return []error{e.errf([]string{"cwd"}, err)}
	}
	return nil
}

func checkEnv(e *entry) []error {
	if e.foreign("env") {
		return nil
	}
	var errs []error
	forwarded := map[string]bool{}
	if e.raw.EnvVars != nil {
		for _, v := range *e.raw.EnvVars {
			forwarded[v] = true
		}
	}
	for _, name := range sortedKeys(e.raw.Env) {
		at := []string{"env", name}
		val := e.raw.Env[name]
		switch {
		case !envNameRE.MatchString(name):
			errs = append(errs, e.errf(at, fmt.Errorf("%s is not a valid variable name: want [A-Za-z_][A-Za-z0-9_]*", quoteValue(name))))
			continue
		case forwarded[name]:
			errs = append(errs, e.errf(at, fmt.Errorf("%q is both set in env and forwarded by env_vars: keep one", name)))
			continue
		case strings.ContainsRune(val, 0):
			errs = append(errs, e.errf(at, errors.New("value contains a NUL byte")))
			continue
		}
		if rule, ok := credentialName(name); ok {
			errs = append(errs, e.errf(at, fmt.Errorf("%w: the name %q %s, so its value is a credential: drop it from env and forward it by name with env_vars = [%q]", ErrCredential, name, rule, name)))
			continue
		}
		if why, ok := credentialValue(val); ok {
			errs = append(errs, e.errf(at, fmt.Errorf("%w: the value of %q looks like one (%s): drop it from env and forward it by name with env_vars = [%q]", ErrCredential, name, why, name)))
		}
	}
	return errs
}

func checkEnvVars(e *entry) []error {
	if e.foreign("env_vars") {
		return nil
	}
	if e.raw.EnvVars == nil {
		return nil
	}
	var errs []error
	seen := map[string]bool{}
	for i, name := range *e.raw.EnvVars {
		at := []string{"env_vars", arrayIndex(i)}
		switch {
		case !envNameRE.MatchString(name):
			errs = append(errs, e.errf(at, fmt.Errorf("%s is not a valid variable name: want [A-Za-z_][A-Za-z0-9_]* (env_vars holds names, never values)", quoteValue(name))))
		case looksLikeValue(name):
			errs = append(errs, e.errf(at, fmt.Errorf("%w: the entry looks like a credential value, not a variable name: env_vars holds names only", ErrCredential)))
		case seen[name]:
			errs = append(errs, e.errf(at, fmt.Errorf("%q listed twice", name)))
		}
		seen[name] = true
	}
	return errs
}

func checkSandboxNetwork(e *entry) []error {
	if e.foreign("network") {
		return nil
	}
	if e.raw.Network != nil && e.raw.Sandbox != nil && !*e.raw.Sandbox {
		return []error{e.errf([]string{"network"}, errors.New("only meaningful with the sandbox on: without it the server has the host's network anyway; remove network, or remove sandbox = false"))}
	}
	return nil
}

// checkAllowedHosts: a stdio server in the sandbox may list destinations;
// beside network = true (the host's whole network) or sandbox = false (no
// sandbox to enforce it in) the list would mean nothing, and is refused.
func checkAllowedHosts(e *entry) []error {
	if e.foreign("allowed_hosts") || e.raw.AllowedHosts == nil {
		return nil
	}
	at := []string{"allowed_hosts"}
	switch {
	case e.raw.Sandbox != nil && !*e.raw.Sandbox:
		return []error{e.errf(at, errors.New("needs the sandbox: with sandbox = false the server has the host's network anyway; remove one of them"))}
	case e.raw.Network != nil && *e.raw.Network:
		return []error{e.errf(at, errors.New("beside network = true, which gives the host's whole network: choose one (allowed_hosts is the narrow one)"))}
	}
	if _, err := allowlist.ParseList(*e.raw.AllowedHosts); err != nil {
		return []error{e.errf(at, err)}
	}
	return nil
}

func checkURL(e *entry) []error {
	if e.foreign("url") {
		return nil
	}
	if e.raw.URL == nil {
		return nil
	}
	raw := *e.raw.URL
	at := []string{"url"}
	u, err := url.Parse(raw)
	if err != nil || hasControl(raw) {
		return []error{e.errf(at, errors.New("not a valid URL"))}
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return []error{e.errf(at, fmt.Errorf("scheme %q: want https (or http)", u.Scheme))}
	case u.Host == "" || u.Hostname() == "":
		return []error{e.errf(at, errors.New("no host"))}
	case u.User != nil:
		return []error{e.errf(at, fmt.Errorf("%w: the URL has user information: name a variable with bearer_token_env_var or env_http_headers instead", ErrCredential))}
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return []error{e.errf(at, errors.New("has a #fragment, which is never sent: remove it"))}
	}
	if why, ok := urlCredential(raw); ok {
		return []error{e.errf(at, fmt.Errorf("%w: %s: name a variable with bearer_token_env_var or env_http_headers instead", ErrCredential, why))}
	}
	sendsCredential := e.raw.BearerTokenEnvVar != nil || len(e.raw.EnvHTTPHeaders) > 0
	if u.Scheme == "http" && sendsCredential && !isLoopback(u.Hostname()) {
		return []error{e.errf(at, fmt.Errorf("http to %q would send the credential in cleartext: use https (plain http is allowed to loopback only)", u.Hostname()))}
	}
	return nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func checkBearerTokenEnvVar(e *entry) []error {
	if e.foreign("bearer_token_env_var") {
		return nil
	}
	if e.raw.BearerTokenEnvVar == nil {
		return nil
	}
	name := *e.raw.BearerTokenEnvVar
	switch {
	case !envNameRE.MatchString(name):
		return []error{e.errf([]string{"bearer_token_env_var"}, errors.New("not a valid variable name: want [A-Za-z_][A-Za-z0-9_]* (bearer_token_env_var holds the variable's name, never the token)"))}
	case looksLikeValue(name):
		return []error{e.errf([]string{"bearer_token_env_var"}, fmt.Errorf("%w: the value looks like a token, not a variable name: bearer_token_env_var holds the variable's name", ErrCredential))}
	}
	return nil
}

func checkHeaders(e *entry) []error {
	if e.foreign("http_headers") {
		return nil
	}
	var errs []error
	seen := map[string]string{} // lower-case name → field that set it
	if e.raw.BearerTokenEnvVar != nil {
		seen["authorization"] = "bearer_token_env_var"
	}
	header := func(field, name string) bool {
		at := []string{field, name}
		lower := strings.ToLower(name)
		switch {
		case !headerNameRE.MatchString(name):
			errs = append(errs, e.errf(at, fmt.Errorf("%s is not a valid HTTP header name", quoteValue(name))))
		case managedHeaders[lower]:
			errs = append(errs, e.errf(at, fmt.Errorf("%q is set by toolgate's MCP client and cannot be configured", name)))
		case seen[lower] != "":
			errs = append(errs, e.errf(at, fmt.Errorf("header %q is already set by %s", name, seen[lower])))
		default:
			seen[lower] = field + "." + tomlKey(name)
			return true
		}
		return false
	}
	for _, name := range sortedKeys(e.raw.HTTPHeaders) {
		if !header("http_headers", name) {
			continue
		}
		at := []string{"http_headers", name}
		val := e.raw.HTTPHeaders[name]
		if hasControl(val) {
			errs = append(errs, e.errf(at, errors.New("value contains a control character")))
			continue
		}
		if rule, ok := credentialName(name); ok {
			errs = append(errs, e.errf(at, fmt.Errorf("%w: the header name %q %s, so its value is a credential: move it to env_http_headers = { %s = \"VARIABLE\" }%s", ErrCredential, name, rule, tomlKey(name), bearerHint(name))))
			continue
		}
		if why, ok := credentialValue(val); ok {
			errs = append(errs, e.errf(at, fmt.Errorf("%w: the value of header %q looks like one (%s): move it to env_http_headers = { %s = \"VARIABLE\" }", ErrCredential, name, why, tomlKey(name))))
		}
	}
	for _, name := range sortedKeys(e.raw.EnvHTTPHeaders) {
		if !header("env_http_headers", name) {
			continue
		}
		at := []string{"env_http_headers", name}
		switch v := e.raw.EnvHTTPHeaders[name]; {
		case !envNameRE.MatchString(v):
			errs = append(errs, e.errf(at, errors.New("not a valid variable name: want [A-Za-z_][A-Za-z0-9_]* (env_http_headers maps a header to a variable's name, never its value)")))
		case looksLikeValue(v):
			errs = append(errs, e.errf(at, fmt.Errorf("%w: the value looks like a credential, not a variable name: env_http_headers maps a header to a variable's name", ErrCredential)))
		}
	}
	return errs
}

// looksLikeValue reports a syntactically valid variable name that looks
// like a credential value (ghp_..., AKIA..., a long random string): a value
// pasted where a name belongs.
func looksLikeValue(name string) bool {
	_, ok := credentialValue(name)
	return ok
}

func bearerHint(header string) string {
	if strings.EqualFold(header, "authorization") {
		return ", or for a bearer token bearer_token_env_var = \"VARIABLE\""
	}
	return ""
}

func checkEnabledTools(e *entry) []error {
	if e.raw.EnabledTools == nil {
		return []error{e.errf([]string{"enabled_tools"}, errors.New("required: list the downstream tools to serve (the operator's maximum); a server with no allowlist serves nothing"))}
	}
	tools := *e.raw.EnabledTools
	if len(tools) == 0 {
		return []error{e.errf([]string{"enabled_tools"}, errors.New("empty: list at least one downstream tool (the operator's maximum)"))}
	}
	var errs []error
	seen := map[string]bool{}
	for i, t := range tools {
		at := []string{"enabled_tools", arrayIndex(i)}
		switch {
		case !downstreamToolRE.MatchString(t):
			errs = append(errs, e.errf(at, fmt.Errorf("%s is not a valid tool name: want [A-Za-z0-9_.-], 64 characters or fewer", quoteValue(t))))
		case seen[t]:
			errs = append(errs, e.errf(at, fmt.Errorf("%q listed twice", t)))
		}
		seen[t] = true
	}
	return errs
}

func checkApprovalModes(e *entry) []error {
	var errs []error
	if e.raw.DefaultToolsApprovalMode == nil {
		errs = append(errs, e.errf([]string{"default_tools_approval_mode"}, fmt.Errorf("required: state it explicitly, one of %s", joinQuoted(KnownApprovalModes()))))
	} else if _, err := ParseApprovalMode(*e.raw.DefaultToolsApprovalMode); err != nil {
		errs = append(errs, e.errf([]string{"default_tools_approval_mode"}, err))
	}
	enabled := map[string]bool{}
	if e.raw.EnabledTools != nil {
		for _, t := range *e.raw.EnabledTools {
			enabled[t] = true
		}
	}
	for _, name := range sortedKeys(e.raw.Tools) {
		o := e.raw.Tools[name]
		if !enabled[name] {
			errs = append(errs, e.errf([]string{"tools", name}, fmt.Errorf("override for %s, which is not in enabled_tools: add it there or remove the override", quoteValue(name))))
			continue
		}
		at := []string{"tools", name, "approval_mode"}
		if o.ApprovalMode == nil {
			errs = append(errs, e.errf(at, fmt.Errorf("required in a per-tool table: one of %s", joinQuoted(KnownApprovalModes()))))
		} else if _, err := ParseApprovalMode(*o.ApprovalMode); err != nil {
			errs = append(errs, e.errf(at, err))
		}
	}
	return errs
}

func checkTimeouts(e *entry) []error {
	var errs []error
	check := func(field string, v *int64, lo, hi int64) {
		if v != nil && (*v < lo || *v > hi) {
			errs = append(errs, e.errf([]string{field}, fmt.Errorf("%d out of range: want %d to %d seconds", *v, lo, hi)))
		}
	}
	check("startup_timeout_sec", e.raw.StartupTimeoutSec, MinStartupTimeoutSec, MaxStartupTimeoutSec)
	check("tool_timeout_sec", e.raw.ToolTimeoutSec, MinToolTimeoutSec, MaxToolTimeoutSec)
	return errs
}
