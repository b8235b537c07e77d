package registry

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/testbin"
)

// TestRegistryCredentials: a sandboxed stdio server with allowed_hosts
// may name a credential per listed destination; show renders its header
// and file, never its value; every misplaced one, bad header or unsafe
// file refuses the registry with the key path and reason.
func TestRegistryCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		testbin.Missing(t, "secret files are trusted as the registry is: this test makes them as root")
	}
	f := newRegFixture(t)
	key := filepath.Join(f.root, "secrets", "api")
	if err := os.MkdirAll(filepath.Dir(key), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, []byte("Bearer sk-registry-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inCwd := filepath.Join(f.work, "key")
	if err := os.WriteFile(inCwd, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	entry := func(extra string) string {
		return f.expand("schema_version = 8\n[tool_mcp_servers.api]\ntransport = \"stdio\"\ncommand = \"@EXE@\"\ncwd = \"@WORK@\"\nenabled_tools = [\"q\"]\ndefault_tools_approval_mode = \"auto\"\nstartup_timeout_sec = 10\ntool_timeout_sec = 10\n" + extra)
	}
	dir := filepath.Join(f.root, "ok.d")
	regWrite(t, dir, map[string]string{"10-api.toml": entry("allowed_hosts = [\"api.example.com:443\"]\n[tool_mcp_servers.api.egress_credentials.\"api.example.com:443\"]\nheader = \"authorization\"\nsecret_file = \"" + key + "\"\n")})
	r := Load(dir, f.opts)
	if r.State != conf.StateLoaded {
		t.Fatalf("refused: %v", r.Err())
	}
	s, _ := r.Server("api")
	if len(s.Credentials) != 1 || s.Credentials[0].Dest.String() != "api.example.com:443" || s.Credentials[0].Header != "Authorization" || s.Credentials[0].Value.Reveal() != "Bearer sk-registry-1" {
		t.Fatalf("credentials = %+v", s.Credentials)
	}
	out, err := RenderServerTOML(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "secret_file = '"+key+"'") || strings.Contains(string(out), "sk-registry") {
		t.Errorf("show renders:\n%s\nwant the file, never the value", out)
	}
	for i, tc := range []struct{ name, extra, want string }{
		{"no allowed_hosts", "[tool_mcp_servers.api.egress_credentials.\"api.example.com:443\"]\nheader = \"Authorization\"\nsecret_file = \"" + key + "\"\n", "needs allowed_hosts"},
		{"not listed", "allowed_hosts = [\"api.example.com:443\"]\n[tool_mcp_servers.api.egress_credentials.\"other.example.com:443\"]\nheader = \"Authorization\"\nsecret_file = \"" + key + "\"\n", "not in allowed_hosts"},
		{"a wildcard", "allowed_hosts = [\"*.example.com:443\"]\n[tool_mcp_servers.api.egress_credentials.\"*.example.com:443\"]\nheader = \"Authorization\"\nsecret_file = \"" + key + "\"\n", "never a wildcard"},
		{"a hop header", "allowed_hosts = [\"api.example.com:443\"]\n[tool_mcp_servers.api.egress_credentials.\"api.example.com:443\"]\nheader = \"Host\"\nsecret_file = \"" + key + "\"\n", "the connection's or the proxy's own"},
		{"no file", "allowed_hosts = [\"api.example.com:443\"]\n[tool_mcp_servers.api.egress_credentials.\"api.example.com:443\"]\nheader = \"Authorization\"\n", "secret_file: missing"},
		{"in its cwd", "allowed_hosts = [\"api.example.com:443\"]\n[tool_mcp_servers.api.egress_credentials.\"api.example.com:443\"]\nheader = \"Authorization\"\nsecret_file = \"" + inCwd + "\"\n", "server \"api\"'s sandbox binds"},
		{"unknown key", "allowed_hosts = [\"api.example.com:443\"]\n[tool_mcp_servers.api.egress_credentials.\"api.example.com:443\"]\nheader = \"Authorization\"\nsecret_file = \"" + key + "\"\nvalue = \"sk\"\n", "value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := filepath.Join(f.root, fmt.Sprintf("bad%d.d", i))
			regWrite(t, d, map[string]string{"10-api.toml": entry(tc.extra)})
			r := Load(d, f.opts)
			if r.State != conf.StateRefused || !strings.Contains(fmt.Sprint(r.Err()), tc.want) || strings.Contains(fmt.Sprint(r.Err()), "sk-registry") {
				t.Errorf("%s: %s %v, want refused with %q", tc.name, r.State, r.Err(), tc.want)
			}
		})
	}
}

// TestSecretsAcrossSandboxes: a secret file may not lie where another
// sandbox binds: a server's in a tools.conf tool's dir, a tools.conf
// credential's in a server's cwd (a non-root toolgate's sandboxes all run
// as its uid, which owns the file). The registry is refused.
func TestSecretsAcrossSandboxes(t *testing.T) {
	if os.Geteuid() != 0 {
		testbin.Missing(t, "secret files are trusted as the registry is: this test makes them as root")
	}
	f := newRegFixture(t)
	// A tools.conf tool's own dir and executable, apart from the server's.
	toolDir, toolExe := filepath.Join(f.root, "tool"), filepath.Join(f.root, "toolbin", "lint")
	for _, d := range []string{toolDir, filepath.Dir(toolExe)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(toolExe, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	secretIn := func(dir, name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("Bearer sk-across-1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := filepath.Join(f.root, "secrets")
	if err := os.MkdirAll(own, 0o700); err != nil {
		t.Fatal(err)
	}
	server := func(secret string) string {
		return f.expand("schema_version = 8\n[tool_mcp_servers.api]\ntransport = \"stdio\"\ncommand = \"@EXE@\"\ncwd = \"@WORK@\"\nenabled_tools = [\"q\"]\ndefault_tools_approval_mode = \"auto\"\nstartup_timeout_sec = 10\ntool_timeout_sec = 10\nallowed_hosts = [\"api.example.com:443\"]\n[tool_mcp_servers.api.egress_credentials.\"api.example.com:443\"]\nheader = \"Authorization\"\nsecret_file = \"" + secret + "\"\n")
	}
	toolsConf := func(secret string) *conf.Config {
		text := "tool lint " + toolExe + " test 60 4096 on " + toolDir + " --\negress lint api.example.com:443\ncredential lint api.example.com:443 Authorization " + secret + "\n"
		c := conf.Parse("tools.conf", []byte(text), conf.Options{Builtins: []string{"checkpoint_status"}})
		if c.State != conf.StateLoaded {
			t.Fatalf("conf: %v", c.Errors)
		}
		return c
	}
	for i, tc := range []struct {
		name           string
		server, secret string
		want           string
	}{
		{"a server's in a tool's dir", secretIn(toolDir, "srv-key"), secretIn(own, "tool-key"), "server \"api\"'s egress_credentials is inside " + toolDir},
		{"a tool's in a server's cwd", secretIn(own, "srv-key2"), secretIn(f.work, "tool-key2"), "tools.conf line 3 is inside " + f.work},
		{"apart", secretIn(own, "srv-key3"), secretIn(own, "tool-key3"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := filepath.Join(f.root, fmt.Sprintf("across%d.d", i))
			regWrite(t, d, map[string]string{"10-api.toml": server(tc.server)})
			opts := f.opts
			opts.Conf = toolsConf(tc.secret)
			r := Load(d, opts)
			if tc.want == "" {
				if r.State != conf.StateLoaded {
					t.Errorf("apart: %s %v, want loaded", r.State, r.Err())
				}
				return
			}
			if r.State != conf.StateRefused || !strings.Contains(fmt.Sprint(r.Err()), tc.want) {
				t.Errorf("%s %v, want refused with %q", r.State, r.Err(), tc.want)
			}
		})
	}
}
