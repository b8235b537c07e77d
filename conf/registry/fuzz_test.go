package registry

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// FuzzParseFragment: no fragment crashes or hangs the decoder, and whatever
// is accepted obeys the registry's rules: a valid id, a transport with its
// required field, a non-empty allowlist, no credential in a literal.
func FuzzParseFragment(f *testing.F) {
	for _, s := range []string{
		"schema_version = 8\n[tool_mcp_servers.a]\ntransport = \"stdio\"\ncommand = \"/usr/bin/true\"\nenabled_tools = [\"x\"]\ndefault_tools_approval_mode = \"auto\"\n",
		"schema_version = 8\n[tool_mcp_servers.web]\ntransport = \"streamable_http\"\nurl = \"https://mcp.example.invalid/\"\nbearer_token_env_var = \"TOKEN\"\nenabled_tools = [\"search\"]\ndefault_tools_approval_mode = \"writes\"\n[tool_mcp_servers.web.tools.search]\napproval_mode = \"prompt\"\n",
		"schema_version = 8\n[tool_mcp_servers.s]\ntransport = \"stdio\"\ncommand = \"true\"\nargs = [\"--x\"]\ncwd = \"/tmp\"\nenv = { MODE = \"fast\" }\nenv_vars = [\"HOME\"]\nsandbox = true\nnetwork = false\nenabled_tools = [\"t\"]\ndefault_tools_approval_mode = \"approve\"\nstartup_timeout_sec = 5\ntool_timeout_sec = 9\n",
		"schema_version = 8\n[tool_mcp_servers.x]\ntransport = \"stdio\"\ncommand = \"/bin/true\"\nenv = { API_KEY = \"sk-123\" }\nenabled_tools = []\n",
		"schema_version = 7\n",
		"[[[",
		"schema_version = 8\n[tool_mcp_servers.\"a.b\"]\n",
	} {
		f.Add([]byte(s))
	}
	idRE := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		servers, err := ParseFragment("fuzz.toml", data, Options{})
		if err != nil {
			if _, ok := errors.AsType[*Error](err); !ok {
				t.Fatalf("error %v carries no *Error", err)
			}
			return
		}
		for _, s := range servers {
			if !idRE.MatchString(s.ID) || len(s.ID) > 32 || strings.Contains(s.ID, "__") {
				t.Fatalf("accepted id %q", s.ID)
			}
			if len(s.EnabledTools) == 0 {
				t.Fatalf("accepted an empty allowlist for %s", s.ID)
			}
			if _, err := ParseApprovalMode(string(s.DefaultApproval)); err != nil {
				t.Fatalf("accepted approval mode %q", s.DefaultApproval)
			}
			switch s.Transport {
			case TransportStdio:
				if !filepath.IsAbs(s.Command) || s.URL != "" || s.BearerTokenEnvVar != "" {
					t.Fatalf("accepted stdio server %+v", s)
				}
			case TransportStreamableHTTP:
				if s.URL == "" || s.Command != "" {
					t.Fatalf("accepted http server %+v", s)
				}
			default:
				t.Fatalf("accepted transport %q", s.Transport)
			}
			for k, v := range s.Env {
				if _, bad := credentialName(k); bad {
					t.Fatalf("accepted credential-named literal env %q", k)
				}
				if _, bad := credentialValue(v); bad {
					t.Fatalf("accepted credential-looking literal env value for %q", k)
				}
			}
			for k, v := range s.Headers {
				if _, bad := credentialValue(v); bad {
					t.Fatalf("accepted credential-looking header %q", k)
				}
			}
			if s.Network && !s.Sandbox {
				t.Fatalf("accepted network without the sandbox: %+v", s)
			}
		}
	})
}
