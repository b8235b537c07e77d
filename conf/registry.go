package conf

// The tool-MCP registry: the operator's list of downstream MCP servers
// (seed 002), read from TOML fragments in a directory. This file holds the
// types and the loader; registry_check.go the validation checks,
// registry_secret.go the credential heuristics, registry_render.go the
// normalised rendering used by `toolgate registry show`.
//
// The pipeline is decode → validate → normalise, per fragment:
//
//   - decodeFragment decodes one file strictly (unknown keys are errors) and
//     records the line of every key it defines;
//   - validateEntry runs the named checks of registryChecks on each server
//     entry and collects every reason;
//   - normaliseEntry fills the defaults and resolves the command, giving a
//     ToolServer.
//
// Then the fragments are merged in lexical filename order: a later fragment
// that defines an id replaces the earlier entry whole. A registry with one
// refused entry anywhere, even one a later fragment replaces, is refused as
// a whole: no server is served, and nothing else in toolgate is affected.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/toolgate/toolgate/egress/allowlist"
)

// DefaultRegistryDir is where the registry fragments are read from unless
// --tool-mcp-dir says otherwise.
const DefaultRegistryDir = "/etc/saphira/mcp/tool-mcp.d"

// RegistrySchemaVersion is the only schema_version a fragment may declare.
// It is seed 002's version: the same field set and the same refusals
// (OAuth, plaintext credentials, transport-incompatible and unknown fields).
const RegistrySchemaVersion = 8

// RegistrySearchPath is the fixed PATH a bare command name is resolved
// through, once, at load. toolgate's own $PATH is never consulted, so a
// relative or writable entry in the caller's environment cannot redirect a
// server's executable. It is the PATH every tool runs with.
const RegistrySearchPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Defaults and bounds of the per-server timeouts, in seconds.
const (
	DefaultStartupTimeoutSec = 10
	MinStartupTimeoutSec     = 1
	MaxStartupTimeoutSec     = 600
	DefaultToolTimeoutSec    = 60
	MinToolTimeoutSec        = 1
	MaxToolTimeoutSec        = 3600
)

// MaxFragmentSize is the largest fragment file accepted (1 MiB).
const MaxFragmentSize = 1 << 20

// ServedNameSeparator joins a server id and a downstream tool name into the
// name toolgate serves: ID__TOOL. Ids contain no "__" and do not end in "_",
// so a served name splits back at its first "__" unambiguously.
const ServedNameSeparator = "__"

// Transport is how toolgate reaches a downstream server.
type Transport string

// The two transports.
const (
	// TransportStdio runs a local executable and speaks MCP on its stdin
	// and stdout.
	TransportStdio Transport = "stdio"
	// TransportStreamableHTTP speaks MCP's streamable HTTP transport to a
	// URL.
	TransportStreamableHTTP Transport = "streamable_http"
)

// transportSpec is what a transport requires and allows beyond the fields
// both transports share.
type transportSpec struct {
	required string   // the field that must be present
	fields   []string // every field that belongs to this transport only
}

// transports is the closed set of transports and their fields. A field of
// one transport in an entry of the other is refused with ErrTransportField.
var transports = map[Transport]transportSpec{
	TransportStdio: {
		required: "command",
		fields:   []string{"command", "args", "cwd", "env", "env_vars", "sandbox", "network", "allowed_hosts", "egress_credentials"},
	},
	TransportStreamableHTTP: {
		required: "url",
		fields:   []string{"url", "bearer_token_env_var", "http_headers", "env_http_headers"},
	},
}

// KnownTransports returns the transports, for --help and docs.
func KnownTransports() []Transport {
	return []Transport{TransportStdio, TransportStreamableHTTP}
}

// ParseTransport returns the transport named s, or an error naming the
// allowed values.
func ParseTransport(s string) (Transport, error) {
	if _, ok := transports[Transport(s)]; ok {
		return Transport(s), nil
	}
	return "", fmt.Errorf("unknown transport %s: want %s", quoteValue(s), joinQuoted(KnownTransports()))
}

// ApprovalMode is the operator's policy for confirming calls of a
// downstream tool. toolgate passes it to its MCP client as tool annotations
// (phase 2); the modes are ordered from least to most confirmation.
type ApprovalMode string

// The four approval modes of seed 002.
const (
	// ApprovalAuto: calls run without asking.
	ApprovalAuto ApprovalMode = "auto"
	// ApprovalWrites: calls of tools that the server does not declare
	// read-only need confirmation; read-only tools run without asking.
	ApprovalWrites ApprovalMode = "writes"
	// ApprovalPrompt: every call needs confirmation.
	ApprovalPrompt ApprovalMode = "prompt"
	// ApprovalApprove: every call needs explicit approval, and the tool is
	// marked destructive, so a client that remembers "always allow" per
	// tool should not apply it.
	ApprovalApprove ApprovalMode = "approve"
)

// approvalModes describes each approval mode, for docs and `registry show`.
var approvalModes = map[ApprovalMode]string{
	ApprovalAuto:    "calls run without asking",
	ApprovalWrites:  "calls of tools not declared read-only need confirmation",
	ApprovalPrompt:  "every call needs confirmation",
	ApprovalApprove: "every call needs explicit approval; the tool is marked destructive",
}

// KnownApprovalModes returns the approval modes from least to most
// confirmation, for --help and docs.
func KnownApprovalModes() []ApprovalMode {
	return []ApprovalMode{ApprovalAuto, ApprovalWrites, ApprovalPrompt, ApprovalApprove}
}

// ParseApprovalMode returns the approval mode named s, or an error naming
// the allowed values.
func ParseApprovalMode(s string) (ApprovalMode, error) {
	if _, ok := approvalModes[ApprovalMode(s)]; ok {
		return ApprovalMode(s), nil
	}
	return "", fmt.Errorf("unknown approval mode %s: want %s", quoteValue(s), joinQuoted(KnownApprovalModes()))
}

// Describe says what the mode means.
func (m ApprovalMode) Describe() string { return approvalModes[m] }

func joinQuoted[T ~string](vs []T) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = strconv.Quote(string(v))
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// ToolServer is one validated, normalised registry entry: everything phase
// 2 needs to launch or connect to the server, with every default filled in.
// It holds variable names, never credential values. It is immutable after
// LoadRegistry.
type ToolServer struct {
	// ID is the server id: the prefix of every tool it serves (ID__TOOL).
	ID string
	// Transport is stdio or streamable_http.
	Transport Transport

	// CommandAsWritten is the stdio command as the fragment wrote it: an
	// absolute path or a bare name.
	CommandAsWritten string
	// Command is the absolute path to execve: CommandAsWritten when it is
	// absolute, else the first match in RegistrySearchPath.
	Command string
	// CommandResolved is Command with every symlink resolved: what a
	// sandbox must make visible.
	CommandResolved string
	// Args are the fixed arguments after the command.
	Args []string
	// Cwd is the absolute working directory, or "" when the fragment sets
	// none.
	Cwd string
	// Env are literal, non-secret variables set for the server.
	Env map[string]string
	// EnvVars are names of variables forwarded from toolgate's own
	// environment, in fragment order.
	EnvVars []string
	// Sandbox is true unless the fragment says sandbox = false.
	Sandbox bool
	// Network is true only when the fragment says network = true (and the
	// sandbox is on).
	Network bool
	// ReadOnly are the canonical host paths a sandbox binds read-only for
	// the server beside its cwd: every argument that is an absolute path
	// of something that exists (the server's installation, a data
	// directory), resolved at load, each one the sandbox policy lets be
	// bound (bundle.CheckBind).
	ReadOnly []string
	// AllowedHosts is the server's network allowlist (allowed_hosts): its
	// sandboxed process reaches these destinations through toolgate's
	// egress proxy, and nothing else. Nil for none; never beside Network.
	AllowedHosts allowlist.List
	// Credentials are headers the proxy sets on the server's requests to
	// destinations of AllowedHosts (egress_credentials): the server holds no key.
	Credentials []Credential

	// URL is the streamable HTTP endpoint.
	URL string
	// BearerTokenEnvVar names the variable whose value is sent as
	// "Authorization: Bearer <value>", or "".
	BearerTokenEnvVar string
	// Headers are literal, non-secret HTTP headers.
	Headers map[string]string
	// EnvHeaders maps an HTTP header to the variable its value is read from.
	EnvHeaders map[string]string

	// EnabledTools are the downstream tools the operator allows, in
	// fragment order: the maximum ever served.
	EnabledTools []string
	// DefaultApproval is the approval mode of every enabled tool without
	// an override.
	DefaultApproval ApprovalMode
	// ToolApproval are the per-tool overrides; every key is in
	// EnabledTools.
	ToolApproval map[string]ApprovalMode
	// StartupTimeout bounds starting (stdio) or connecting to (HTTP) the
	// server and its initialize handshake.
	StartupTimeout time.Duration
	// ToolTimeout bounds each call.
	ToolTimeout time.Duration
	// SupportsParallelToolCalls says the server may be sent concurrent
	// calls; otherwise calls to it are serialised.
	SupportsParallelToolCalls bool
	// Pinned (pinned = true) serves an enabled tool only when it has a
	// pin in the registry's pins file; without it a tool with no pin is
	// served with a warning. A pinned tool is served only while its
	// definition matches its pin, either way.
	Pinned bool

	// Fragment is the file that defines the entry.
	Fragment string
	// Line is the line of the entry's [tool_mcp_servers.ID] header (or of
	// its first key) in Fragment.
	Line int
	// Replaces are the earlier fragments whose definitions of ID this one
	// replaced, in load order.
	Replaces []string
}

// SandboxState says how the server runs, as registry list, checkpoint_status
// and the served tools' descriptions show it: "-" (an HTTP server), "off",
// "on, network" (the host's), "on, network: only HOST:PORT, ..." (its
// allowed_hosts, through toolgate's egress proxy) or "on, no network".
func (s ToolServer) SandboxState() string {
	switch {
	case s.Transport != TransportStdio:
		return "-"
	case !s.Sandbox:
		return "off"
	case s.Network:
		return "on, network"
	case len(s.AllowedHosts) > 0:
		return "on, network: only " + strings.Join(s.AllowedHosts.Strings(), ", ")
	}
	return "on, no network"
}

// RequiresPin reports whether an enabled tool of s is served only with a
// pin: the entry says pinned = true, or serve runs with --require-pins
// (requireAll).
func (s ToolServer) RequiresPin(requireAll bool) bool { return s.Pinned || requireAll }

// UnpinnedPolicy says what serve does with an enabled tool of s that has
// no pin.
func (s ToolServer) UnpinnedPolicy(requireAll bool) string {
	switch {
	case s.Pinned:
		return "pinned = true: not served"
	case requireAll:
		return "--require-pins: not served"
	}
	return "served with a warning; not served with pinned = true or serve --require-pins"
}

// Enabled reports whether the operator allows tool.
func (s ToolServer) Enabled(tool string) bool {
	return slices.Contains(s.EnabledTools, tool)
}

// Approval returns the approval mode of an enabled tool: its override, else
// the server's default.
func (s ToolServer) Approval(tool string) ApprovalMode {
	if m, ok := s.ToolApproval[tool]; ok {
		return m
	}
	return s.DefaultApproval
}

// ServedName is the name toolgate serves tool under: ID__TOOL.
func (s ToolServer) ServedName(tool string) string {
	return s.ID + ServedNameSeparator + tool
}

// What the documented clients make of a served tool name (measured with
// Codex 0.169.0, Claude Code 2.1.328 and OpenCode 1.18.33,
// docs/clients.md): Claude Code and Codex show it to the model as
// mcp__KEY__NAME, OpenCode as KEY_NAME, KEY being the entry's server key
// ("toolgate" in every documented entry), and the model APIs behind them
// (OpenAI, Anthropic) accept a tool name only when it matches
// ^[a-zA-Z0-9_-]{1,64}$: a longer one fails the whole request, every turn
// of the session, not just that tool's calls.
const (
	// ClientPrefix is the longest prefix a documented client adds.
	ClientPrefix = "mcp__toolgate__"
	// ClientNameMax is the longest tool name the model APIs accept.
	ClientNameMax = 64
)

// ClientNameIssue says what a documented client would make of served, the
// name of a downstream tool (tools.conf and built-in names are short
// enough by their own rules): refused when the prefixed name is longer than
// ClientNameMax (such a tool is not served: it would break every request of
// a session), or rewritten, served but renamed for the model, when it has
// characters outside [A-Za-z0-9_-] (the clients turn each into '_').
// problem is "" when the name reaches a model as it is.
func ClientNameIssue(served string) (problem string, refused bool) {
	if n := len(ClientPrefix) + len(served); n > ClientNameMax {
		return fmt.Sprintf("served name %q (%d characters) is %s%s, %d characters, in Claude Code and Codex: over the %d that the OpenAI and Anthropic APIs accept for a tool name, which would fail every request of the session; not served: shorten the server id (tool names cannot change)",
			served, len(served), ClientPrefix, served, n, ClientNameMax), true
	}
	if i := strings.IndexFunc(served, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}); i >= 0 {
		return fmt.Sprintf("served name %q has %q, which the model APIs do not accept in a tool name: Claude Code, Codex and OpenCode show it to the model with '_' in its place", served, served[i]), false
	}
	return "", false
}

// SplitServedName splits a served name back into server id and tool name.
// ok is false when name is not of the form ID__TOOL.
func SplitServedName(name string) (id, tool string, ok bool) {
	id, tool, ok = strings.Cut(name, ServedNameSeparator)
	if !ok || id == "" || tool == "" {
		return "", "", false
	}
	return id, tool, true
}

// VarRef is one environment variable a server references, and where.
type VarRef struct {
	// Name is the variable's name.
	Name string
	// Use is the field that references it: "env_vars",
	// "bearer_token_env_var" or "env_http_headers.HEADER".
	Use string
}

// Vars returns every variable the server references, in a stable order:
// env_vars in fragment order, then bearer_token_env_var, then
// env_http_headers by header name.
func (s ToolServer) Vars() []VarRef {
	var out []VarRef
	for _, v := range s.EnvVars {
		out = append(out, VarRef{Name: v, Use: "env_vars"})
	}
	if s.BearerTokenEnvVar != "" {
		out = append(out, VarRef{Name: s.BearerTokenEnvVar, Use: "bearer_token_env_var"})
	}
	for _, h := range sortedKeys(s.EnvHeaders) {
		out = append(out, VarRef{Name: s.EnvHeaders[h], Use: "env_http_headers." + tomlKey(h)})
	}
	return out
}

// Registry is the result of loading the registry directory. Servers is
// empty unless State is StateLoaded: a registry is never half-loaded.
type Registry struct {
	// Dir is the directory that was (or would have been) read.
	Dir string
	// State is absent (no directory: no downstream servers), loaded or
	// refused (every downstream server disabled).
	State State
	// Reason says why the state is absent.
	Reason string
	// Fragments are the *.toml files read, in load (lexical) order.
	Fragments []string
	// Servers are the servers after merging, in id order.
	Servers []ToolServer
	// Errors are the refusals, each a *RegistryError, in fragment and line
	// order. Non-empty exactly when State is StateRefused.
	Errors []error
	// Pins are the approved tool definitions of PinsFile in Dir; nil when
	// there is no such file (every tool unpinned). A pins file that is
	// refused refuses the registry.
	Pins *Pins
}

// Err returns every refusal joined, or nil.
func (r *Registry) Err() error {
	return errors.Join(r.Errors...)
}

// Server returns the server with this id.
func (r *Registry) Server(id string) (ToolServer, bool) {
	for _, s := range r.Servers {
		if s.ID == id {
			return s, true
		}
	}
	return ToolServer{}, false
}

// RegistryError is one refusal: a fragment (or the directory), the line
// when the TOML decoder or the key's position gives one, the key path
// (tool_mcp_servers.firecrawl.bearer_token), and the reason. It never holds
// a credential value: reasons name keys and variables only.
type RegistryError struct {
	// File is the fragment, or the directory for a refusal of the whole
	// directory.
	File string
	// Line is 1-based; 0 when unknown or when the whole file is refused.
	Line int
	// Path is the TOML key path, or "" for the whole file.
	Path string
	// Err is the reason.
	Err error
}

func (e *RegistryError) Error() string { return positioned(e.File, e.Line, e.Path, e.Err) }

func (e *RegistryError) Unwrap() error { return e.Err }

// Sentinels of the registry refusals a caller (or a test) branches on.
var (
	// ErrCredential marks a credential written into a fragment: a
	// plaintext token field, or a literal env, header, argument or URL
	// part that looks like one.
	ErrCredential = errors.New("plaintext credential")
	// ErrOAuth marks an OAuth field: schema 8 takes credentials by
	// environment variable name only.
	ErrOAuth = errors.New("oauth is not supported")
	// ErrUnknownField marks a key the schema does not define.
	ErrUnknownField = errors.New("unknown field")
	// ErrTransportField marks a field of the other transport.
	ErrTransportField = errors.New("field of another transport")
)

// RegistryOptions are what LoadRegistry needs beyond the directory.
type RegistryOptions struct {
	// SearchPath are the directories a bare command name is looked up in,
	// in order. Empty means RegistrySearchPath. Entries that are not
	// absolute are skipped: a relative entry is never searched.
	SearchPath []string
	// Taken are the tool names served before the registry's (built-ins
	// and tools.conf tools), each with what it is, for the message: a
	// served name (ID__TOOL of an enabled tool) equal to one refuses the
	// registry. TakenNames builds it.
	Taken map[string]string
	// Visible reports whether a canonical host path is one every sandbox
	// sees (Options.Visible): a credential's secret file there is refused.
	Visible func(path string) bool
	// Conf is the loaded tools.conf served beside the registry, if any:
	// no secret file of either may lie where a sandbox of the other binds
	// (a non-root toolgate's sandboxes run as its uid, which owns them).
	Conf *Config
}

// TakenNames is RegistryOptions.Taken for the built-ins named and the
// tools of c (when it is loaded: a refused conf serves none).
func TakenNames(builtins []string, c *Config) map[string]string {
	taken := map[string]string{}
	for _, b := range builtins {
		taken[b] = "the built-in tool"
	}
	if c != nil && c.State == StateLoaded {
		for _, t := range c.Tools {
			taken[t.Name] = fmt.Sprintf("the tools.conf tool at %s line %d", c.Path, t.Line)
		}
	}
	return taken
}

func (o RegistryOptions) searchPath() []string {
	dirs := o.SearchPath
	if len(dirs) == 0 {
		dirs = filepath.SplitList(RegistrySearchPath)
	}
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		if filepath.IsAbs(d) {
			out = append(out, filepath.Clean(d))
		}
	}
	return out
}

// LoadRegistry reads every *.toml fragment of dir in lexical filename order
// (names starting with "." are skipped, as are subdirectories), validates
// each entry, and merges them. It never returns a half-loaded Registry:
// either every fragment is accepted (StateLoaded), or the Registry is
// refused and carries no servers, or dir does not exist (StateAbsent, no
// downstream servers).
func LoadRegistry(dir string, opts RegistryOptions) *Registry {
	r := &Registry{Dir: dir}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.State = StateAbsent
		r.Reason = "no directory at " + dir
		return r
	case err != nil:
		r.State = StateAbsent
		r.Reason = "unreadable: " + unwrapPathErr(err).Error()
		return r
	}
	dirErr := func(format string, a ...any) *Registry {
		r.refuse([]error{&RegistryError{File: dir, Err: fmt.Errorf(format, a...)}})
		return r
	}
	if !fi.IsDir() {
		return dirErr("not a directory (mode %s)", fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		if err := ReadOnlyDir(dir, fi); err != nil {
			return dirErr("group- or world-writable (mode %04o): anyone who can add a fragment can run a server as toolgate; chmod go-w %s (not a read-only mount toolgate can trust: %v)", perm, dir, err)
		}
	}
	if checked, err := checkTrusted(dir, os.Geteuid()); err != nil {
		return dirErr("%w", err)
	} else if err := checkSame(dir, fi, checked); err != nil {
		return dirErr("%w", err)
	}
	ents, err := os.ReadDir(dir) // sorted by filename
	if err != nil {
		return dirErr("unreadable: %v", unwrapPathErr(err))
	}
	var (
		errs    []error
		entries []*registryEntry
	)
	for _, de := range ents {
		name := de.Name()
		if !strings.HasSuffix(name, ".toml") || strings.HasPrefix(name, ".") || de.IsDir() {
			continue
		}
		path := filepath.Join(dir, name)
		r.Fragments = append(r.Fragments, path)
		data, err := readFragment(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		es, ferrs := parseFragment(path, data, opts)
		errs = append(errs, ferrs...)
		entries = append(entries, es...)
	}
	if len(errs) > 0 {
		r.refuse(errs)
		return r
	}
	servers := mergeEntries(entries)
	if errs := Collisions(servers, opts.Taken); len(errs) > 0 {
		r.refuse(errs)
		return r
	}
	if errs := secretsBound(servers, opts.Conf); len(errs) > 0 {
		r.refuse(errs)
		return r
	}
	pins, errs := loadPins(dir)
	if len(errs) > 0 {
		r.refuse(errs)
		return r
	}
	r.State = StateLoaded
	r.Servers = servers
	r.Pins = pins
	return r
}

// Collisions returns an error for every served name (ID__TOOL of an
// enabled tool) that taken has (a tools.conf name may contain "__"). The
// check uses enabled_tools, not what servers offer, so that the outcome
// does not depend on a server; LoadRegistry applies it (so registry
// validate sees what serve does), and the server applies it again to what
// it serves.
func Collisions(servers []ToolServer, taken map[string]string) []error {
	var errs []error
	for _, srv := range servers {
		for _, tool := range srv.EnabledTools {
			name := srv.ServedName(tool)
			if what, ok := taken[name]; ok {
				errs = append(errs, &RegistryError{
					File: srv.Fragment, Line: srv.Line,
					Path: "tool_mcp_servers." + srv.ID + ".enabled_tools",
					Err: fmt.Errorf("served name %q collides with %s of the same name: rename the tools.conf tool or remove %q from enabled_tools",
						name, what, tool),
				})
			}
		}
	}
	return errs
}

// ParseFragment validates the bytes of one fragment named path: it is
// LoadRegistry for a single file without the file checks, for tests and
// fuzzing. It still stats the command and resolves it.
func ParseFragment(path string, data []byte, opts RegistryOptions) ([]ToolServer, error) {
	es, errs := parseFragment(path, data, opts)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return mergeEntries(es), nil
}

// readFragment reads one fragment, refusing what is not a regular file, a
// file others can write, and an oversized file.
func readFragment(path string) ([]byte, error) {
	return readTrusted(path, MaxFragmentSize, "run a server as toolgate")
}

// readTrusted reads a file of the registry (a fragment, the pins file) of
// at most limit bytes, refusing what is not a regular file, a file others
// can write or that is on a path others could change (checkTrusted), and
// a larger file. risk says what whoever could write it could do.
func readTrusted(path string, limit int, risk string) ([]byte, error) {
	fileErr := func(format string, a ...any) error {
		return &RegistryError{File: path, Err: fmt.Errorf(format, a...)}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fileErr("unreadable: %v", unwrapPathErr(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileErr("unreadable: %v", unwrapPathErr(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, fileErr("not a regular file (mode %s)", fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return nil, fileErr("group- or world-writable (mode %04o): anyone who can write it can %s; chmod go-w %s", perm, risk, path)
	}
	if checked, err := checkTrusted(path, os.Geteuid()); err != nil {
		return nil, &RegistryError{File: path, Err: err}
	} else if err := checkSame(path, fi, checked); err != nil {
		return nil, &RegistryError{File: path, Err: err}
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fileErr("unreadable: %v", err)
	}
	if len(data) > limit {
		return nil, fileErr("larger than %d bytes", limit)
	}
	return data, nil
}

// parseFragment runs decode → validate → normalise on one fragment.
func parseFragment(path string, data []byte, opts RegistryOptions) ([]*registryEntry, []error) {
	frag, errs := decodeFragment(path, data)
	if frag == nil {
		return nil, errs
	}
	var entries []*registryEntry
	for _, id := range sortedKeys(frag.doc.Servers) {
		e := &registryEntry{id: id, frag: frag, raw: frag.doc.Servers[id]}
		verrs := validateEntry(e)
		if len(verrs) == 0 {
			verrs = normaliseEntry(e, opts)
		}
		errs = append(errs, verrs...)
		entries = append(entries, e)
	}
	sortRegistryErrors(errs)
	return entries, errs
}

// mergeEntries applies the fragments in order: a later definition of an id
// replaces the earlier one whole. The result is in id order.
func mergeEntries(entries []*registryEntry) []ToolServer {
	byID := map[string]ToolServer{}
	for _, e := range entries {
		s := e.server
		if prev, ok := byID[s.ID]; ok {
			s.Replaces = append(slices.Clone(prev.Replaces), prev.Fragment)
		}
		byID[s.ID] = s
	}
	out := make([]ToolServer, 0, len(byID))
	for _, id := range sortedKeys(byID) {
		out = append(out, byID[id])
	}
	return out
}

// refuse turns r into a refused Registry carrying errs and nothing else.
func (r *Registry) refuse(errs []error) {
	r.State = StateRefused
	r.Servers = nil
	r.Pins = nil
	r.Errors = errs
}

// --- decode ---------------------------------------------------------------

// fragmentDoc is the strict shape of a fragment. Every field is a pointer
// (or a nil-able map or slice) so that "absent" and "zero" differ.
type fragmentDoc struct {
	SchemaVersion *int64               `toml:"schema_version"`
	Servers       map[string]rawServer `toml:"tool_mcp_servers"`
}

// rawServer is one [tool_mcp_servers.ID] table as written.
type rawServer struct {
	Transport *string `toml:"transport"`

	Command *string           `toml:"command"`
	Args    *[]string         `toml:"args"`
	Cwd     *string           `toml:"cwd"`
	Env     map[string]string `toml:"env"`
	EnvVars *[]string         `toml:"env_vars"`
	Sandbox *bool             `toml:"sandbox"`
	Network *bool             `toml:"network"`
	// AllowedHosts: allowed_hosts.
	AllowedHosts *[]string `toml:"allowed_hosts"`
	// Credentials: egress_credentials, by destination.
	Credentials map[string]rawCredential `toml:"egress_credentials"`

	URL               *string           `toml:"url"`
	BearerTokenEnvVar *string           `toml:"bearer_token_env_var"`
	HTTPHeaders       map[string]string `toml:"http_headers"`
	EnvHTTPHeaders    map[string]string `toml:"env_http_headers"`

	EnabledTools              *[]string              `toml:"enabled_tools"`
	DefaultToolsApprovalMode  *string                `toml:"default_tools_approval_mode"`
	StartupTimeoutSec         *int64                 `toml:"startup_timeout_sec"`
	ToolTimeoutSec            *int64                 `toml:"tool_timeout_sec"`
	SupportsParallelToolCalls *bool                  `toml:"supports_parallel_tool_calls"`
	Pinned                    *bool                  `toml:"pinned"`
	Tools                     map[string]rawOverride `toml:"tools"`
}

// rawCredential is one [tool_mcp_servers.ID.egress_credentials."HOST:PORT"] table.
type rawCredential struct {
	Header     *string `toml:"header"`
	SecretFile *string `toml:"secret_file"`
}

// rawOverride is one [tool_mcp_servers.ID.tools.NAME] table.
type rawOverride struct {
	ApprovalMode *string `toml:"approval_mode"`
}

// serverFields are the keys of a server table, for the unknown-field
// message. Keep in step with rawServer.
var serverFields = []string{
	"transport", "command", "args", "cwd", "env", "env_vars", "sandbox", "network", "allowed_hosts", "egress_credentials",
	"url", "bearer_token_env_var", "http_headers", "env_http_headers",
	"enabled_tools", "default_tools_approval_mode", "startup_timeout_sec", "tool_timeout_sec",
	"supports_parallel_tool_calls", "pinned", "tools",
}

// fragment is one decoded file.
type fragment struct {
	path  string
	doc   fragmentDoc
	lines map[string]int // key path → line of its first definition
}

// registryEntry carries one server entry through validate and normalise.
type registryEntry struct {
	id     string
	frag   *fragment
	raw    rawServer
	server ToolServer // set by normaliseEntry
}

// path returns the key path of a field of the entry.
func (e *registryEntry) path(parts ...string) string {
	return keyPath(append([]string{"tool_mcp_servers", e.id}, parts...)...)
}

// has reports whether the fragment defines the field.
func (e *registryEntry) has(field string) bool {
	_, ok := e.frag.lines[e.path(field)]
	return ok
}

// errf builds the refusal of a field of the entry. parts name the key below
// the entry; an element "[i]" indexes the previous key's array.
func (e *registryEntry) errf(parts []string, err error) error {
	p := e.path(parts...)
	return &RegistryError{File: e.frag.path, Line: e.frag.line(p), Path: p, Err: err}
}

// line returns the line of the key path p, or of its nearest defined
// ancestor; array indexes are stripped.
func (f *fragment) line(p string) int {
	for p != "" {
		if i := strings.LastIndexByte(p, '['); i > 0 && strings.HasSuffix(p, "]") {
			p = p[:i]
			continue
		}
		if n, ok := f.lines[p]; ok {
			return n
		}
		i := lastDot(p)
		if i < 0 {
			return 0
		}
		p = p[:i]
	}
	return 0
}

// lastDot finds the last '.' of a key path that is not inside quotes.
func lastDot(p string) int {
	in, last := false, -1
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if in {
				i++
			}
		case '"':
			in = !in
		case '.':
			if !in {
				last = i
			}
		}
	}
	return last
}

// decodeFragment decodes one file strictly. It returns nil when the file
// cannot be decoded at all (a syntax or type error: the first one is
// reported, with its line), else the fragment and the refusals of keys the
// schema does not define, classified (plaintext credential, OAuth, unknown).
func decodeFragment(path string, data []byte) (*fragment, []error) {
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	f := &fragment{path: path}
	err := dec.Decode(&f.doc)
	var (
		strict *toml.StrictMissingError
		derr   *toml.DecodeError
		errs   []error
	)
	switch {
	case err == nil:
	case errors.As(err, &strict):
		seen := map[string]bool{}
		for i := range strict.Errors {
			de := &strict.Errors[i]
			line, _ := de.Position()
			parts := []string(de.Key())
			if len(parts) == 0 {
				parts = []string{"?"}
			}
			if parts[0] != "schema_version" && parts[0] != "tool_mcp_servers" {
				parts = parts[:1] // report an unknown table once, at its top
			}
			if p := keyPath(parts...); !seen[p] {
				seen[p] = true
				errs = append(errs, &RegistryError{File: path, Line: line, Path: p, Err: unknownFieldReason(parts)})
			}
		}
	case errors.As(err, &derr):
		line, _ := derr.Position()
		return nil, []error{&RegistryError{File: path, Line: line, Path: keyPath(derr.Key()...), Err: decodeReason(derr)}}
	default:
		return nil, []error{&RegistryError{File: path, Err: fmt.Errorf("decode: %s", redactMessage(err.Error()))}}
	}
	f.lines = keyLines(data)
	if f.doc.SchemaVersion == nil {
		errs = append(errs, &RegistryError{
			File: path, Path: "schema_version",
			Err: fmt.Errorf("required: write schema_version = %d at the top of the fragment", RegistrySchemaVersion),
		})
	} else if v := *f.doc.SchemaVersion; v != RegistrySchemaVersion {
		errs = append(errs, &RegistryError{
			File: path, Line: f.lines["schema_version"], Path: "schema_version",
			Err: fmt.Errorf("%d is not supported: want %d", v, RegistrySchemaVersion),
		})
	}
	return f, errs
}

// decodeReason rewrites a decoder error without the decoder's Go type names
// and without any text that could be a value.
func decodeReason(de *toml.DecodeError) error {
	msg := strings.TrimPrefix(de.Error(), "toml: ")
	key := []string(de.Key())
	switch {
	case strings.HasPrefix(msg, "cannot decode TOML "):
		got, _, _ := strings.Cut(strings.TrimPrefix(msg, "cannot decode TOML "), " ")
		return fmt.Errorf("wrong type: a TOML %s, want %s", got, wantType(key))
	case strings.HasPrefix(msg, "table ") && strings.HasSuffix(msg, " already exists") &&
		len(key) == 2 && key[0] == "tool_mcp_servers":
		return fmt.Errorf("server id %s is defined twice in this fragment: define each id once per fragment (a later fragment replaces an entry whole)", quoteValue(key[1]))
	}
	return fmt.Errorf("invalid TOML: %s", redactMessage(msg))
}

// wantType names the type the schema wants at key, for type errors.
func wantType(key []string) string {
	if len(key) == 0 {
		return "a table"
	}
	last := key[len(key)-1]
	switch {
	case len(key) == 1 && last == "schema_version":
		return "an integer"
	case len(key) == 1 && last == "tool_mcp_servers":
		return "a table of server tables"
	case len(key) == 2:
		return "a server table"
	case len(key) >= 4 && key[2] == "tools":
		if len(key) == 4 {
			return "a table with approval_mode"
		}
		return "a string"
	case len(key) >= 4 && slices.Contains([]string{"env", "http_headers", "env_http_headers"}, key[2]):
		return "a string"
	}
	switch last {
	case "args", "env_vars", "enabled_tools":
		return "an array of strings"
	case "env", "http_headers", "env_http_headers":
		return "a table of strings"
	case "sandbox", "network", "supports_parallel_tool_calls", "pinned":
		return "a boolean"
	case "startup_timeout_sec", "tool_timeout_sec":
		return "an integer"
	case "tools":
		return "a table of tool tables"
	}
	return "a string"
}

// unknownFieldReason classifies a key the schema does not define.
func unknownFieldReason(key []string) error {
	last := key[len(key)-1]
	switch {
	case len(key) == 1:
		return fmt.Errorf("%w %s: a fragment has only schema_version and [tool_mcp_servers.ID] tables", ErrUnknownField, quoteValue(last))
	case len(key) == 3 && isPlaintextCredentialField(last):
		return fmt.Errorf("%w in field %s: never write a credential into the registry; put it in an environment variable and name the variable with bearer_token_env_var or env_http_headers (streamable_http) or env_vars (stdio)", ErrCredential, quoteValue(last))
	case len(key) == 3 && isOAuthField(last):
		return fmt.Errorf("%w (field %s): schema %d takes credentials by environment variable name only (bearer_token_env_var, env_http_headers, env_vars), or, for a sandboxed stdio server, as egress_credentials the proxy sets", ErrOAuth, quoteValue(last), RegistrySchemaVersion)
	case len(key) == 3:
		return fmt.Errorf("%w %s: want one of %s", ErrUnknownField, quoteValue(last), strings.Join(serverFields, ", "))
	case len(key) == 5 && key[2] == "tools":
		return fmt.Errorf("%w %s: a per-tool table has only approval_mode", ErrUnknownField, quoteValue(last))
	}
	return fmt.Errorf("%w %s", ErrUnknownField, quoteValue(last))
}

// keyLines walks the document and returns the line of the first definition
// of every key path, including the tables a dotted key or a header defines
// implicitly. The document has already decoded, so it parses.
func keyLines(data []byte) map[string]int {
	lines := map[string]int{}
	var p unstable.Parser
	p.Reset(data)
	record := func(parts []string, line int) {
		for i := 1; i <= len(parts); i++ {
			k := keyPath(parts[:i]...)
			if _, ok := lines[k]; !ok {
				lines[k] = line
			}
		}
	}
	keyOf := func(n *unstable.Node) ([]string, int) {
		var parts []string
		line := 0
		it := n.Key()
		for it.Next() {
			k := it.Node()
			if line == 0 {
				line = p.Shape(k.Raw).Start.Line
			}
			parts = append(parts, string(k.Data))
		}
		return parts, line
	}
	var walkKV func(prefix []string, n *unstable.Node)
	walkKV = func(prefix []string, n *unstable.Node) {
		k, line := keyOf(n)
		full := append(slices.Clone(prefix), k...)
		record(full, line)
		if v := n.Value(); v.Kind == unstable.InlineTable {
			it := v.Children()
			for it.Next() {
				if c := it.Node(); c.Kind == unstable.KeyValue {
					walkKV(full, c)
				}
			}
		}
	}
	var table []string
	for p.NextExpression() {
		n := p.Expression()
		switch n.Kind {
		case unstable.Table, unstable.ArrayTable:
			var line int
			table, line = keyOf(n)
			record(table, line)
		case unstable.KeyValue:
			walkKV(table, n)
		}
	}
	return lines
}

// keyPath renders key parts as a TOML dotted key, quoting parts that are
// not bare keys. A part "[i]" is appended as an array index.
func keyPath(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if strings.HasPrefix(p, "[") && i > 0 {
			b.WriteString(p)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tomlKey(p))
	}
	return b.String()
}

// tomlKey quotes a key part unless it is a bare key.
func tomlKey(k string) string {
	if k == "" {
		return `""`
	}
	if _, ok := credentialValue(k); ok {
		return `"[redacted]"`
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return strconv.Quote(k)
		}
	}
	return k
}

func arrayIndex(i int) string { return "[" + strconv.Itoa(i) + "]" }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// sortRegistryErrors orders refusals by file, then line.
func sortRegistryErrors(errs []error) {
	slices.SortStableFunc(errs, func(a, b error) int {
		var ea, eb *RegistryError
		if !errors.As(a, &ea) || !errors.As(b, &eb) {
			return 0
		}
		if c := strings.Compare(ea.File, eb.File); c != 0 {
			return c
		}
		return ea.Line - eb.Line
	})
}
