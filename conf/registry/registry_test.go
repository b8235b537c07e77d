package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/egress/allowlist"
)

// regFixture is a temp dir with a search-path dir holding an executable
// "mcp-srv" (and "ida-pro-mcp"), a symlink to it, a plain file and a
// working dir, for fragments to name.
type regFixture struct {
	root string
	bin  string // the only search-path dir
	exe  string // bin/mcp-srv
	work string
	opts Options
}

func newRegFixture(t *testing.T) regFixture {
	t.Helper()
	root := t.TempDir()
	f := regFixture{root: root, bin: filepath.Join(root, "bin"), work: filepath.Join(root, "work")}
	f.exe = filepath.Join(f.bin, "mcp-srv")
	for _, d := range []string{f.bin, f.work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{f.exe, filepath.Join(f.bin, "ida-pro-mcp")} {
		if err := os.WriteFile(p, []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "plain"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.exe, filepath.Join(f.bin, "alias")); err != nil {
		t.Fatal(err)
	}
	f.opts = Options{SearchPath: []string{f.bin}}
	return f
}

// expand replaces @ROOT@, @EXE@ and @WORK@.
func (f regFixture) expand(s string) string {
	return strings.NewReplacer("@ROOT@", f.root, "@EXE@", f.exe, "@WORK@", f.work).Replace(s)
}

// parse validates one fragment; "schema_version = 8" is prepended (as line
// 1) unless the text declares a schema_version itself.
func (f regFixture) parse(text string) ([]ToolServer, []*Error) {
	text = f.expand(text)
	if !strings.Contains(text, "schema_version") {
		text = "schema_version = 8\n" + text
	}
	servers, err := ParseFragment("frag.toml", []byte(text), f.opts)
	return servers, regErrs(err)
}

// regErrs flattens a joined error into its *Error values; any
// other error becomes an Error with Path "<not an *Error>".
func regErrs(err error) []*Error {
	if err == nil {
		return nil
	}
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	var out []*Error
	for _, e := range list {
		var re *Error
		if !errors.As(e, &re) {
			re = &Error{Path: "<not an *Error>", Err: e}
		}
		out = append(out, re)
	}
	return out
}

// regWrite writes files into dir with mode 0644 (dir 0755), whatever the
// umask: group-writable fragments are refused.
func regWrite(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The two base entries every rule case extends: each is valid alone.
const (
	regStdio = `[tool_mcp_servers.ida_pro]
transport = "stdio"
command = "@EXE@"
enabled_tools = ["list_functions", "decompile"]
default_tools_approval_mode = "writes"
`
	regHTTP = `[tool_mcp_servers.firecrawl]
transport = "streamable_http"
url = "https://mcp.example.invalid/"
enabled_tools = ["search", "scrape"]
default_tools_approval_mode = "writes"
`
)

const (
	fakeOpenAIKey = "sk-proj-Zq3xV9mK2pL8wR4tY6uN1bC5"
	fakeGitHubPAT = "ghp_R2d2C3poX9wingLuke0Leia1Han2Solo3"
	fakeSlackBot  = "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp"
	fakeAWSKeyID  = "AKIAIOSFODNN7EXAMPLE"
	fakeRandom32  = "Qm7Zt2Xv9Lp4Ks8Wn3Jd6Rb1Hf5Gc0Ya"
	fakeJWT       = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl"
	fakeUUID      = "123e4567-e89b-12d3-a456-426614174000"
)

// regCase is one accepting or rejecting case of a registry rule.
type regCase struct {
	name string
	text string
	// For a rejecting case: the path and a specific substring of the
	// reason of the only error (n errors when n > 0), and the sentinel it
	// wraps, if any. An accepting case leaves path empty.
	path string
	want string
	is   error
	n    int
}

func runRegCases(t *testing.T, cases []regCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newRegFixture(t)
			servers, errs := f.parse(tc.text)
			if tc.path == "" {
				if len(errs) > 0 {
					t.Fatalf("ParseFragment refused an accepted fragment:\n%v", joinRegErrs(errs))
				}
				if len(servers) == 0 {
					t.Fatalf("ParseFragment returned no servers")
				}
				return
			}
			n := tc.n
			if n == 0 {
				n = 1
			}
			if len(errs) != n {
				t.Fatalf("ParseFragment gave %d errors, want %d:\n%v", len(errs), n, joinRegErrs(errs))
			}
			if servers != nil {
				t.Errorf("ParseFragment returned servers with errors: %v", servers)
			}
			var hit *Error
			for _, e := range errs {
				if e.Path == tc.path && strings.Contains(e.Err.Error(), tc.want) {
					hit = e
				}
			}
			if hit == nil {
				t.Fatalf("no error at %s containing %q; got:\n%v", tc.path, tc.want, joinRegErrs(errs))
			}
			if hit.File != "frag.toml" {
				t.Errorf("File = %q, want frag.toml", hit.File)
			}
			if tc.is != nil && !errors.Is(hit, tc.is) {
				t.Errorf("error %v does not wrap %v", hit, tc.is)
			}
			if tc.path != "schema_version" && hit.Line == 0 {
				t.Errorf("error %v has no line", hit)
			}
		})
	}
}

func joinRegErrs(errs []*Error) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "  %s [path %s]\n", e, e.Path)
	}
	return b.String()
}

func TestRegistrySchemaVersion(t *testing.T) {
	runRegCases(t, []regCase{
		{name: "accept 8", text: "schema_version = 8\n" + regStdio},
		{
			name: "missing", text: "# no version\n" + strings.Replace(regStdio, "schema", "", 1) + "\n#schema_version",
			path: "schema_version", want: "required",
		},
		{name: "7", text: "schema_version = 7\n" + regStdio, path: "schema_version", want: "7 is not supported: want 8"},
		{name: "string", text: "schema_version = \"8\"\n" + regStdio, path: "schema_version", want: "wrong type: a TOML string, want an integer"},
	})
}

func TestRegistryUnknownFields(t *testing.T) {
	runRegCases(t, []regCase{
		{name: "accept every known field", text: regStdio + `args = ["--stdio"]
cwd = "@WORK@"
env = { LOG_LEVEL = "info" }
env_vars = ["IDA_MCP_TOKEN"]
sandbox = true
network = false
startup_timeout_sec = 20
tool_timeout_sec = 90
supports_parallel_tool_calls = true
[tool_mcp_servers.ida_pro.tools.decompile]
approval_mode = "prompt"
`},
		{
			name: "top level", text: regStdio + "[mcp_servers.x]\ncommand = \"/bin/true\"\n",
			path: "mcp_servers", want: `unknown field "mcp_servers"`, is: ErrUnknownField,
		},
		{
			name: "server level", text: regStdio + "enabled = true\n",
			path: "tool_mcp_servers.ida_pro.enabled", want: `unknown field "enabled": want one of transport,`, is: ErrUnknownField,
		},
		{
			name: "per tool typo", text: regStdio + "[tool_mcp_servers.ida_pro.tools.decompile]\napproval_mod = \"prompt\"\n",
			path: "tool_mcp_servers.ida_pro.tools.decompile.approval_mod", want: "a per-tool table has only approval_mode", is: ErrUnknownField, n: 2,
		},
	})
}

func TestRegistryPlaintextBearerToken(t *testing.T) {
	runRegCases(t, []regCase{
		{name: "accept bearer_token_env_var", text: regHTTP + "bearer_token_env_var = \"FIRECRAWL_API_KEY\"\n"},
		{
			name: "bearer_token", text: regHTTP + "bearer_token = \"" + fakeOpenAIKey + "\"\n",
			path: "tool_mcp_servers.firecrawl.bearer_token", want: `in field "bearer_token": never write a credential`, is: ErrCredential,
		},
		{
			name: "api_key", text: regHTTP + "api_key = \"x\"\n",
			path: "tool_mcp_servers.firecrawl.api_key", want: "never write a credential", is: ErrCredential,
		},
		{
			name: "token in bearer_token_env_var", text: regHTTP + "bearer_token_env_var = \"" + fakeGitHubPAT + "\"\n",
			path: "tool_mcp_servers.firecrawl.bearer_token_env_var", want: "looks like a token, not a variable name", is: ErrCredential,
		},
		{
			name: "bearer_token_env_var not a name", text: regHTTP + "bearer_token_env_var = \"FIRECRAWL-KEY\"\n",
			path: "tool_mcp_servers.firecrawl.bearer_token_env_var", want: "not a valid variable name",
		},
	})
}

func TestRegistryOAuthFields(t *testing.T) {
	runRegCases(t, []regCase{
		{name: "accept env-backed header", text: regHTTP + "env_http_headers = { X-Api-Key = \"FIRECRAWL_API_KEY\" }\n"},
		{
			name: "oauth table", text: regHTTP + "[tool_mcp_servers.firecrawl.oauth]\nclient_id = \"abc\"\n",
			path: "tool_mcp_servers.firecrawl.oauth", want: `(field "oauth"): schema 8 takes credentials by environment variable name only`, is: ErrOAuth,
		},
		{
			name: "client_secret", text: regHTTP + "client_secret = \"abc\"\n",
			path: "tool_mcp_servers.firecrawl.client_secret", want: "oauth is not supported", is: ErrOAuth,
		},
		{
			name: "scopes", text: regHTTP + "scopes = [\"read\"]\n",
			path: "tool_mcp_servers.firecrawl.scopes", want: "oauth is not supported", is: ErrOAuth,
		},
		{
			name: "oauth_resource", text: regHTTP + "oauth_resource = \"https://x\"\n",
			path: "tool_mcp_servers.firecrawl.oauth_resource", want: "oauth is not supported", is: ErrOAuth,
		},
	})
}

func TestRegistryTransport(t *testing.T) {
	runRegCases(t, []regCase{
		{name: "accept stdio", text: regStdio},
		{name: "accept streamable_http", text: regHTTP},
		{
			name: "missing", text: strings.Replace(regStdio, "transport = \"stdio\"\n", "", 1),
			path: "tool_mcp_servers.ida_pro.transport", want: `required: want "stdio" or "streamable_http"`,
		},
		{
			name: "unknown", text: strings.Replace(regHTTP, "streamable_http", "sse", 1),
			path: "tool_mcp_servers.firecrawl.transport", want: `unknown transport "sse"`,
		},
		{
			name: "url on stdio", text: regStdio + "url = \"https://x.invalid/\"\n",
			path: "tool_mcp_servers.ida_pro.url", want: `"url" belongs to transport "streamable_http", and this entry is "stdio"`, is: ErrTransportField,
		},
		{
			name: "bearer_token_env_var on stdio", text: regStdio + "bearer_token_env_var = \"X\"\n",
			path: "tool_mcp_servers.ida_pro.bearer_token_env_var", want: "belongs to transport", is: ErrTransportField,
		},
		{
			name: "command on http", text: regHTTP + "command = \"/bin/true\"\n",
			path: "tool_mcp_servers.firecrawl.command", want: `"command" belongs to transport "stdio"`, is: ErrTransportField,
		},
		{
			name: "sandbox on http", text: regHTTP + "sandbox = true\n",
			path: "tool_mcp_servers.firecrawl.sandbox", want: "belongs to transport", is: ErrTransportField,
		},
		{
			name: "env on http", text: regHTTP + "env = { A = \"b\" }\n",
			path: "tool_mcp_servers.firecrawl.env", want: "belongs to transport", is: ErrTransportField,
		},
		{
			name: "stdio without command", text: strings.Replace(regStdio, "command = \"@EXE@\"\n", "", 1),
			path: "tool_mcp_servers.ida_pro.command", want: `required for transport "stdio"`,
		},
		{
			name: "http without url", text: strings.Replace(regHTTP, "url = \"https://mcp.example.invalid/\"\n", "", 1),
			path: "tool_mcp_servers.firecrawl.url", want: `required for transport "streamable_http"`,
		},
	})
}

func TestRegistryServerID(t *testing.T) {
	withID := func(id string) string {
		return strings.Replace(regStdio, "tool_mcp_servers.ida_pro", "tool_mcp_servers."+id, 1)
	}
	reject := func(name, id, want string) regCase {
		return regCase{name: name, text: withID(id), path: "tool_mcp_servers." + tomlKey(id), want: want}
	}
	runRegCases(t, []regCase{
		{name: "accept one letter", text: withID("x")},
		{name: "accept digits and words", text: withID("ida_pro9_v2")},
		{name: "accept 32 characters", text: withID(strings.Repeat("a", 32))},
		reject("uppercase", "Ida", `server id "Ida": want a lowercase letter`),
		reject("double underscore", "ida__pro", "no __"),
		reject("trailing underscore", "ida_", "no trailing _"),
		reject("leading digit", "1ida", "want a lowercase letter"),
		reject("hyphen", "ida-pro", "want a lowercase letter"),
		reject("33 characters", strings.Repeat("a", 33), "32 characters or fewer"),
		reject("reserved mmo_mesh", "mmo_mesh", "is reserved: the runtime-owned agent mesh"),
		reject("reserved toolgate", "toolgate", "is reserved: toolgate's own name"),
		reject("reserved checkpoint prefix", "checkpoint_x", `is reserved (prefix "checkpoint")`),
		{
			name: "defined twice in one fragment", text: regStdio + "\n" + regStdio,
			path: "tool_mcp_servers.ida_pro", want: `server id "ida_pro" is defined twice in this fragment`,
		},
	})
}

func TestRegistryServerIDQuotedDot(t *testing.T) {
	// A quoted id with a dot is one key: the path quotes it.
	f := newRegFixture(t)
	_, errs := f.parse(strings.Replace(regStdio, "tool_mcp_servers.ida_pro", `tool_mcp_servers."ida.pro"`, 1))
	if len(errs) != 1 || errs[0].Path != `tool_mcp_servers."ida.pro"` || errs[0].Line != 2 {
		t.Fatalf("errors = %v, want one at tool_mcp_servers.\"ida.pro\" line 2", joinRegErrs(errs))
	}
}

func TestRegistryEnabledTools(t *testing.T) {
	set := func(v string) string {
		return strings.Replace(regHTTP, `enabled_tools = ["search", "scrape"]`, v, 1)
	}
	runRegCases(t, []regCase{
		{name: "accept MCP name characters", text: set(`enabled_tools = ["a.b", "x-y", "Tool_1", "` + strings.Repeat("t", 64) + `"]`)},
		{name: "missing", text: set(""), path: "tool_mcp_servers.firecrawl.enabled_tools", want: "required: list the downstream tools"},
		{name: "empty", text: set("enabled_tools = []"), path: "tool_mcp_servers.firecrawl.enabled_tools", want: "empty: list at least one"},
		{name: "space", text: set(`enabled_tools = ["a b"]`), path: "tool_mcp_servers.firecrawl.enabled_tools[0]", want: `"a b" is not a valid tool name`},
		{name: "65 characters", text: set(`enabled_tools = ["` + strings.Repeat("t", 65) + `"]`), path: "tool_mcp_servers.firecrawl.enabled_tools[0]", want: "64 characters or fewer"},
		{name: "duplicate", text: set(`enabled_tools = ["search", "search"]`), path: "tool_mcp_servers.firecrawl.enabled_tools[1]", want: `"search" listed twice`},
		{name: "wrong type", text: set(`enabled_tools = "search"`), path: "tool_mcp_servers.firecrawl.enabled_tools", want: "wrong type: a TOML string, want an array of strings"},
	})
}

func TestRegistryApprovalModes(t *testing.T) {
	set := func(v string) string {
		return strings.Replace(regHTTP, `default_tools_approval_mode = "writes"`, v, 1)
	}
	cases := []regCase{
		{
			name: "missing default", text: set(""), path: "tool_mcp_servers.firecrawl.default_tools_approval_mode",
			want: `required: state it explicitly, one of "auto", "writes", "prompt" or "approve"`,
		},
		{
			name: "unknown default", text: set(`default_tools_approval_mode = "always"`), path: "tool_mcp_servers.firecrawl.default_tools_approval_mode",
			want: `unknown approval mode "always"`,
		},
		{name: "accept override", text: regHTTP + "[tool_mcp_servers.firecrawl.tools.scrape]\napproval_mode = \"approve\"\n"},
		{
			name: "override not in allowlist", text: regHTTP + "[tool_mcp_servers.firecrawl.tools.crawl]\napproval_mode = \"prompt\"\n",
			path: "tool_mcp_servers.firecrawl.tools.crawl", want: `override for "crawl", which is not in enabled_tools`,
		},
		{
			name: "override without mode", text: regHTTP + "[tool_mcp_servers.firecrawl.tools.scrape]\n",
			path: "tool_mcp_servers.firecrawl.tools.scrape.approval_mode", want: "required in a per-tool table",
		},
		{
			name: "override unknown mode", text: regHTTP + "[tool_mcp_servers.firecrawl.tools.scrape]\napproval_mode = \"never\"\n",
			path: "tool_mcp_servers.firecrawl.tools.scrape.approval_mode", want: `unknown approval mode "never"`,
		},
	}
	for _, m := range KnownApprovalModes() {
		cases = append(cases, regCase{name: "accept " + string(m), text: set(`default_tools_approval_mode = "` + string(m) + `"`)})
	}
	runRegCases(t, cases)
}

func TestRegistryTimeouts(t *testing.T) {
	runRegCases(t, []regCase{
		{name: "accept bounds", text: regHTTP + "startup_timeout_sec = 1\ntool_timeout_sec = 3600\n"},
		{name: "accept upper startup", text: regHTTP + "startup_timeout_sec = 600\ntool_timeout_sec = 1\n"},
		{name: "startup 0", text: regHTTP + "startup_timeout_sec = 0\n", path: "tool_mcp_servers.firecrawl.startup_timeout_sec", want: "0 out of range: want 1 to 600 seconds"},
		{name: "startup 601", text: regHTTP + "startup_timeout_sec = 601\n", path: "tool_mcp_servers.firecrawl.startup_timeout_sec", want: "601 out of range"},
		{name: "tool 3601", text: regHTTP + "tool_timeout_sec = 3601\n", path: "tool_mcp_servers.firecrawl.tool_timeout_sec", want: "3601 out of range: want 1 to 3600 seconds"},
		{name: "tool negative", text: regHTTP + "tool_timeout_sec = -5\n", path: "tool_mcp_servers.firecrawl.tool_timeout_sec", want: "-5 out of range"},
		{name: "float", text: regHTTP + "tool_timeout_sec = 1.5\n", path: "tool_mcp_servers.firecrawl.tool_timeout_sec", want: "wrong type: a TOML float, want an integer"},
	})
}

func TestRegistryTimeoutDefaults(t *testing.T) {
	f := newRegFixture(t)
	servers, errs := f.parse(regHTTP)
	if len(errs) > 0 {
		t.Fatal(joinRegErrs(errs))
	}
	if got := servers[0]; got.StartupTimeout != 10*time.Second || got.ToolTimeout != 60*time.Second || got.SupportsParallelToolCalls {
		t.Errorf("defaults = startup %v, tool %v, parallel %v; want 10s, 1m0s, false", got.StartupTimeout, got.ToolTimeout, got.SupportsParallelToolCalls)
	}
}

func TestRegistryCwd(t *testing.T) {
	runRegCases(t, []regCase{
		{name: "accept absolute", text: regStdio + "cwd = \"@WORK@\"\n"},
		{name: "accept absent directory (readiness reports it)", text: regStdio + "cwd = \"/nonexistent/dir\"\n"},
		{name: "relative", text: regStdio + "cwd = \"work\"\n", path: "tool_mcp_servers.ida_pro.cwd", want: `"work" is not an absolute path`},
		{name: "dot dot", text: regStdio + "cwd = \"/srv/../etc\"\n", path: "tool_mcp_servers.ida_pro.cwd", want: "contains a .. component"},
		{name: "not clean", text: regStdio + "cwd = \"/srv//mcp/\"\n", path: "tool_mcp_servers.ida_pro.cwd", want: `is not clean: write "/srv/mcp"`},
		{name: "tilde", text: regStdio + "cwd = \"~/mcp\"\n", path: "tool_mcp_servers.ida_pro.cwd", want: "is not an absolute path"},
		{name: "state denylist", text: regStdio + "cwd = \"/srv/out/x\"\n", path: "tool_mcp_servers.ida_pro.cwd", want: `contains "/out/"`, is: conf.ErrDenied},
	})
}

func TestRegistryCommand(t *testing.T) {
	set := func(v string) string { return strings.Replace(regStdio, `command = "@EXE@"`, `command = "`+v+`"`, 1) }
	runRegCases(t, []regCase{
		{name: "accept absolute", text: set("@EXE@")},
		{name: "accept bare name", text: set("mcp-srv")},
		{name: "accept symlink", text: set("@ROOT@/bin/alias")},
		{name: "relative with slash", text: set("bin/mcp-srv"), path: "tool_mcp_servers.ida_pro.command", want: `"bin/mcp-srv" is not an absolute path`},
		{name: "dot slash", text: set("./mcp-srv"), path: "tool_mcp_servers.ida_pro.command", want: "is not an absolute path"},
		{name: "bare not found", text: set("nope-mcp"), path: "tool_mcp_servers.ida_pro.command", want: `"nope-mcp" not found as an executable file in`},
		{name: "absolute missing", text: set("@ROOT@/bin/nope"), path: "tool_mcp_servers.ida_pro.command", want: "no such file or directory"},
		{name: "not executable", text: set("@ROOT@/plain"), path: "tool_mcp_servers.ida_pro.command", want: "is not executable (mode 0644)"},
		{name: "directory", text: set("@ROOT@/work"), path: "tool_mcp_servers.ida_pro.command", want: "is not a regular file"},
		{name: "with arguments", text: set("npx -y server-everything"), path: "tool_mcp_servers.ida_pro.command", want: "contains whitespace: command is one executable"},
		{name: "metacharacter", text: set("mcp;rm"), path: "tool_mcp_servers.ida_pro.command", want: "want an absolute path or a bare executable name"},
		{name: "empty", text: set(""), path: "tool_mcp_servers.ida_pro.command", want: "empty"},
		{name: "state denylist", text: set("/srv/out/mcp"), path: "tool_mcp_servers.ida_pro.command", want: `contains "/out/"`, is: conf.ErrDenied},
	})
}

func TestRegistryCommandResolution(t *testing.T) {
	f := newRegFixture(t)
	for _, tc := range []struct{ cmd, command, resolved string }{
		{f.exe, f.exe, f.exe},
		{"mcp-srv", f.exe, f.exe},
		{filepath.Join(f.bin, "alias"), filepath.Join(f.bin, "alias"), f.exe},
		{"alias", filepath.Join(f.bin, "alias"), f.exe},
	} {
		servers, errs := f.parse(strings.Replace(regStdio, "@EXE@", tc.cmd, 1))
		if len(errs) > 0 {
			t.Fatalf("command %q: %v", tc.cmd, joinRegErrs(errs))
		}
		s := servers[0]
		if s.CommandAsWritten != tc.cmd || s.Command != tc.command || s.CommandResolved != tc.resolved {
			t.Errorf("command %q: (as written, command, resolved) = (%q, %q, %q), want (%q, %q, %q)",
				tc.cmd, s.CommandAsWritten, s.Command, s.CommandResolved, tc.cmd, tc.command, tc.resolved)
		}
	}
}

func TestRegistrySearchPathSkipsRelativeEntries(t *testing.T) {
	f := newRegFixture(t)
	// ./relbin/rel-mcp exists relative to the working directory, and the
	// search path names "relbin": it must never be searched.
	t.Chdir(f.root)
	if err := os.MkdirAll("relbin", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("relbin", "rel-mcp"), []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.opts = Options{SearchPath: []string{"relbin", "", f.bin}}
	_, errs := f.parse(strings.Replace(regStdio, "@EXE@", "rel-mcp", 1))
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `"rel-mcp" not found as an executable file in `+f.bin+" ") {
		t.Fatalf("errors = %v, want rel-mcp not found in %s only", joinRegErrs(errs), f.bin)
	}
	// The default search path is the fixed system one.
	if got := (Options{}).searchPath(); strings.Join(got, ":") != SearchPath {
		t.Errorf("default search path = %v, want %s", got, SearchPath)
	}
}

func TestRegistryArgs(t *testing.T) {
	runRegCases(t, []regCase{
		{name: "accept ordinary", text: regStdio + `args = ["--stdio", "--port=8080", "/opt/ida", "-v", "--log-level=debug"]` + "\n"},
		{name: "accept empty", text: regStdio + "args = []\n"},
		{
			name: "credential flag", text: regStdio + `args = ["--stdio", "--api-key=abc"]` + "\n",
			path: "tool_mcp_servers.ida_pro.args[1]", want: `it sets the option "api-key", whose name contains API_KEY`, is: ErrCredential,
		},
		{
			name: "token flag", text: regStdio + `args = ["--token=abc"]` + "\n",
			path: "tool_mcp_servers.ida_pro.args[0]", want: "is or ends in _TOKEN", is: ErrCredential,
		},
		{
			name: "key value", text: regStdio + `args = ["` + fakeGitHubPAT + `"]` + "\n",
			path: "tool_mcp_servers.ida_pro.args[0]", want: "it starts with ghp_", is: ErrCredential,
		},
		{
			name: "NUL", text: regStdio + `args = ["a\u0000b"]` + "\n",
			path: "tool_mcp_servers.ida_pro.args[0]", want: "contains a NUL byte",
		},
		{
			name: "wrong type", text: regStdio + `args = "--stdio"` + "\n",
			path: "tool_mcp_servers.ida_pro.args", want: "wrong type: a TOML string, want an array of strings",
		},
		{
			name: "state denylist", text: regStdio + `args = ["--db=/var/lib/queue.db"]` + "\n",
			path: "tool_mcp_servers.ida_pro.args[0]", want: `contains "queue.db"`, is: conf.ErrDenied,
		},
	})
}

func TestRegistryLiteralEnv(t *testing.T) {
	env := func(name, value string) string {
		return regStdio + fmt.Sprintf("env = { %s = %q }\n", name, value)
	}
	cases := []regCase{
		{name: "accept plain values", text: regStdio + `env = { LOG_LEVEL = "debug", TOKENIZERS_PARALLELISM = "false", LANG = "en_US.UTF-8", IDA_DIR = "/opt/ida-pro-9.1/plugins", NODE_OPTIONS = "--max-old-space-size=4096", KEYBOARD = "us", PWD_HINT = "x" }` + "\n"},
		{name: "invalid name", text: env(`"A-B"`, "x"), path: `tool_mcp_servers.ida_pro.env.A-B`, want: `"A-B" is not a valid variable name`},
		{
			name: "also forwarded", text: regStdio + "env = { LOG_LEVEL = \"x\" }\nenv_vars = [\"LOG_LEVEL\"]\n",
			path: "tool_mcp_servers.ida_pro.env.LOG_LEVEL", want: "both set in env and forwarded by env_vars",
		},
	}
	for _, name := range []string{"GITHUB_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD", "MY_SECRET_THING", "AUTHORIZATION", "SESSION_COOKIE", "SSH_KEY", "GITHUB_PAT", "HTTP_AUTH", "AWS_CREDENTIALS", "GPG_PASSPHRASE", "ACCESSTOKEN"} {
		cases = append(cases, regCase{
			name: "name " + name, text: env(name, "x"),
			path: "tool_mcp_servers.ida_pro.env." + name, want: fmt.Sprintf("the name %q", name), is: ErrCredential,
		})
	}
	for _, v := range []struct{ name, value, why string }{
		{"openai key", fakeOpenAIKey, "starts with sk-"},
		{"github pat", fakeGitHubPAT, "starts with ghp_"},
		{"slack bot", fakeSlackBot, "starts with xoxb-"},
		{"aws key id", fakeAWSKeyID, "starts with AKIA"},
		{"bearer", "Bearer abc", "Authorization scheme"},
		{"basic", "basic dXNlcjpwYXNz", "Authorization scheme"},
		{"random", fakeRandom32, "high-entropy"},
		{"uuid", fakeUUID, "high-entropy"},
		{"jwt", fakeJWT, "JSON web token"},
		{"pem", "-----BEGIN PRIVATE KEY-----", "PEM block"},
		{"url with password", "postgres://app:hunter2@db.internal/app", "URL with a password"},
		{"url with token query", "https://x.invalid/?access_token=abc", "query parameter \"access_token\""},
	} {
		cases = append(cases, regCase{
			name: "value " + v.name, text: env("DSN", v.value),
			path: "tool_mcp_servers.ida_pro.env.DSN", want: v.why, is: ErrCredential,
		})
	}
	runRegCases(t, cases)
}

func TestRegistryEnvVars(t *testing.T) {
	set := func(v string) string { return regStdio + "env_vars = " + v + "\n" }
	runRegCases(t, []regCase{
		{name: "accept names", text: set(`["IDA_MCP_TOKEN", "GITHUB_TOKEN", "_X1"]`)},
		{name: "invalid name", text: set(`["1X"]`), path: "tool_mcp_servers.ida_pro.env_vars[0]", want: `"1X" is not a valid variable name`},
		{name: "assignment", text: set(`["A", "A=B"]`), path: "tool_mcp_servers.ida_pro.env_vars[1]", want: "env_vars holds names, never values"},
		{name: "duplicate", text: set(`["A", "A"]`), path: "tool_mcp_servers.ida_pro.env_vars[1]", want: `"A" listed twice`},
		{
			name: "value pasted as name", text: set(`["` + fakeGitHubPAT + `"]`), path: "tool_mcp_servers.ida_pro.env_vars[0]",
			want: "looks like a credential value, not a variable name", is: ErrCredential,
		},
	})
}

func TestRegistryHeaders(t *testing.T) {
	hdr := func(field, name, value string) string {
		return regHTTP + fmt.Sprintf("%s = { %s = %q }\n", field, name, value)
	}
	cases := []regCase{
		{name: "accept literal header", text: hdr("http_headers", "X-Client", "toolgate")},
		{name: "accept env header", text: hdr("env_http_headers", "X-Api-Key", "FIRECRAWL_API_KEY")},
		{name: "accept env Authorization alone", text: hdr("env_http_headers", "Authorization", "FIRECRAWL_AUTH")},
		{name: "invalid name", text: hdr("http_headers", `"X Client"`, "x"), path: `tool_mcp_servers.firecrawl.http_headers."X Client"`, want: "is not a valid HTTP header name"},
		{
			name: "managed", text: hdr("http_headers", "Content-Type", "text/plain"), path: "tool_mcp_servers.firecrawl.http_headers.Content-Type",
			want: `"Content-Type" is set by toolgate's MCP client`,
		},
		{
			name: "managed session", text: hdr("env_http_headers", "Mcp-Session-Id", "X"), path: "tool_mcp_servers.firecrawl.env_http_headers.Mcp-Session-Id",
			want: "is set by toolgate's MCP client",
		},
		{
			name: "same header twice", text: regHTTP + "http_headers = { X-A = \"1\" }\nenv_http_headers = { x-a = \"A\" }\n",
			path: "tool_mcp_servers.firecrawl.env_http_headers.x-a", want: `header "x-a" is already set by http_headers.X-A`,
		},
		{
			name: "Authorization twice", text: regHTTP + "bearer_token_env_var = \"K\"\nenv_http_headers = { Authorization = \"A\" }\n",
			path: "tool_mcp_servers.firecrawl.env_http_headers.Authorization", want: "already set by bearer_token_env_var",
		},
		{
			name: "env header not a name", text: hdr("env_http_headers", "X-Api-Key", "fc-abc"), path: "tool_mcp_servers.firecrawl.env_http_headers.X-Api-Key",
			want: "never its value",
		},
		{
			name: "env header value pasted", text: hdr("env_http_headers", "X-Api-Key", fakeAWSKeyID), path: "tool_mcp_servers.firecrawl.env_http_headers.X-Api-Key",
			want: "looks like a credential, not a variable name", is: ErrCredential,
		},
		{
			name: "control character", text: hdr("http_headers", "X-Client", "a\r\nX-Evil: 1"), path: "tool_mcp_servers.firecrawl.http_headers.X-Client",
			want: "control character",
		},
	}
	for _, name := range []string{"Authorization", "Proxy-Authorization", "X-Api-Key", "Cookie", "X-Auth-Token", "Api-Key", "X-Client-Secret"} {
		cases = append(cases, regCase{
			name: "name " + name, text: hdr("http_headers", name, "x"),
			path: "tool_mcp_servers.firecrawl.http_headers." + name, want: fmt.Sprintf("the header name %q", name), is: ErrCredential,
		})
	}
	for _, v := range []struct{ name, value, why string }{
		{"bearer", "Bearer abc", "Authorization scheme"},
		{"token prefix", fakeSlackBot, "starts with xoxb-"},
		{"random", fakeRandom32, "high-entropy"},
	} {
		cases = append(cases, regCase{
			name: "value " + v.name, text: hdr("http_headers", "X-Trace", v.value),
			path: "tool_mcp_servers.firecrawl.http_headers.X-Trace", want: v.why, is: ErrCredential,
		})
	}
	runRegCases(t, cases)
}

func TestRegistryURL(t *testing.T) {
	set := func(u, extra string) string {
		return strings.Replace(regHTTP, "https://mcp.example.invalid/", u, 1) + extra
	}
	const bearer = "bearer_token_env_var = \"K\"\n"
	runRegCases(t, []regCase{
		{name: "accept https with bearer", text: set("https://mcp.example.invalid/mcp", bearer)},
		{name: "accept http loopback with bearer", text: set("http://127.0.0.1:8080/mcp", bearer)},
		{name: "accept http localhost with env header", text: set("http://localhost:8080/mcp", "env_http_headers = { X-Key = \"K\" }\n")},
		{name: "accept http remote without credentials", text: set("http://mcp.internal:8080/mcp", "")},
		{
			name: "http remote with bearer", text: set("http://mcp.internal/mcp", bearer), path: "tool_mcp_servers.firecrawl.url",
			want: `http to "mcp.internal" would send the credential in cleartext`,
		},
		{name: "ftp", text: set("ftp://mcp.example.invalid/", ""), path: "tool_mcp_servers.firecrawl.url", want: `scheme "ftp": want https`},
		{name: "no scheme", text: set("mcp.example.invalid", ""), path: "tool_mcp_servers.firecrawl.url", want: `scheme "": want https`},
		{name: "no host", text: set("https:///mcp", ""), path: "tool_mcp_servers.firecrawl.url", want: "no host"},
		{
			name: "userinfo", text: set("https://user:hunter2@mcp.example.invalid/", ""), path: "tool_mcp_servers.firecrawl.url",
			want: "the URL has user information", is: ErrCredential,
		},
		{
			name: "query name", text: set("https://mcp.example.invalid/?api_key=abc", ""), path: "tool_mcp_servers.firecrawl.url",
			want: `query parameter "api_key" contains API_KEY`, is: ErrCredential,
		},
		{
			name: "query value", text: set("https://mcp.example.invalid/?k="+fakeOpenAIKey, ""), path: "tool_mcp_servers.firecrawl.url",
			want: `query parameter "k" holds a credential`, is: ErrCredential,
		},
		{name: "fragment", text: set("https://mcp.example.invalid/#x", ""), path: "tool_mcp_servers.firecrawl.url", want: "has a #fragment"},
	})
}

func TestRegistrySandboxNetwork(t *testing.T) {
	runRegCases(t, []regCase{
		{name: "accept network with sandbox", text: regStdio + "network = true\n"},
		{name: "accept sandbox off", text: regStdio + "sandbox = false\n"},
		{
			name: "network with sandbox off", text: regStdio + "sandbox = false\nnetwork = true\n",
			path: "tool_mcp_servers.ida_pro.network", want: "only meaningful with the sandbox on",
		},
		{
			name: "network false with sandbox off", text: regStdio + "sandbox = false\nnetwork = false\n",
			path: "tool_mcp_servers.ida_pro.network", want: "only meaningful with the sandbox on",
		},
		{
			name: "wrong type", text: regStdio + "sandbox = \"on\"\n",
			path: "tool_mcp_servers.ida_pro.sandbox", want: "wrong type: a TOML string, want a boolean",
		},
	})
	f := newRegFixture(t)
	for _, tc := range []struct {
		extra            string
		sandbox, network bool
	}{
		{"", true, false},
		{"network = true\n", true, true},
		{"sandbox = true\nnetwork = false\n", true, false},
		{"sandbox = false\n", false, false},
	} {
		servers, errs := f.parse(regStdio + tc.extra)
		if len(errs) > 0 {
			t.Fatal(joinRegErrs(errs))
		}
		if s := servers[0]; s.Sandbox != tc.sandbox || s.Network != tc.network {
			t.Errorf("%q: sandbox, network = %v, %v; want %v, %v", tc.extra, s.Sandbox, s.Network, tc.sandbox, tc.network)
		}
	}
}

func TestRegistrySyntaxError(t *testing.T) {
	f := newRegFixture(t)
	_, errs := f.parse(regStdio + "env = { DSN = \"" + fakeOpenAIKey + "\"\n")
	if len(errs) != 1 || errs[0].Line != 7 || !strings.Contains(errs[0].Error(), "invalid TOML") {
		t.Fatalf("errors = %v, want one invalid TOML error on line 7", joinRegErrs(errs))
	}
	if strings.Contains(errs[0].Error(), fakeOpenAIKey) {
		t.Errorf("error %q carries the secret", errs[0])
	}
}

// TestRegistryErrorLines checks the line and path of errors the decoder
// does not position: keys in inline tables, dotted keys, array elements,
// per-tool tables, and keys after a table header.
func TestRegistryErrorLines(t *testing.T) {
	f := newRegFixture(t)
	text := `schema_version = 8
# line 2
[tool_mcp_servers.a]
transport = "stdio"
command = "@EXE@"
enabled_tools = [
  "x",
  "x",
]
default_tools_approval_mode = "writes"
env = { OK = "1", GITHUB_TOKEN = "x" }
tools.y.approval_mode = "prompt"

[tool_mcp_servers.b]
transport = "streamable_http"
url = "ftp://x"
enabled_tools = ["s"]
default_tools_approval_mode = "auto"
cwd = "/tmp"
`
	_, errs := f.parse(text)
	got := map[string]int{}
	for _, e := range errs {
		got[e.Path] = e.Line
	}
	want := map[string]int{
		"tool_mcp_servers.a.enabled_tools[1]": 6,
		"tool_mcp_servers.a.env.GITHUB_TOKEN": 11,
		"tool_mcp_servers.a.tools.y":          12,
		"tool_mcp_servers.b.url":              16,
		"tool_mcp_servers.b.cwd":              19,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("error (path → line) = %v, want %v\n%s", got, want, joinRegErrs(errs))
	}
	// Every error of the fragment is reported, in line order.
	for i := 1; i < len(errs); i++ {
		if errs[i-1].Line > errs[i].Line {
			t.Errorf("errors out of line order: %v", joinRegErrs(errs))
		}
	}
}

func TestRegistryRenderRoundTrip(t *testing.T) {
	f := newRegFixture(t)
	text := regStdio + `args = ["--stdio", "with space"]
cwd = "@WORK@"
env = { LOG_LEVEL = "info", "ODD.NAME_OK" = "x" }
env_vars = ["IDA_MCP_TOKEN"]
network = true
supports_parallel_tool_calls = true
[tool_mcp_servers.ida_pro.tools.decompile]
approval_mode = "prompt"

` + regHTTP + `bearer_token_env_var = "FIRECRAWL_API_KEY"
http_headers = { X-Client = "toolgate" }
env_http_headers = { X-Team = "FIRECRAWL_TEAM" }
startup_timeout_sec = 15
`
	text = strings.Replace(text, `"ODD.NAME_OK" = "x"`, `ODD_NAME_OK = "x"`, 1)
	servers, errs := f.parse(text)
	if len(errs) > 0 {
		t.Fatal(joinRegErrs(errs))
	}
	for _, s := range servers {
		out, err := RenderServerTOML(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseFragment("rendered.toml", out, f.opts)
		if err != nil {
			t.Fatalf("rendered %s does not load: %v\n%s", s.ID, err, out)
		}
		if len(back) != 1 {
			t.Fatalf("rendered %s loads as %d servers", s.ID, len(back))
		}
		want := s
		want.Fragment, want.Line, want.CommandAsWritten = "rendered.toml", back[0].Line, want.Command
		if !reflect.DeepEqual(back[0], want) {
			t.Errorf("RenderServerTOML(%s) round trip:\n got %+v\nwant %+v\n%s", s.ID, back[0], want, out)
		}
		again, _ := RenderServerTOML(back[0], nil)
		back[0].Fragment, back[0].Line = s.Fragment, s.Line
		if again2, _ := RenderServerTOML(back[0], nil); string(again2) != string(out) {
			t.Errorf("RenderServerTOML not idempotent:\n%s\nthen\n%s", out, again)
		}
		js, err := RenderServerJSON(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(js, &doc); err != nil {
			t.Fatalf("RenderServerJSON(%s) is not JSON: %v\n%s", s.ID, err, js)
		}
		if doc["id"] != s.ID || doc["fragment"] != "frag.toml" {
			t.Errorf("RenderServerJSON(%s) id, fragment = %v, %v", s.ID, doc["id"], doc["fragment"])
		}
	}
}

func TestRegistryRenderSeedTOML(t *testing.T) {
	f := newRegFixture(t)
	r := loadSeedRegistry(t, f)
	s, _ := r.Server("firecrawl")
	out, err := RenderServerTOML(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `# firecrawl: defined in ` + s.Fragment + ` line 4
schema_version = 8

[tool_mcp_servers]
[tool_mcp_servers.firecrawl]
transport = 'streamable_http'
url = 'https://mcp.example.invalid/'
bearer_token_env_var = 'FIRECRAWL_API_KEY'
enabled_tools = ['search', 'scrape']
default_tools_approval_mode = 'writes'
startup_timeout_sec = 15
tool_timeout_sec = 120
supports_parallel_tool_calls = false
pinned = false

[tool_mcp_servers.firecrawl.tools]
[tool_mcp_servers.firecrawl.tools.scrape]
approval_mode = 'prompt'
`
	if string(out) != want {
		t.Errorf("RenderServerTOML(firecrawl) =\n%s\nwant\n%s", out, want)
	}
}

// loadSeedRegistry loads testdata/seed (seed 002's example),
// copied into a temp dir so that file modes do not depend on the umask.
func loadSeedRegistry(t *testing.T, f regFixture) *Registry {
	t.Helper()
	src := filepath.Join("testdata", "seed")
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(b)
	}
	dir := filepath.Join(f.root, "tool-mcp.d")
	regWrite(t, dir, files)
	return Load(dir, f.opts)
}

func TestLoadRegistrySeedExample(t *testing.T) {
	f := newRegFixture(t)
	r := loadSeedRegistry(t, f)
	if r.State != conf.StateLoaded {
		t.Fatalf("State = %s, want loaded: %v", r.State, r.Err())
	}
	dir := r.Dir
	want := []ToolServer{
		{
			ID:                "firecrawl",
			Transport:         TransportStreamableHTTP,
			URL:               "https://mcp.example.invalid/",
			BearerTokenEnvVar: "FIRECRAWL_API_KEY",
			EnabledTools:      []string{"search", "scrape"},
			DefaultApproval:   ApprovalWrites,
			ToolApproval:      map[string]ApprovalMode{"scrape": ApprovalPrompt},
			StartupTimeout:    15 * time.Second,
			ToolTimeout:       120 * time.Second,
			Fragment:          filepath.Join(dir, "10-firecrawl.toml"),
			Line:              4,
		},
		{
			ID:               "ida_pro",
			Transport:        TransportStdio,
			CommandAsWritten: "ida-pro-mcp",
			Command:          filepath.Join(f.bin, "ida-pro-mcp"),
			CommandResolved:  filepath.Join(f.bin, "ida-pro-mcp"),
			Args:             []string{},
			EnvVars:          []string{"IDA_MCP_TOKEN"},
			Sandbox:          true,
			EnabledTools:     []string{"list_functions", "decompile"},
			DefaultApproval:  ApprovalWrites,
			StartupTimeout:   10 * time.Second,
			ToolTimeout:      60 * time.Second,
			Fragment:         filepath.Join(dir, "20-ida.toml"),
			Line:             5,
		},
	}
	if !reflect.DeepEqual(r.Servers, want) {
		t.Errorf("Servers =\n%+v\nwant\n%+v", r.Servers, want)
	}
	if got := r.Fragments; len(got) != 2 || filepath.Base(got[0]) != "10-firecrawl.toml" {
		t.Errorf("Fragments = %v, want the two *.toml files in order (README.txt ignored)", got)
	}
	fc := r.Servers[0]
	if fc.Approval("scrape") != ApprovalPrompt || fc.Approval("search") != ApprovalWrites || !fc.Enabled("search") || fc.Enabled("crawl") {
		t.Errorf("firecrawl approvals/enabled wrong: %+v", fc)
	}
	if got, want := fc.Vars(), []VarRef{{"FIRECRAWL_API_KEY", "bearer_token_env_var"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Vars() = %v, want %v", got, want)
	}
}

func TestLoadRegistryDirectory(t *testing.T) {
	f := newRegFixture(t)
	good := "schema_version = 8\n" + f.expand(regStdio)

	t.Run("absent", func(t *testing.T) {
		r := Load(filepath.Join(f.root, "nope"), f.opts)
		if r.State != conf.StateAbsent || !strings.Contains(r.Reason, "no directory at") || len(r.Servers) != 0 || len(r.Errors) != 0 {
			t.Errorf("Load(missing) = %+v, want absent with no servers", r)
		}
	})
	t.Run("not a directory", func(t *testing.T) {
		r := Load(filepath.Join(f.root, "plain"), f.opts)
		if r.State != conf.StateRefused || !strings.Contains(r.Err().Error(), "not a directory") {
			t.Errorf("Load(file) = %s %v, want refused: not a directory", r.State, r.Err())
		}
	})
	t.Run("empty directory", func(t *testing.T) {
		dir := filepath.Join(f.root, "empty")
		regWrite(t, dir, nil)
		r := Load(dir, f.opts)
		if r.State != conf.StateLoaded || len(r.Servers) != 0 {
			t.Errorf("Load(empty) = %s with %d servers, want loaded with none", r.State, len(r.Servers))
		}
	})
	t.Run("world-writable directory", func(t *testing.T) {
		dir := filepath.Join(f.root, "ww")
		regWrite(t, dir, map[string]string{"a.toml": good})
		if err := os.Chmod(dir, 0o1777); err != nil {
			t.Fatal(err)
		}
		r := Load(dir, f.opts)
		if r.State != conf.StateRefused || len(r.Servers) != 0 || !strings.Contains(r.Err().Error(), "group- or world-writable (mode 0777)") {
			t.Errorf("Load(world-writable) = %s %v, want refused", r.State, r.Err())
		}
	})
	t.Run("group-writable fragment", func(t *testing.T) {
		dir := filepath.Join(f.root, "gw")
		regWrite(t, dir, map[string]string{"a.toml": good})
		if err := os.Chmod(filepath.Join(dir, "a.toml"), 0o664); err != nil {
			t.Fatal(err)
		}
		r := Load(dir, f.opts)
		if r.State != conf.StateRefused || !strings.Contains(r.Err().Error(), "a.toml: group- or world-writable (mode 0664)") {
			t.Errorf("Load(group-writable fragment) = %s %v, want refused", r.State, r.Err())
		}
	})
	t.Run("oversized fragment", func(t *testing.T) {
		dir := filepath.Join(f.root, "big")
		regWrite(t, dir, map[string]string{"a.toml": good + "#" + strings.Repeat("x", MaxFragmentSize)})
		r := Load(dir, f.opts)
		if r.State != conf.StateRefused || !strings.Contains(r.Err().Error(), "larger than 1048576 bytes") {
			t.Errorf("Load(oversized) = %s %v, want refused", r.State, r.Err())
		}
	})
	t.Run("skips dotfiles, other names and directories; follows symlinks", func(t *testing.T) {
		dir := filepath.Join(f.root, "mixed")
		regWrite(t, dir, map[string]string{
			".#a.toml":       "not toml at all",
			"notes.txt":      "not toml at all",
			"a.toml.bak":     "not toml at all",
			"target.conf":    good,
			"b.toml.disable": "x",
		})
		if err := os.Mkdir(filepath.Join(dir, "sub.toml"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(dir, "target.conf"), filepath.Join(dir, "link.toml")); err != nil {
			t.Fatal(err)
		}
		r := Load(dir, f.opts)
		if r.State != conf.StateLoaded || len(r.Servers) != 1 || len(r.Fragments) != 1 || filepath.Base(r.Fragments[0]) != "link.toml" {
			t.Errorf("Load(mixed) = %s %v, fragments %v; want loaded from link.toml only", r.State, r.Err(), r.Fragments)
		}
	})
	t.Run("symlink to a directory", func(t *testing.T) {
		dir := filepath.Join(f.root, "dirlink")
		regWrite(t, dir, nil)
		if err := os.Symlink(f.work, filepath.Join(dir, "x.toml")); err != nil {
			t.Fatal(err)
		}
		r := Load(dir, f.opts)
		if r.State != conf.StateRefused || !strings.Contains(r.Err().Error(), "x.toml: not a regular file") {
			t.Errorf("Load(symlink to dir) = %s %v, want refused", r.State, r.Err())
		}
	})
}

func TestLoadRegistryLaterFragmentReplacesWhole(t *testing.T) {
	f := newRegFixture(t)
	dir := filepath.Join(f.root, "d")
	regWrite(t, dir, map[string]string{
		"10-a.toml": "schema_version = 8\n" + f.expand(regStdio) + "cwd = \"/srv\"\nenv = { LOG_LEVEL = \"info\" }\nenv_vars = [\"X\"]\n",
		"20-b.toml": "schema_version = 8\n" + strings.Replace(regHTTP, "firecrawl", "ida_pro", 1),
		// "9" sorts after "2": lexical, not numeric, order.
		"9-c.toml": "schema_version = 8\n" + strings.Replace(regHTTP, `"writes"`, `"auto"`, 1),
	})
	r := Load(dir, f.opts)
	if r.State != conf.StateLoaded {
		t.Fatalf("State = %s: %v", r.State, r.Err())
	}
	if got := []string{filepath.Base(r.Fragments[0]), filepath.Base(r.Fragments[1]), filepath.Base(r.Fragments[2])}; !reflect.DeepEqual(got, []string{"10-a.toml", "20-b.toml", "9-c.toml"}) {
		t.Errorf("Fragments = %v, want lexical order", got)
	}
	ida, ok := r.Server("ida_pro")
	if !ok {
		t.Fatal("no ida_pro")
	}
	if ida.Transport != TransportStreamableHTTP || ida.Cwd != "" || ida.Env != nil || ida.EnvVars != nil || ida.Command != "" || ida.Sandbox {
		t.Errorf("ida_pro kept fields of the replaced stdio entry: %+v", ida)
	}
	if !reflect.DeepEqual(ida.Replaces, []string{filepath.Join(dir, "10-a.toml")}) || ida.Fragment != filepath.Join(dir, "20-b.toml") {
		t.Errorf("ida_pro Fragment, Replaces = %s, %v", ida.Fragment, ida.Replaces)
	}
	if got := []string{r.Servers[0].ID, r.Servers[1].ID}; !reflect.DeepEqual(got, []string{"firecrawl", "ida_pro"}) {
		t.Errorf("server order = %v, want id order", got)
	}
}

func TestLoadRegistryFailClosed(t *testing.T) {
	f := newRegFixture(t)
	dir := filepath.Join(f.root, "d")
	regWrite(t, dir, map[string]string{
		// A refused entry refuses the registry even when a later fragment
		// replaces it: a secret written anywhere is a refusal.
		"10-a.toml": "schema_version = 8\n" + f.expand(regStdio) + "env = { GITHUB_TOKEN = \"x\" }\n",
		"20-b.toml": "schema_version = 8\n" + f.expand(regStdio),
		"30-c.toml": "schema_version = 8\n" + regHTTP + "bearer_token = \"x\"\ntool_timeout_sec = 0\n",
		"40-d.toml": "schema_version = 8\n" + strings.Replace(regHTTP, "firecrawl", "other", 1),
	})
	r := Load(dir, f.opts)
	if r.State != conf.StateRefused || len(r.Servers) != 0 {
		t.Fatalf("State = %s with %d servers, want refused with none", r.State, len(r.Servers))
	}
	var got []string
	for _, e := range regErrs(r.Err()) {
		got = append(got, fmt.Sprintf("%s:%d %s", filepath.Base(e.File), e.Line, e.Path))
	}
	want := []string{
		"10-a.toml:7 tool_mcp_servers.ida_pro.env.GITHUB_TOKEN",
		"30-c.toml:7 tool_mcp_servers.firecrawl.bearer_token",
		"30-c.toml:8 tool_mcp_servers.firecrawl.tool_timeout_sec",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors = %v, want %v", got, want)
	}
}

func TestRegistryReadiness(t *testing.T) {
	f := newRegFixture(t)
	servers, errs := f.parse(regStdio + "cwd = \"@WORK@\"\nenv_vars = [\"SET_VAR\", \"MISSING_VAR\", \"EMPTY_VAR\"]\n\n" +
		regHTTP + "bearer_token_env_var = \"SET_VAR\"\nenv_http_headers = { X-Team = \"SET_VAR\" }\n")
	if len(errs) > 0 {
		t.Fatal(joinRegErrs(errs))
	}
	const secret = "s3cr3t-value-never-shown"
	env := map[string]string{"SET_VAR": secret, "EMPTY_VAR": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	http := servers[0].Readiness(lookup)
	if !http.Ready || len(http.Checks) != 2 {
		t.Errorf("firecrawl readiness = %+v, want ready with 2 checks", http)
	}
	if got := http.Checks[1]; got != (ReadinessCheck{Kind: "variable", Subject: "SET_VAR", Use: "env_http_headers.X-Team", OK: true, Detail: "set"}) {
		t.Errorf("header variable check = %+v", got)
	}

	ida := servers[1].Readiness(lookup)
	want := Readiness{ID: "ida_pro", Ready: false, Checks: []ReadinessCheck{
		{Kind: "command", Subject: f.exe, OK: true, Detail: f.exe},
		{Kind: "cwd", Subject: f.work, OK: true, Detail: "exists"},
		{Kind: "variable", Subject: "SET_VAR", Use: "env_vars", OK: true, Detail: "set"},
		{Kind: "variable", Subject: "MISSING_VAR", Use: "env_vars", Detail: "missing"},
		{Kind: "variable", Subject: "EMPTY_VAR", Use: "env_vars", Detail: "empty"},
	}}
	if !reflect.DeepEqual(ida, want) {
		t.Errorf("ida_pro readiness =\n%+v\nwant\n%+v", ida, want)
	}
	if strings.Contains(fmt.Sprintf("%#v %#v %#v", http, ida, servers), secret) {
		t.Errorf("readiness carries a variable's value")
	}

	// The host changes after load: the command goes, the cwd goes.
	if err := os.Remove(f.exe); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f.work); err != nil {
		t.Fatal(err)
	}
	env["MISSING_VAR"], env["EMPTY_VAR"] = "x", "y"
	after := servers[1].Readiness(lookup)
	if after.Ready || after.Checks[0].OK || !strings.Contains(after.Checks[0].Detail, "no such file") ||
		after.Checks[1].OK || !strings.Contains(after.Checks[1].Detail, "no such file") {
		t.Errorf("readiness after removal = %+v, want command and cwd not ok", after)
	}
}

func TestServedName(t *testing.T) {
	s := ToolServer{ID: "ida_pro"}
	for _, tool := range []string{"decompile", "_x", "a__b", "x.y"} {
		id, got, ok := SplitServedName(s.ServedName(tool))
		if !ok || id != "ida_pro" || got != tool {
			t.Errorf("SplitServedName(ServedName(%q)) = %q, %q, %v", tool, id, got, ok)
		}
	}
	for _, bad := range []string{"plain", "__x", "x__"} {
		if _, _, ok := SplitServedName(bad); ok {
			t.Errorf("SplitServedName(%q) ok, want not", bad)
		}
	}
}

func TestKnownSetsParse(t *testing.T) {
	for _, tr := range KnownTransports() {
		if got, err := ParseTransport(string(tr)); err != nil || got != tr {
			t.Errorf("ParseTransport(%q) = %q, %v", tr, got, err)
		}
	}
	for _, m := range KnownApprovalModes() {
		if got, err := ParseApprovalMode(string(m)); err != nil || got != m || m.Describe() == "" {
			t.Errorf("ParseApprovalMode(%q) = %q, %v (describe %q)", m, got, err, m.Describe())
		}
	}
	if _, err := ParseTransport("sse"); err == nil || err.Error() != `unknown transport "sse": want "stdio" or "streamable_http"` {
		t.Errorf("ParseTransport(sse) error = %v", err)
	}
	if got := ReservedServerIDs(); !reflect.DeepEqual(got, []string{"mmo_mesh", "toolgate", "checkpoint*"}) {
		t.Errorf("ReservedServerIDs() = %v", got)
	}
}

func ExampleParseFragment() {
	fragment := `
schema_version = 8

[tool_mcp_servers.firecrawl]
transport = "streamable_http"
url = "https://mcp.example.invalid/"
bearer_token_env_var = "FIRECRAWL_API_KEY"
enabled_tools = ["search", "scrape"]
default_tools_approval_mode = "writes"

[tool_mcp_servers.firecrawl.tools.scrape]
approval_mode = "prompt"
`
	servers, err := ParseFragment("10-firecrawl.toml", []byte(fragment), Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range servers {
		for _, t := range s.EnabledTools {
			fmt.Printf("%s: %s, timeout %v\n", s.ServedName(t), s.Approval(t), s.ToolTimeout)
		}
		for _, v := range s.Vars() {
			fmt.Printf("needs %s (%s)\n", v.Name, v.Use)
		}
	}

	_, err = ParseFragment("20-bad.toml", []byte(`schema_version = 8
[tool_mcp_servers.bad]
transport = "streamable_http"
url = "https://mcp.example.invalid/"
bearer_token = "not here"
enabled_tools = []
default_tools_approval_mode = "writes"
`), Options{})
	fmt.Println(err)
	// Output:
	// firecrawl__search: writes, timeout 1m0s
	// firecrawl__scrape: prompt, timeout 1m0s
	// needs FIRECRAWL_API_KEY (bearer_token_env_var)
	// 20-bad.toml:5: tool_mcp_servers.bad.bearer_token: plaintext credential in field "bearer_token": never write a credential into the registry; put it in an environment variable and name the variable with bearer_token_env_var or env_http_headers (streamable_http) or env_vars (stdio)
	// 20-bad.toml:6: tool_mcp_servers.bad.enabled_tools: empty: list at least one downstream tool (the operator's maximum)
}

func TestClientNameIssue(t *testing.T) {
	for _, tc := range []struct {
		served  string
		want    string
		refused bool
	}{
		{"fs__read_file", "", false},
		{strings.Repeat("a", 49), "", false},
		{strings.Repeat("a", 50), "65 characters, in Claude Code and Codex: over the 64", true},
		{"srv__" + strings.Repeat("t", 64), "84 characters", true},
		{"srv__admin.tools.list", `has '.'`, false},
		{"srv__get-user", "", false},
	} {
		problem, refused := ClientNameIssue(tc.served)
		if refused != tc.refused || (tc.want == "") != (problem == "") || !strings.Contains(problem, tc.want) {
			t.Errorf("ClientNameIssue(%q) = %q, %v; want %q, %v", tc.served, problem, refused, tc.want, tc.refused)
		}
	}
}

func TestRegistryAllowedHosts(t *testing.T) {
	runRegCases(t, []regCase{
		{name: "accept with the sandbox", text: regStdio + "allowed_hosts = [\"api.example.com:443\", \"*.example.org:443\"]\n"},
		{
			name: "beside network = true", text: regStdio + "network = true\nallowed_hosts = [\"api.example.com:443\"]\n",
			path: "tool_mcp_servers.ida_pro.allowed_hosts", want: "beside network = true",
		},
		{
			name: "with sandbox off", text: regStdio + "sandbox = false\nallowed_hosts = [\"api.example.com:443\"]\n",
			path: "tool_mcp_servers.ida_pro.allowed_hosts", want: "needs the sandbox",
		},
		{
			name: "a malformed destination", text: regStdio + "allowed_hosts = [\"https://api.example.com\"]\n",
			path: "tool_mcp_servers.ida_pro.allowed_hosts", want: "no scheme",
		},
		{
			name: "empty", text: regStdio + "allowed_hosts = []\n",
			path: "tool_mcp_servers.ida_pro.allowed_hosts", want: "no destination",
		},
	})
	f := newRegFixture(t)
	servers, errs := f.parse(regStdio + "allowed_hosts = [\"api.example.com:443\"]\n")
	if len(errs) > 0 {
		t.Fatal(joinRegErrs(errs))
	}
	if got := servers[0].AllowedHosts.Strings(); len(got) != 1 || got[0] != "api.example.com:443" || servers[0].Network {
		t.Errorf("allowed hosts %q, network %v", got, servers[0].Network)
	}
}

// TestRegistryReadOnly: the read-only binds of a sandboxed server are
// resolved at load (what registry show and validate see is what a call
// binds), and an argument naming what a sandbox may never bind refuses the
// entry there, not at every call.
func TestRegistryReadOnly(t *testing.T) {
	f := newRegFixture(t)
	if err := os.Symlink(f.work, filepath.Join(f.root, "link")); err != nil {
		t.Fatal(err)
	}
	servers, errs := f.parse(regStdio + `args = ["@ROOT@/link", "@WORK@", "--flag", "/nonexistent/x"]` + "\n")
	if len(errs) > 0 {
		t.Fatal(joinRegErrs(errs))
	}
	if got := servers[0].ReadOnly; len(got) != 1 || got[0] != f.work {
		t.Errorf("read-only binds %q, want [%s] (resolved, once)", got, f.work)
	}
	servers, errs = f.parse(regStdio + "sandbox = false\nargs = [\"@WORK@\"]\n")
	if len(errs) > 0 || servers[0].ReadOnly != nil {
		t.Errorf("an unsandboxed server has read-only binds %q (%v)", servers[0].ReadOnly, errs)
	}
	runRegCases(t, []regCase{
		{
			name: "an argument under /etc", text: regStdio + "args = [\"/etc/passwd\"]\n",
			path: "tool_mcp_servers.ida_pro.args", want: "under /etc",
		},
		{
			name: "the root", text: regStdio + "args = [\"/\"]\n",
			path: "tool_mcp_servers.ida_pro.args", want: `"/" cannot be bound`,
		},
	})
}

// TestSandboxState: how a server runs, as list, status and descriptions
// say it: an allowlist is named, never shown as "no network".
func TestSandboxState(t *testing.T) {
	allow, err := allowlist.ParseList([]string{"api.example.com:443", "*.example.org:443"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		s    ToolServer
		want string
	}{
		{ToolServer{Transport: TransportStreamableHTTP}, "-"},
		{ToolServer{Transport: TransportStdio}, "off"},
		{ToolServer{Transport: TransportStdio, Sandbox: true}, "on, no network"},
		{ToolServer{Transport: TransportStdio, Sandbox: true, Network: true}, "on, network"},
		{ToolServer{Transport: TransportStdio, Sandbox: true, AllowedHosts: allow}, "on, network: only api.example.com:443, *.example.org:443"},
	} {
		if got := tc.s.SandboxState(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.s, got, tc.want)
		}
	}
}
