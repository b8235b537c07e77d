package registry

// Decoding one fragment: the strict TOML shape of a fragment, the entry
// that carries one server through validate and normalise, and the line of
// every key, for the refusals.

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

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

// entry carries one server entry through validate and normalise.
type entry struct {
	id     string
	frag   *fragment
	raw    rawServer
	server ToolServer // set by normaliseEntry
}

// path returns the key path of a field of the entry.
func (e *entry) path(parts ...string) string {
	return keyPath(append([]string{"tool_mcp_servers", e.id}, parts...)...)
}

// has reports whether the fragment defines the field.
func (e *entry) has(field string) bool {
	_, ok := e.frag.lines[e.path(field)]
	return ok
}

// errf builds the refusal of a field of the entry. parts name the key below
// the entry; an element "[i]" indexes the previous key's array.
func (e *entry) errf(parts []string, err error) error {
	p := e.path(parts...)
	return &Error{File: e.frag.path, Line: e.frag.line(p), Path: p, Err: err}
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
				errs = append(errs, &Error{File: path, Line: line, Path: p, Err: unknownFieldReason(parts)})
			}
		}
	case errors.As(err, &derr):
		line, _ := derr.Position()
		return nil, []error{&Error{File: path, Line: line, Path: keyPath(derr.Key()...), Err: decodeReason(derr)}}
	default:
		return nil, []error{&Error{File: path, Err: fmt.Errorf("decode: %s", redactMessage(err.Error()))}}
	}
	f.lines = keyLines(data)
	if f.doc.SchemaVersion == nil {
		errs = append(errs, &Error{
			File: path, Path: "schema_version",
			Err: fmt.Errorf("required: write schema_version = %d at the top of the fragment", SchemaVersion),
		})
	} else if v := *f.doc.SchemaVersion; v != SchemaVersion {
		errs = append(errs, &Error{
			File: path, Line: f.lines["schema_version"], Path: "schema_version",
			Err: fmt.Errorf("%d is not supported: want %d", v, SchemaVersion),
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
		return fmt.Errorf("%w (field %s): schema %d takes credentials by environment variable name only (bearer_token_env_var, env_http_headers, env_vars), or, for a sandboxed stdio server, as egress_credentials the proxy sets", ErrOAuth, quoteValue(last), SchemaVersion)
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
