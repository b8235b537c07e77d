package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// teamPolicy permits alice two tools and bob one read-class tool; carol
// (OAuth, scope web) may scrape docs.example.com, never more than 64 KiB.
const teamPolicy = `@id("alice-two-tools")
permit (principal == Principal::"alice", action, resource)
when { [Tool::"hello", Tool::"sbx"].contains(resource) };

@id("bob-read")
permit (principal == Principal::"bob", action, resource == Tool::"hello")
when { resource.class == "read" };

@id("carol-scrapes-docs")
permit (principal == Principal::"carol", action, resource == Tool::"firecrawl__scrape")
when {
  principal.auth == "oauth" && principal.scopes.contains("web") &&
  (action == Action::"list" ||
   (context.arguments.hasTag("url") && context.arguments.getTag("url").text like "https://docs.example.com/*"))
};

@id("no-big-pages")
forbid (principal, action == Action::"call", resource)
when { resource.network && context.arguments.hasTag("max_bytes") &&
  (if context.arguments.getTag("max_bytes") has long then context.arguments.getTag("max_bytes").long > 65536 else true) };
`

// TestPolicyCheck: policy check explains each decision of the team
// policy (allowed by which policy, denied by which, or by none), with
// the principal's and the tool's attributes as serve would give them, and
// refuses a malformed policy with its line.
// policyFixture is a tools.conf (hello read, sbx test, other read), the
// registry of TestRegistryCommandGolden ("good": firecrawl__scrape over
// HTTP), the team policy and a token file giving alice two scopes.
type policyFixture struct {
	conf, regDir, policy, tokens, dir string
}

func newPolicyFixture(t *testing.T) policyFixture {
	t.Helper()
	setRegistryEnv(t)
	root := newRegistryFixture(t, "good")
	confPath, _ := checkFixture(t, "tool hello EXE read 20 4096 off DIR -- hi\ntool sbx EXE test 20 4096 on DIR --\ntool other EXE read 20 4096 off DIR --\n")
	dir := t.TempDir()
	f := policyFixture{conf: confPath, regDir: filepath.Join(root, "tool-mcp.d"), policy: filepath.Join(dir, "team.cedar"), tokens: filepath.Join(dir, "tokens"), dir: dir}
	for p, text := range map[string]string{f.policy: teamPolicy, f.tokens: "alice sha256:" + strings.Repeat("a", 64) + " tools.read tools.test\n"} {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestPolicyCheck(t *testing.T) {
	f := newPolicyFixture(t)
	pol, tokens := f.policy, f.tokens
	base := []string{"policy", "check", "--policy", pol, "--conf", f.conf, "--tool-mcp-dir", f.regDir}
	head := "policy " + pol + ": 4 policies\n"
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // stdout after the policy line
	}{
		{
			"alice hello",
			[]string{"--principal", "alice", "--tool", "hello"},
			0,
			"principal Principal::\"alice\" {auth: \"token\", scopes: []}\ntool Tool::\"hello\" {kind: \"external\", class: \"read\", server: \"\", network: true}\n" +
				"list: allow, permitted by \"alice-two-tools\" (line 1)\ncall: allow, permitted by \"alice-two-tools\" (line 1)\n",
		},
		{
			"alice sbx, scopes from the token file",
			[]string{"--principal", "alice", "--tool", "sbx", "--auth-tokens", tokens},
			0,
			"principal Principal::\"alice\" {auth: \"token\", scopes: [\"tools.read\", \"tools.test\"]}\ntool Tool::\"sbx\" {kind: \"external\", class: \"test\", server: \"\", network: false}\n" +
				"list: allow, permitted by \"alice-two-tools\" (line 1)\ncall: allow, permitted by \"alice-two-tools\" (line 1)\n",
		},
		{
			"alice other",
			[]string{"--principal", "alice", "--tool", "other", "--action", "call"},
			1,
			"principal Principal::\"alice\" {auth: \"token\", scopes: []}\ntool Tool::\"other\" {kind: \"external\", class: \"read\", server: \"\", network: true}\n" +
				"call: deny: no policy permits it\n",
		},
		{
			"bob hello",
			[]string{"--principal", "bob", "--tool", "hello", "--action", "call"},
			0,
			"principal Principal::\"bob\" {auth: \"token\", scopes: []}\ntool Tool::\"hello\" {kind: \"external\", class: \"read\", server: \"\", network: true}\n" +
				"call: allow, permitted by \"bob-read\" (line 5)\n",
		},
		{
			"bob sbx",
			[]string{"--principal", "bob", "--tool", "sbx"},
			1,
			"principal Principal::\"bob\" {auth: \"token\", scopes: []}\ntool Tool::\"sbx\" {kind: \"external\", class: \"test\", server: \"\", network: false}\n" +
				"list: deny: no policy permits it\ncall: deny: no policy permits it\n",
		},
		{
			"bob checkpoint_status",
			[]string{"--principal", "bob", "--tool", "checkpoint_status"},
			0,
			"principal Principal::\"bob\" {auth: \"token\", scopes: []}\ntool Tool::\"checkpoint_status\" {kind: \"builtin\", class: \"\", server: \"\", network: false}\n" +
				"list: allow: checkpoint_status is always permitted (it is never off)\ncall: allow: checkpoint_status is always permitted (it is never off)\n",
		},
		{
			"stdio hello",
			[]string{"--principal", "stdio", "--tool", "hello", "--action", "list"},
			1,
			"principal Principal::\"stdio\" {auth: \"none\", scopes: []}\ntool Tool::\"hello\" {kind: \"external\", class: \"read\", server: \"\", network: true}\n" +
				"list: deny: no policy permits it\n",
		},
		{
			"carol scrapes the docs",
			[]string{
				"--principal", "carol", "--auth", "oauth", "--issuer", "https://issuer.test", "--client", "agent-1", "--scopes", "web",
				"--tool", "firecrawl__scrape", "--arguments", `{"url":"https://docs.example.com/a","max_bytes":4096}`,
			},
			0,
			"principal Principal::\"carol\" {auth: \"oauth\", scopes: [\"web\"], issuer: \"https://issuer.test\", client: \"agent-1\"}\n" +
				"tool Tool::\"firecrawl__scrape\" {kind: \"downstream\", class: \"\", server: \"firecrawl\", network: true}\n" +
				"list: allow, permitted by \"carol-scrapes-docs\" (line 9)\ncall: allow, permitted by \"carol-scrapes-docs\" (line 9)\n",
		},
		{
			"carol scrapes elsewhere",
			[]string{
				"--principal", "carol", "--auth", "oauth", "--issuer", "https://issuer.test", "--scopes", "web",
				"--tool", "firecrawl__scrape", "--action", "call", "--arguments", `{"url":"https://evil.example/"}`,
			},
			1,
			"principal Principal::\"carol\" {auth: \"oauth\", scopes: [\"web\"], issuer: \"https://issuer.test\"}\n" +
				"tool Tool::\"firecrawl__scrape\" {kind: \"downstream\", class: \"\", server: \"firecrawl\", network: true}\n" +
				"call: deny: no policy permits it\n",
		},
		{
			"carol scrapes a big page",
			[]string{
				"--principal", "carol", "--auth", "oauth", "--issuer", "https://issuer.test", "--scopes", "web",
				"--tool", "firecrawl__scrape", "--action", "call", "--arguments", `{"url":"https://docs.example.com/a","max_bytes":1000000}`,
			},
			1,
			"principal Principal::\"carol\" {auth: \"oauth\", scopes: [\"web\"], issuer: \"https://issuer.test\"}\n" +
				"tool Tool::\"firecrawl__scrape\" {kind: \"downstream\", class: \"\", server: \"firecrawl\", network: true}\n" +
				"call: deny, forbidden by \"no-big-pages\" (line 17)\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append(append([]string(nil), base...), tc.args...), nil, &out, &errb)
			if code != tc.code || out.String() != head+tc.want {
				t.Errorf("toolgate policy check %s: exit %d, want %d\n--- stdout\n%s--- want\n%s%s--- stderr\n%s", strings.Join(tc.args, " "), code, tc.code, out.String(), head, tc.want, errb.String())
			}
		})
	}
}

// TestPolicyCheckRefuses: a policy that does not validate, or does not
// parse, is refused with its line (exit 2), as is a question that cannot
// be asked.
func TestPolicyCheckRefuses(t *testing.T) {
	f := newPolicyFixture(t)
	pol, confPath, regDir := f.policy, f.conf, f.regDir
	bad := filepath.Join(f.dir, "bad.cedar")
	if err := os.WriteFile(bad, []byte("@id(\"ok\")\npermit (principal, action, resource);\n@id(\"owner\")\npermit (principal, action, resource) when { resource.owner == \"alice\" };\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	malformed := filepath.Join(f.dir, "malformed.cedar")
	if err := os.WriteFile(malformed, []byte("permit (principal, action, resource);\npermit (principal action, resource);\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{
			"a policy that does not validate",
			[]string{"--policy", bad, "--principal", "alice", "--tool", "hello"},
			"toolgate policy check: the policy file is refused:\n" + bad + ":3:1: policy \"owner\": does not validate against toolgate's schema: attribute `owner` on entity type `Tool` not found\n",
		},
		{
			"a malformed policy",
			[]string{"--policy", malformed, "--principal", "alice", "--tool", "hello"},
			"toolgate policy check: the policy file is refused:\n" + malformed + ":2:25: does not parse: \",\": exact got action want ,\n",
		},
		{
			"a tool not served",
			[]string{"--policy", pol, "--principal", "alice", "--tool", "nope"},
			"toolgate policy check: tool \"nope\" is not served: not a built-in, not in tools.conf (tools.conf " + confPath + " is loaded), not an enabled tool of the registry " + regDir + "\n",
		},
		{"no principal", []string{"--policy", pol, "--tool", "hello"}, "toolgate policy check: --policy, --principal and --tool are required\n"},
		{
			"oauth without issuer",
			[]string{"--policy", pol, "--principal", "carol", "--auth", "oauth", "--tool", "hello"},
			"toolgate policy check: --auth oauth needs --issuer: every OAuth principal has one\n",
		},
		{
			"a bad action",
			[]string{"--policy", pol, "--principal", "alice", "--tool", "hello", "--action", "run"},
			"toolgate policy check: --action: action \"run\": want \"list\" or \"call\"\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"policy", "check", "--conf", confPath, "--tool-mcp-dir", regDir}, tc.args...)
			if code := run(args, nil, &out, &errb); code != 2 || errb.String() != tc.want || out.Len() != 0 {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 2 and:\n%s", code, out.String(), errb.String(), tc.want)
			}
		})
	}
}

// TestServePolicyRefused: serve refuses to start with a policy file that
// does not parse or validate (its line and reason), one others can
// write, or one beside --tool-scope; nothing is served.
func TestServePolicyRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.cedar", "permit (principal, action, resource);\n", 0o600)
	malformed := write("malformed.cedar", "permit (principal, action, resource);\nforbid (principal action, resource);\n", 0o600)
	invalid := write("invalid.cedar", "\n\n@id(\"roles\")\npermit (principal, action, resource) when { principal.role == \"admin\" };\n", 0o600)
	open := write("open.cedar", "permit (principal, action, resource);\n", 0o666)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"malformed", []string{"--policy", malformed}, "toolgate serve: --policy refused:\n" + malformed + ":2:25: does not parse: \",\": exact got action want ,\n"},
		{"unknown attribute", []string{"--policy", invalid}, "toolgate serve: --policy refused:\n" + invalid + ":3:1: policy \"roles\": does not validate against toolgate's schema: attribute `role` on entity type `Principal` not found\n"},
		{"writable by others", []string{"--policy", open}, "toolgate serve: --policy refused:\n" + open + ": file: group- or world-writable (mode 0666): anyone who can write the policy file decides what toolgate runs; chmod go-w " + open + "\n"},
		{
			"beside --tool-scope",
			[]string{"--policy", good, "--listen", "127.0.0.1:0", "--auth-tokens", "/nonexistent", "--tool-scope", "s=hello"},
			"toolgate serve: --tool-scope and --policy: give one; --tool-scope is a shorthand for policies (docs/policy.md), write its scopes in the policy file\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"serve", "--conf", filepath.Join(dir, "absent.conf")}, tc.args...), strings.NewReader(""), &out, &errb)
			if code != 2 || errb.String() != tc.want || out.Len() != 0 {
				t.Errorf("serve %s: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and:\n%s", strings.Join(tc.args, " "), code, out.String(), errb.String(), tc.want)
			}
		})
	}
}
