package registry

// The registry's model: what a loaded registry is (Registry, ToolServer and
// the closed sets Transport and ApprovalMode), the names toolgate serves a
// downstream tool under, and the refusals (*Error and the
// sentinels). load.go reads a directory into it; decode.go, check.go and
// normalise.go are the steps of one fragment; render.go the normalised
// rendering used by `toolgate registry show`; pins.go the approved
// definitions.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/egress/allowlist"
)

// DefaultDir is where the registry fragments are read from unless
// --tool-mcp-dir says otherwise.
const DefaultDir = "/etc/saphira/mcp/tool-mcp.d"

// SchemaVersion is the only schema_version a fragment may declare.
// It is seed 002's version: the same field set and the same refusals
// (OAuth, plaintext credentials, transport-incompatible and unknown fields).
const SchemaVersion = 8

// SearchPath is the fixed PATH a bare command name is resolved
// through, once, at load. toolgate's own $PATH is never consulted, so a
// relative or writable entry in the caller's environment cannot redirect a
// server's executable. It is the PATH every tool runs with.
const SearchPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

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
// Load.
type ToolServer struct {
	// ID is the server id: the prefix of every tool it serves (ID__TOOL).
	ID string
	// Transport is stdio or streamable_http.
	Transport Transport

	// CommandAsWritten is the stdio command as the fragment wrote it: an
	// absolute path or a bare name.
	CommandAsWritten string
	// Command is the absolute path to execve: CommandAsWritten when it is
	// absolute, else the first match in SearchPath.
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
	Credentials []conf.Credential

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
	State conf.State
	// Reason says why the state is absent.
	Reason string
	// Fragments are the *.toml files read, in load (lexical) order.
	Fragments []string
	// Servers are the servers after merging, in id order.
	Servers []ToolServer
	// Errors are the refusals, each an *Error, in fragment and line
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

// Error is one refusal: a fragment (or the directory), the line
// when the TOML decoder or the key's position gives one, the key path
// (tool_mcp_servers.firecrawl.bearer_token), and the reason. It never holds
// a credential value: reasons name keys and variables only.
type Error struct {
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

func (e *Error) Error() string { return conf.Positioned(e.File, e.Line, e.Path, e.Err) }

func (e *Error) Unwrap() error { return e.Err }

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
