//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/internal/testbin"
)

// The agents suite: the real Codex, Claude Code and OpenCode CLIs (npm,
// installed by scripts/agent-clis.sh) drive toolgate, started by the
// client entry of docs/clients.md, against a scripted model (model_test.go) that
// the test serves inside the client's own network namespace (netns_test.go:
// only lo, so telemetry and update checks go nowhere). Each client gets a
// fresh HOME. What is asserted is what the model received: the tool result
// the client put in front of it, for each kind of tool toolgate serves.

// agentsDirEnv names where scripts/agent-clis.sh installs the CLIs.
const agentsDirEnv = "TOOLGATE_AGENTS_DIR"

// missingDep skips the test loudly, or fails it under TOOLGATE_REQUIRE_ALL=1.
func missingDep(t *testing.T, format string, a ...any) {
	t.Helper()
	testbin.Missing(t, format, a...)
}

// agentClient is one agent CLI: how to configure and run it.
type agentClient struct {
	name string // docs/clients.md key: codex, claude, opencode
	pkg  string // the pinned npm package (scripts/agent-clis.sh)
	bin  string // its command in node_modules/.bin
	wire wire
	// prefix is what the client puts before toolgate's tool names
	// (server name "toolgate").
	prefix string
	// command writes the client's configuration into s.home (the model
	// provider, and entry: docs/clients.md's MCP entry for toolgate, verbatim
	// but for paths) and returns its argv and extra environment.
	command func(t *testing.T, s *agentSession, entry string) (argv, env []string)
}

// agentSession is one run of a client.
type agentSession struct {
	exe     string // the client's executable
	home    string // its fresh HOME
	ws      string // the workspace, its working directory
	baseURL string // the scripted model: http://127.0.0.1:PORT
	prompt  string
}

var agentClients = []agentClient{
	{
		name: "codex", pkg: "@openai/codex@0.169.0", bin: "codex", wire: wireResponses,
		// Codex 0.169 sends an MCP server's tools as one namespace
		// (mcp__toolgate) of tools named as the server names them; the
		// model-visible name is namespace__tool.
		prefix: "mcp__toolgate__",
		command: func(t *testing.T, s *agentSession, entry string) ([]string, []string) {
			provider := fmt.Sprintf(`model = "toolgate-scripted"
model_provider = "scripted"

[model_providers.scripted]
name = "scripted model of the toolgate e2e suite"
base_url = "%s/v1"
env_key = "TOOLGATE_E2E_MODEL_KEY"
wire_api = "responses"

`, s.baseURL)
			writeFile(t, filepath.Join(s.home, ".codex", "config.toml"), provider+entry)
			return []string{s.exe, "exec", "--skip-git-repo-check", s.prompt}, []string{"TOOLGATE_E2E_MODEL_KEY=dummy"}
		},
	},
	{
		name: "claude", pkg: "@anthropic-ai/claude-code@2.1.328", bin: "claude", wire: wireMessages,
		prefix: "mcp__toolgate__",
		command: func(t *testing.T, s *agentSession, entry string) ([]string, []string) {
			cfg := filepath.Join(s.home, "mcp.json")
			writeFile(t, cfg, entry)
			return []string{s.exe, "-p", s.prompt, "--mcp-config", cfg, "--strict-mcp-config", "--allowedTools", "mcp__toolgate"},
				[]string{
					"ANTHROPIC_BASE_URL=" + s.baseURL,
					"ANTHROPIC_API_KEY=dummy",
					"ENABLE_TOOL_SEARCH=false", // the MCP tools' schemas in the request itself
					"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
				}
		},
	},
	{
		name: "opencode", pkg: "opencode-ai@1.18.33", bin: "opencode", wire: wireChat,
		prefix: "toolgate_",
		command: func(t *testing.T, s *agentSession, entry string) ([]string, []string) {
			// The provider in the global config, docs/clients.md's entry as
			// the file OPENCODE_CONFIG names: OpenCode merges both.
			provider := fmt.Sprintf(`{
  "$schema": "https://opencode.ai/config.json",
  "provider": {
    "scripted": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "scripted model of the toolgate e2e suite",
      "options": {"baseURL": "%s/v1", "apiKey": "dummy"},
      "models": {"toolgate-scripted": {"name": "toolgate-scripted"}}
    }
  },
  "model": "scripted/toolgate-scripted",
  "autoupdate": false,
  "share": "disabled"
}
`, s.baseURL)
			writeFile(t, filepath.Join(s.home, ".config", "opencode", "opencode.json"), provider)
			cfg := filepath.Join(s.home, "toolgate-entry.json")
			writeFile(t, cfg, entry)
			return []string{s.exe, "run", s.prompt}, []string{"OPENCODE_CONFIG=" + cfg}
		},
	},
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// agentExe returns the client's installed executable, or skips.
func agentExe(t *testing.T, c agentClient) string {
	t.Helper()
	dir := os.Getenv(agentsDirEnv)
	if dir == "" {
		dir = "/var/cache/toolgate/agents"
	}
	exe := filepath.Join(dir, "node_modules", ".bin", c.bin)
	out, err := exec.Command(exe, "--version").CombinedOutput()
	if err != nil {
		missingDep(t, "%s (%s) is not installed in %s or does not run (%v: %s): scripts/agent-clis.sh installs it", c.bin, c.pkg, dir, err, bytes.TrimSpace(out))
	}
	if v := c.pkg[strings.LastIndex(c.pkg, "@")+1:]; !strings.Contains(string(out), v) {
		missingDep(t, "%s in %s is %q, not the pinned %s: scripts/agent-clis.sh installs the pin", c.bin, dir, bytes.TrimSpace(out), c.pkg)
	}
	return exe
}

// npmEverything returns node's path and the npm dir holding
// @modelcontextprotocol/server-everything (scripts/npm-deps.sh), or skips.
func npmEverything(t *testing.T) (node, npmDir string) {
	t.Helper()
	npmDir = os.Getenv("TOOLGATE_NPM_DIR")
	if npmDir == "" {
		npmDir = "/var/cache/toolgate/npm"
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missingDep(t, "node is not installed: %v", err)
	}
	if node, err = filepath.EvalSymlinks(node); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(npmDir, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")); err != nil {
		missingDep(t, "@modelcontextprotocol/server-everything is not installed in %s (%v): scripts/npm-deps.sh installs it", npmDir, err)
	}
	return node, npmDir
}

// agentsImage is the image the image pass runs: the image under test plus
// node and server-everything (a downstream stdio server runs inside the
// container, so its executable must be in the image; docs/clients.md's advice:
// build an image FROM localhost/toolgate:dev).
var agentsImage struct {
	once sync.Once
	name string
	err  error
}

func agentsImageFor(t *testing.T, node, npmDir string) string {
	t.Helper()
	agentsImage.once.Do(func() {
		ctx, err := os.MkdirTemp("", "toolgate-agents-image-")
		if err != nil {
			agentsImage.err = err
			return
		}
		defer os.RemoveAll(ctx)
		containerfile := fmt.Sprintf("FROM %s\nCOPY node %s\nCOPY npm %s\n", image, node, npmDir)
		if err := os.WriteFile(filepath.Join(ctx, "Containerfile"), []byte(containerfile), 0o644); err != nil {
			agentsImage.err = err
			return
		}
		for _, c := range [][]string{{"cp", node, filepath.Join(ctx, "node")}, {"cp", "-a", npmDir, filepath.Join(ctx, "npm")}} {
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				agentsImage.err = fmt.Errorf("%v: %w: %s", c, err, out)
				return
			}
		}
		name := "localhost/toolgate-e2e-agents:latest"
		previous, _ := exec.Command(podman, "image", "inspect", "--format", "{{.Id}}", name).Output()
		out, err := exec.Command(podman, "build", "--quiet", "-t", name, "-f", filepath.Join(ctx, "Containerfile"), ctx).CombinedOutput()
		if err != nil {
			agentsImage.err = fmt.Errorf("podman build %s: %w: %s", name, err, out)
			return
		}
		if p := strings.TrimSpace(string(previous)); p != "" && p != strings.TrimSpace(string(out)) {
			exec.Command(podman, "rmi", p).Run() // the image it replaced; kept while in use
		}
		agentsImage.name = name
	})
	if agentsImage.err != nil {
		t.Fatalf("build the agents image: %v", agentsImage.err)
	}
	return agentsImage.name
}

// kindMarkers are the markers a session's tools print, unique per run.
type kindMarkers struct {
	read, sandboxed, failing, chunk, downstream string
}

// toolKind is one kind of tool the suite calls.
type toolKind struct {
	name string // for the log and the failure message
	call scriptCall
	// want is what the model must have received, each a substring of the
	// result's text (its strings, decoded).
	want []string
}

// TestAgentCodex, TestAgentClaudeCode, TestAgentOpenCode: one session per
// client against toolgate started by docs/clients.md's entry (the image entry
// on the image pass, the binary entry on the binary pass), in which the
// scripted model calls the five kinds of tool in turn: a read-class
// external, a sandboxed (bwrap) test-class external, a failing external, the
// repo_chunks built-in and a downstream MCP server's tool. The model must
// have received each one's output (and, for the failing one, that it
// failed).
func TestAgentCodex(t *testing.T)      { runAgent(t, agentClients[0]) }
func TestAgentClaudeCode(t *testing.T) { runAgent(t, agentClients[1]) }
func TestAgentOpenCode(t *testing.T)   { runAgent(t, agentClients[2]) }

func runAgent(t *testing.T, c agentClient) {
	requireTarget(t)
	exe := agentExe(t, c)
	node, npmDir := npmEverything(t)
	ns := newNetns(t)
	if ifs, err := ns.interfaces(); err != nil || !slices.Equal(ifs, []string{"lo"}) {
		t.Fatalf("the client's network namespace has interfaces %v (%v), want only lo", ifs, err)
	}

	tag := fmt.Sprintf("%s-%08x", c.name, rand.Uint32())
	mk := kindMarkers{
		read:       "tg-read-" + tag,
		sandboxed:  "tg-sandboxed-" + tag,
		failing:    "tg-failing-" + tag,
		chunk:      "tg-chunk-" + tag,
		downstream: "tg-downstream-" + tag,
	}

	// The workspace, owned by uid 1000 as the entries' --user 1000:1000
	// says, holding one file.
	ws := testbin.Dir(t)
	writeFile(t, filepath.Join(ws, "notes.txt"), "notes of the agents e2e suite\n"+mk.chunk+"\n")
	for _, p := range []string{ws, filepath.Join(ws, "notes.txt")} {
		if err := os.Chown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	toolDir := ws // where the tools run, as toolgate sees it
	if image != "" {
		toolDir = "/workspace"
	}

	// The host's /etc/saphira/mcp: tools.conf and the tool-MCP registry.
	confDir := testbin.Dir(t)
	writeFile(t, filepath.Join(confDir, "tools.conf"), fmt.Sprintf(`# agents e2e
tool readtool /bin/echo read 10 4096 off %[1]s -- %[2]s
tool sandtool /bin/echo test 10 4096 on %[1]s -- %[3]s
tool failtool /usr/bin/ls read 10 4096 off %[1]s -- /nonexistent/%[4]s
`, toolDir, mk.read, mk.sandboxed, mk.failing))
	writeFile(t, filepath.Join(confDir, "tool-mcp.d", "10-everything.toml"), fmt.Sprintf(`schema_version = 8

# @modelcontextprotocol/server-everything (npm), sandboxed, no network.
[tool_mcp_servers.everything]
transport = "stdio"
command = %[1]q
args = [%[2]q, "stdio"]
cwd = %[3]q
enabled_tools = ["echo"]
default_tools_approval_mode = "auto"
startup_timeout_sec = 60
tool_timeout_sec = 60
`, node, filepath.Join(npmDir, "node_modules/@modelcontextprotocol/server-everything/dist/index.js"), npmDir))

	// docs/clients.md's entry, paths replaced.
	seccomp, err := filepath.Abs("../images/seccomp.json")
	if err != nil {
		t.Fatal(err)
	}
	paths := readmePaths{Workspace: ws, ConfDir: confDir, Seccomp: seccomp, Toolgate: binary, ContainersConf: os.Getenv("CONTAINERS_CONF")}
	key := c.name + " binary"
	if image != "" {
		key = c.name + " image"
		paths.Image = agentsImageFor(t, node, npmDir)
		if paths.ContainersConf == "" {
			// docs/clients.md: drop the entry where scripts/image.sh printed
			// none. An empty containers.conf changes nothing either.
			paths.ContainersConf = filepath.Join(t.TempDir(), "containers.conf")
			writeFile(t, paths.ContainersConf, "")
		}
	}
	entry := readmeEntry(t, key, paths)

	kinds := []toolKind{
		{"read-class external", scriptCall{Tool: "readtool"}, []string{mk.read, "[exit=0 "}},
		{"sandboxed test-class external", scriptCall{Tool: "sandtool"}, []string{mk.sandboxed, "[exit=0 "}},
		// ls: cannot access '/nonexistent/MARKER': No such file or
		// directory, exit 2: the output and the failure (toolgate's
		// footer states the exit code).
		{"failing external", scriptCall{Tool: "failtool"}, []string{mk.failing, "No such file or directory", "[exit=2 "}},
		{"built-in repo_chunks", scriptCall{Tool: "repo_chunks", Args: map[string]any{"index": 1}}, []string{mk.chunk}},
		{"downstream MCP server's tool", scriptCall{Tool: "everything__echo", Args: map[string]any{"message": mk.downstream}}, []string{"Echo: " + mk.downstream}},
	}
	script := make([]scriptCall, len(kinds))
	for i, k := range kinds {
		script[i] = k.call
	}
	final := "FINAL-" + tag
	m, out := runSession(t, c, ns, exe, ws, entry, script, final)

	requests, results, problems := m.snapshot()
	for _, p := range problems {
		t.Errorf("scripted model: %s", p)
	}
	if len(requests) > 0 {
		var names []string
		for _, o := range requests[len(requests)-1].Tools {
			if strings.HasPrefix(o.Name, c.prefix) {
				names = append(names, o.Name)
			}
		}
		t.Logf("%s offered the model toolgate's tools as: %v", c.name, names)
	}
	for i, k := range kinds {
		r, ok := results[i]
		if !ok {
			t.Errorf("%s (%s): no result reached the model", k.name, k.call.Tool)
			continue
		}
		got := resultText(r.Raw)
		t.Logf("%s: the model called %q and received: %s", k.name, r.Called, clip(string(r.Raw), 700))
		for _, w := range k.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s (%s): the model did not receive %q; it received:\n%s", k.name, r.Called, w, r.Raw)
			}
		}
	}
	if !strings.Contains(out, final) {
		t.Errorf("%s did not print the model's final answer %q; its output:\n%s", c.name, final, clip(out, 3000))
	}
}

// runSession runs one client session against the scripted model and
// returns the model and the client's combined output.
func runSession(t *testing.T, c agentClient, ns *netns, exe, ws, entry string, script []scriptCall, final string) (*model, string) {
	t.Helper()
	return runSessionEnv(t, c, ns, exe, ws, entry, nil, script, final)
}

// runSessionEnv is runSession with extra environment for the client.
func runSessionEnv(t *testing.T, c agentClient, ns *netns, exe, ws, entry string, extraEnv []string, script []scriptCall, final string) (*model, string) {
	t.Helper()
	l := ns.listen(t)
	m := startModel(t, l, c.wire, c.prefix, script, final)
	s := &agentSession{
		exe: exe, home: t.TempDir(), ws: ws, baseURL: "http://" + l.Addr().String(),
		prompt: "Call each toolgate tool the operator configured, then summarise.",
	}
	argv, env := c.command(t, s, entry)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = ws
	cmd.Env = append([]string{
		"HOME=" + s.home,
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8",
		"TERM=dumb",
		"NO_COLOR=1",
	}, env...)
	cmd.Env = append(cmd.Env, extraEnv...)
	var outBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outBuf, &outBuf
	cmd.Stdin = nil
	// Its own process group, killed whole on timeout (the client's MCP
	// server and what that started).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	if err := ns.start(cmd); err != nil {
		t.Fatalf("start %s: %v", c.name, err)
	}
	err := cmd.Wait()
	t.Logf("%s session took %s", c.name, time.Since(start).Round(100*time.Millisecond))
	out := outBuf.String()
	if c.name == "opencode" {
		// Its provider package (@ai-sdk/openai-compatible) is bundled: a
		// run installs nothing (there is no network to install from).
		filepath.WalkDir(s.home, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && (d.Name() == "node_modules" || d.Name() == "@ai-sdk") {
				t.Errorf("opencode installed packages at run time: %s", p)
			}
			return nil
		})
	}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Errorf("%s did not finish within 4 minutes; its output:\n%s", c.name, clip(out, 4000))
	case errors.As(err, &ee):
		t.Errorf("%s exited %d; its output:\n%s", c.name, ee.ExitCode(), clip(out, 4000))
	case err != nil:
		t.Fatalf("%s: %v", c.name, err)
	}
	return m, out
}

// resultText is every string in a result's JSON, decoded and joined by
// newlines: the text the model reads, whatever the client's shape (a string
// output, content blocks, a tool message).
func resultText(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			b.WriteString(x)
			b.WriteByte('\n')
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(x[k])
			}
		}
	}
	walk(v)
	return b.String()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n/2] + fmt.Sprintf("\n… [%d bytes] …\n", len(s)-n) + s[len(s)-n/2:]
}

// nameProbes are the ids of registry entries whose served tool names
// (ID__trigger-long-running-operation, len(ID)+32 characters) put the
// clients' model-visible names at 64 characters and past it: Codex and
// Claude Code add "mcp__toolgate__" (15), OpenCode "toolgate_" (9), and the
// model APIs take 64 at most, so toolgate serves none past 49
// (registry.ClientNameIssue).
var nameProbes = []int{17, 18, 32}

func nameProbeID(n int) string {
	p := fmt.Sprintf("n%d", n)
	return p + strings.Repeat("x", n-len(p))
}

const probeTool = "trigger-long-running-operation"

// TestAgentClientRules measures, per client, on the binary target (the
// rules are the client's, whatever runs toolgate): the model-visible names
// of long downstream tool names (and their hyphens), what a call that
// outlives the client's tool-call timeout gives the model (with toolgate's
// progress notifications flowing), and whether the client waits for a
// server that is slow to start.
func TestAgentClientRules(t *testing.T) {
	if image != "" {
		t.Skipf("measures the clients, whatever runs toolgate: runs in the binary pass (this run: image %s)", image)
	}
	for _, c := range agentClients {
		t.Run(c.name, func(t *testing.T) {
			exe := agentExe(t, c)
			node, npmDir := npmEverything(t)
			everything := filepath.Join(npmDir, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")
			ws := testbin.Dir(t)
			writeFile(t, filepath.Join(ws, "notes.txt"), "notes\n")
			paths := readmePaths{Workspace: ws, Toolgate: binary}

			t.Run("names and timeout", func(t *testing.T) {
				confDir := testbin.Dir(t)
				paths := paths
				paths.ConfDir = confDir
				writeFile(t, filepath.Join(confDir, "tools.conf"), fmt.Sprintf("tool slowtool /usr/bin/sleep read 60 4096 off %s -- %d\n", ws, slowCallSec))
				var reg strings.Builder
				reg.WriteString("schema_version = 8\n")
				for _, n := range nameProbes {
					fmt.Fprintf(&reg, `
[tool_mcp_servers.%s]
transport = "stdio"
command = %q
args = [%q, "stdio"]
cwd = %q
enabled_tools = [%q]
default_tools_approval_mode = "auto"
startup_timeout_sec = 60
`, nameProbeID(n), node, everything, npmDir, probeTool)
				}
				writeFile(t, filepath.Join(confDir, "tool-mcp.d", "10-names.toml"), reg.String())
				entry := readmeEntry(t, c.name+" binary", paths)
				var env []string
				switch c.name {
				case "codex":
					entry = mustReplace(t, entry, "tool_timeout_sec = 3600", fmt.Sprintf("tool_timeout_sec = %d", clientTimeoutSec))
				case "claude":
					env = append(env, fmt.Sprintf("MCP_TOOL_TIMEOUT=%d", clientTimeoutSec*1000))
				case "opencode":
					entry = mustReplace(t, entry, `"timeout": 3600000`, fmt.Sprintf(`"timeout": %d`, clientTimeoutSec*1000))
				}
				longest := nameProbeID(nameProbes[0]) // the longest toolgate serves
				script := []scriptCall{
					{Tool: "slowtool"},
					{
						Tool: longest + "__" + probeTool, Args: map[string]any{"duration": 1, "steps": 1},
						Find: func(tools []offeredTool) (offeredTool, bool) {
							for _, o := range tools {
								if strings.Contains(o.Name, longest[:8]) {
									return o, true
								}
							}
							return offeredTool{}, false
						},
					},
				}
				ns := newNetns(t)
				m, _ := runSessionEnv(t, c, ns, exe, ws, entry, env, script, "FINAL")
				requests, results, problems := m.snapshot()
				for _, p := range problems {
					t.Errorf("scripted model: %s", p)
				}
				if len(requests) == 0 {
					t.Fatal("no request reached the model")
				}
				offered := map[int]string{}
				for _, o := range requests[len(requests)-1].Tools {
					for _, n := range nameProbes {
						if strings.Contains(o.Name, nameProbeID(n)[:4]) {
							offered[n] = o.Name
						}
					}
				}
				rule := clientRules[c.name]
				for _, n := range nameProbes {
					served := nameProbeID(n) + "__" + probeTool
					if _, refused := registry.ClientNameIssue(served); refused {
						if offered[n] != "" {
							t.Errorf("%q (%d characters) is past the cap, yet the model was offered %q", served, len(served), offered[n])
						}
						continue
					}
					t.Logf("served %q (%d): model-visible %q (%d)", served, len(served), offered[n], len(offered[n]))
					if want := rule.name(served); offered[n] != want || len(want) > registry.ClientNameMax {
						t.Errorf("served %q: model-visible %q, want %q of at most %d characters (the client's naming rule changed: update docs/clients.md and the name validation)",
							served, offered[n], want, registry.ClientNameMax)
					}
				}
				if r, ok := results[0]; !ok {
					t.Errorf("the slow call's result never reached the model")
				} else {
					t.Logf("a %d s call, client timeout %d s: the model received: %s", slowCallSec, clientTimeoutSec, clip(string(r.Raw), 600))
					if !strings.Contains(resultText(r.Raw), rule.slowCall) {
						t.Errorf("a %d s call under a %d s client timeout: the model received %s, want %q in it", slowCallSec, clientTimeoutSec, r.Raw, rule.slowCall)
					}
				}
				if r, ok := results[1]; !ok {
					t.Errorf("the longest name's result never reached the model")
				} else {
					t.Logf("the longest name, called as %q: the model received: %s", r.Called, clip(string(r.Raw), 600))
					if !strings.Contains(resultText(r.Raw), "Long running operation completed") {
						t.Errorf("the longest name, called as %q: the model received %s", r.Called, r.Raw)
					}
				}
			})

			// A downstream server that never answers initialize: toolgate's
			// tools/list waits for the downstream listing, until the
			// entry's startup timeout, 8 s. The entry of docs/clients.md must make the client wait;
			// for Codex, also the entry without required = true.
			variants := []struct {
				name  string
				strip string // removed from docs/clients.md's entry
				waits bool
			}{{"slow start, the documented entry", "", true}}
			if c.name == "codex" {
				variants = append(variants, struct {
					name  string
					strip string
					waits bool
				}{"slow start, without required", "required = true\n", false})
			}
			for _, v := range variants {
				t.Run(v.name, func(t *testing.T) {
					confDir := testbin.Dir(t)
					paths := paths
					paths.ConfDir = confDir
					writeFile(t, filepath.Join(confDir, "tools.conf"), fmt.Sprintf("tool readtool /bin/echo read 10 4096 off %s -- started\n", ws))
					writeFile(t, filepath.Join(confDir, "tool-mcp.d", "10-hang.toml"), `schema_version = 8
[tool_mcp_servers.hang]
transport = "stdio"
command = "/usr/bin/sleep"
args = ["600"]
enabled_tools = ["never"]
default_tools_approval_mode = "auto"
startup_timeout_sec = 8
`)
					entry := readmeEntry(t, c.name+" binary", paths)
					if v.strip != "" {
						entry = mustReplace(t, entry, v.strip, "")
					}
					ns := newNetns(t)
					start := time.Now()
					m, _ := runSession(t, c, ns, exe, ws, entry, []scriptCall{{Tool: "readtool"}}, "FINAL")
					requests, results, _ := m.snapshot()
					for i, r := range requests {
						ours := slices.ContainsFunc(r.Tools, func(o offeredTool) bool { return strings.HasPrefix(o.Name, c.prefix) })
						t.Logf("request %d (%s): offers toolgate's tools: %v", i, r.Path, ours)
					}
					_, ok := results[0]
					t.Logf("server 8 s slow to start, session %s: the model got the call's result: %v", time.Since(start).Round(100*time.Millisecond), ok)
					if ok != v.waits {
						t.Errorf("8 s slow server: the model got the tools %v, want %v (the client's start-up wait changed)", ok, v.waits)
					}
				})
			}
		})
	}
}

// clientRule is what a client measurably does (TestAgentClientRules).
type clientRule struct {
	// name is the model-visible name of a served tool name (at most 64
	// characters, toolgate's longest downstream name through
	// server-everything).
	name func(served string) string
	// slowCall is in what the model receives for a slowCallSec call
	// under a clientTimeoutSec client tool timeout, toolgate sending
	// progress every second.
	slowCall string
}

// The client tool timeout of TestAgentClientRules' names and timeout, and
// its slow call. The timeout also bounds the client's tools/list, which
// waits for the listing of three server-everything processes (node: 2.5 s
// of CPU each on a slow 2-core VM), and the longest name's call (its
// server started again, then a 1 s operation): the margins of a 2 s
// timeout were not enough there.
const (
	clientTimeoutSec = 15
	slowCallSec      = 25
)

var clientRules = map[string]clientRule{
	// Codex: namespace mcp__toolgate, the tool part sanitised to
	// [A-Za-z0-9_] ("-" becomes "_"); no cap met at 79 characters. The
	// timeout (tool_timeout_sec) is a hard limit: progress does not extend
	// it. Without required = true the first turn starts without a server
	// still starting.
	"codex": {
		name:     func(s string) string { return "mcp__toolgate__" + strings.ReplaceAll(s, "-", "_") },
		slowCall: fmt.Sprintf("timed out awaiting tools/call after %ds", clientTimeoutSec),
	},
	// Claude Code: mcp__toolgate__ + the name as served; no cap met at 79
	// characters. MCP_TOOL_TIMEOUT is a hard wall-clock limit. -p waits for
	// the server.
	"claude": {
		name:     func(s string) string { return "mcp__toolgate__" + s },
		slowCall: fmt.Sprintf(`MCP server "toolgate" tool "slowtool" timed out after %ds`, clientTimeoutSec),
	},
	// OpenCode: toolgate_ + the name as served; no cap met at 73
	// characters. The entry's timeout restarts on every progress
	// notification (resetTimeoutOnProgress), so the slow call completes.
	// `opencode run` waits for the server.
	"opencode": {
		name:     func(s string) string { return "toolgate_" + s },
		slowCall: "[exit=0 elapsed_ms=",
	},
}

func mustReplace(t *testing.T, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("%q not in:\n%s", old, s)
	}
	return strings.Replace(s, old, new, 1)
}
