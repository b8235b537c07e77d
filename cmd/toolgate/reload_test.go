package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/internal/kubevol"
	"github.com/toolgate/toolgate/internal/mcptest"
	"github.com/toolgate/toolgate/internal/testbin"
	"github.com/toolgate/toolgate/policy"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/status"
)

// reloadFixture is a served tools.conf, token file and policy file, and
// the reloader of them.
type reloadFixture struct {
	conf, tokens, policy string
	exe, dir             string
	r                    *reloader
	srv                  *server.Server
	c                    *client.Client
}

func tokenLine(name, token string) string {
	sum := sha256.Sum256([]byte(token))
	return name + " sha256:" + hex.EncodeToString(sum[:]) + "\n"
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newReloadFixture(t *testing.T) *reloadFixture {
	t.Helper()
	confPath, _ := checkFixture(t, "tool hello EXE read 20 4096 off DIR -- hi\ntool other EXE read 20 4096 off DIR --\n")
	dir := t.TempDir()
	f := &reloadFixture{
		conf: confPath, tokens: filepath.Join(dir, "tokens"), policy: filepath.Join(dir, "policy.cedar"),
		exe: filepath.Join(filepath.Dir(confPath), "lint"), dir: filepath.Dir(confPath),
	}
	writeFile(t, f.tokens, tokenLine("alice", "alice-token"))
	writeFile(t, f.policy, "@id(\"all\")\npermit (principal, action, resource);\n")
	log := logrus.New()
	log.SetOutput(io.Discard)
	opts := conf.Options{Builtins: nil}
	c := conf.Load(f.conf, opts)
	if c.State != conf.StateLoaded {
		t.Fatalf("conf %s: %v", c.State, c.Errors)
	}
	tokens, err := conf.LoadTokens(f.tokens)
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.Load(f.policy)
	if err != nil {
		t.Fatal(err)
	}
	a := &app{log: log, conf: c, opts: server.Options{
		Conf: c, Policy: e, Log: log, Audit: log,
		Sandbox: rt.FailedSandbox("bwrap", errors.New("not in this test")),
	}}
	f.srv = server.New(a.opts)
	f.r = &reloader{
		a: a, srv: f.srv, log: log, tokens: auth.NewStaticTokens(tokens), confOpts: opts,
		paths: map[string]string{fileConf: f.conf, fileTokens: f.tokens, filePolicy: f.policy},
		conf:  c, policy: e, sums: map[string][sha256.Size]byte{}, registry: make(chan string, 1),
	}
	for name := range f.r.paths {
		f.r.sums[name] = f.r.sum(name)
	}
	f.c, err = client.NewInProcessClient(f.srv.MCP())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := f.c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = "2025-06-18"
	if _, err := f.c.Initialize(ctx, req); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.c.Close() })
	return f
}

func (f *reloadFixture) names(t *testing.T) string {
	t.Helper()
	return strings.Join(mcptest.Names(t, f.c), ",")
}

func (f *reloadFixture) status(t *testing.T) status.Report {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = "checkpoint_status"
	res, err := f.c.CallTool(context.Background(), req)
	if err != nil || res.IsError {
		t.Fatalf("checkpoint_status: %v %v", err, res)
	}
	var st status.Report
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func (f *reloadFixture) authenticates(token string) string {
	p, err := f.r.tokens.Authenticate(context.Background(), token)
	if err != nil {
		return "refused"
	}
	return p.Name
}

// TestReloadFiles: each file re-read on a change is applied, and a
// refused one keeps what was served (tokens, policy) or fails closed
// (tools.conf); checkpoint_status names each reload and refusal.
func TestReloadFiles(t *testing.T) {
	f := newReloadFixture(t)
	if got := f.names(t); got != "checkpoint_status,hello,other" {
		t.Fatalf("tools/list = %s", got)
	}

	f.r.reload("watch") // nothing changed: no reload
	if st := f.status(t); st.Reload != nil {
		t.Errorf("a reload with nothing changed: %+v", st.Reload)
	}

	writeFile(t, f.tokens, tokenLine("bob", "bob-token"))
	f.r.reload("watch")
	if a, b := f.authenticates("alice-token"), f.authenticates("bob-token"); a != "refused" || b != "bob" {
		t.Errorf("after the token reload: alice's token %s, bob's %s; want refused, bob", a, b)
	}
	writeFile(t, f.tokens, "bob not-a-digest\n")
	f.r.reload("watch")
	if b := f.authenticates("bob-token"); b != "bob" {
		t.Errorf("after a refused token file: bob's token %s, want bob (the old tokens kept)", b)
	}
	st := f.status(t)
	if st.Reload == nil || st.Reload.Generation != 2 || len(st.Reload.Refused) != 1 ||
		st.Reload.Refused[0].File != fileTokens || st.Reload.Refused[0].Effect != effectTokens {
		t.Errorf("status after a refused token file: %+v", st.Reload)
	}

	writeFile(t, f.policy, "@id(\"hello-only\")\npermit (principal, action, resource == Tool::\"hello\");\n")
	f.r.reload("watch")
	if got := f.names(t); got != "checkpoint_status,hello" {
		t.Errorf("tools/list after the policy reload = %s, want checkpoint_status,hello", got)
	}
	writeFile(t, f.policy, "permit (principal action, resource);\n")
	f.r.reload("watch")
	if got := f.names(t); got != "checkpoint_status,hello" {
		t.Errorf("tools/list after a refused policy = %s, want checkpoint_status,hello (the last good policy)", got)
	}
	if st := f.status(t); len(st.Reload.Refused) != 1 || st.Reload.Refused[0].File != filePolicy || !strings.Contains(st.Reload.Refused[0].Reason, "does not parse") {
		t.Errorf("status after a refused policy: %+v", st.Reload)
	}

	writeFile(t, f.policy, "@id(\"all\")\npermit (principal, action, resource);\n")
	writeFile(t, f.conf, strings.NewReplacer("EXE", f.exe, "DIR", f.dir).Replace("tool hello EXE read 20 4096 off DIR -- hi\ntool bad /bin/bash read 1 1 off DIR --\n"))
	f.r.reload("sighup")
	if got := f.names(t); got != "checkpoint_status" {
		t.Errorf("tools/list after a refused tools.conf = %s, want checkpoint_status alone (fail closed)", got)
	}
	st = f.status(t)
	if st.Conf.State != "refused" || st.Reload.Trigger != "sighup" || strings.Join(st.Reload.Changed, ",") != "tools.conf,tokens,policy" ||
		len(st.Reload.Refused) != 2 || st.Reload.Refused[0].File != fileConf || st.Reload.Refused[0].Effect != conf.RefusedEffect {
		t.Errorf("status after a refused tools.conf: conf %s, reload %+v", st.Conf.State, st.Reload)
	}
}

// TestReloadConfigMapSwap: tools.conf and the policy in a ConfigMap
// volume (the kubelet's layout, internal/kubevol) are reloaded by the
// watch when the kubelet's atomic writer swaps `..data`.
func TestReloadConfigMapSwap(t *testing.T) {
	if os.Geteuid() != 0 {
		testbin.Missing(t, "the kubelet's layout chowns to fsGroup, and needs root (uid %d)", os.Geteuid())
	}
	f := newReloadFixture(t)
	vol := t.TempDir()
	text := func(tools string) string { return strings.NewReplacer("EXE", f.exe, "DIR", f.dir).Replace(tools) }
	// The kubelet's layout with trusted modes (kubevol.Volume's fsGroup
	// modes make the directory world-writable, which only a read-only
	// mount makes trusted; the swap is the same).
	ts := filepath.Join(vol, kubevol.TSDir)
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"tools.conf": text("tool hello EXE read 20 4096 off DIR -- hi\n"), "policy.cedar": "permit (principal, action, resource);\n"} {
		writeFile(t, filepath.Join(ts, name), body)
		kubevol.Must(t, os.Symlink(filepath.Join("..data", name), filepath.Join(vol, name)))
	}
	kubevol.Must(t, os.Symlink(kubevol.TSDir, filepath.Join(vol, "..data")))
	f.r.paths[fileConf], f.r.paths[filePolicy] = filepath.Join(vol, "tools.conf"), filepath.Join(vol, "policy.cedar")
	f.r.reload("sighup")
	if got := f.names(t); got != "checkpoint_status,hello" {
		t.Fatalf("tools/list from the volume = %s (%+v)", got, f.status(t).Reload)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.r.run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	time.Sleep(100 * time.Millisecond) // the watch is set up
	kubevol.Update(t, vol, "..2026_12_02_10_05_00.000000001", map[string]string{
		"tools.conf":   text("tool hello EXE read 20 4096 off DIR -- hi\ntool fresh EXE read 20 4096 off DIR --\n"),
		"policy.cedar": "@id(\"not-hello\")\npermit (principal, action, resource) unless { resource == Tool::\"hello\" };\n",
	}, 0o644)
	deadline := time.Now().Add(10 * time.Second)
	for f.names(t) != "checkpoint_status,fresh" {
		if time.Now().After(deadline) {
			t.Fatalf("tools/list 10 s after the ..data swap = %s, want checkpoint_status,fresh", f.names(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := f.status(t)
	if st.Reload.Trigger != "watch" || strings.Join(st.Reload.Changed, ",") != "tools.conf,policy" || len(st.Reload.Refused) != 0 {
		t.Errorf("checkpoint_status reload after the swap: %+v", st.Reload)
	}
}

// probeServer is a registry fragment of the probe's MCP server (run
// unsandboxed, from the host) under id, serving tools.
func probeServer(t *testing.T, id, tools string) string {
	return fmt.Sprintf(`schema_version = 8

[tool_mcp_servers.%s]
transport = "stdio"
command = %q
args = ["mcp"]
sandbox = false
enabled_tools = [%s]
default_tools_approval_mode = "auto"
startup_timeout_sec = 30
`, id, testbin.Probe(t), tools)
}

// TestReloadRegistryConfigMapSwap: the registry directory as a ConfigMap
// volume (the kubelet's layout, trusted modes): the kubelet's `..data`
// swap that changes one server's fragment and adds another is seen by
// the watch, and the next tools/list serves the new registry.
func TestReloadRegistryConfigMapSwap(t *testing.T) {
	if os.Geteuid() != 0 {
		testbin.Missing(t, "the kubelet's layout chowns to fsGroup, and needs root (uid %d)", os.Geteuid())
	}
	f := newReloadFixture(t)
	vol := t.TempDir()
	ts := filepath.Join(vol, kubevol.TSDir)
	kubevol.Must(t, os.Mkdir(ts, 0o755))
	writeFile(t, filepath.Join(ts, "10-a.toml"), probeServer(t, "a", `"echo"`))
	kubevol.Must(t, os.Symlink(filepath.Join("..data", "10-a.toml"), filepath.Join(vol, "10-a.toml")),
		os.Symlink(kubevol.TSDir, filepath.Join(vol, "..data")))
	f.r.paths[fileRegistry] = vol
	f.r.sums[fileRegistry] = f.r.sum(fileRegistry)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg := f.r.loadRegistry(registry.TakenNames(nil, f.r.conf), f.r.conf)
	if reg.State != conf.StateLoaded {
		t.Fatalf("registry %s: %v", reg.State, reg.Err())
	}
	f.srv.ConnectDownstream(ctx, gateway.Options{Registry: reg, DirectServices: &rt.DirectServices{Shim: testbin.Shim(t)}})
	t.Cleanup(f.srv.Close)
	if got := f.names(t); got != "checkpoint_status,hello,other,a__echo" {
		t.Fatalf("tools/list from the volume = %s", got)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.r.run(wctx, nil) }()
	t.Cleanup(func() { wcancel(); <-done })
	time.Sleep(100 * time.Millisecond) // the watch is set up
	kubevol.Update(t, vol, "..2026_12_02_10_05_00.000000001", map[string]string{
		"10-a.toml": probeServer(t, "a", `"echo", "pid"`),
		"20-b.toml": probeServer(t, "b", `"echo"`),
	}, 0o644)
	want := "checkpoint_status,hello,other,a__echo,a__pid,b__echo"
	for deadline := time.Now().Add(20 * time.Second); f.names(t) != want; {
		if time.Now().After(deadline) {
			t.Fatalf("tools/list 20 s after the ..data swap = %s, want %s", f.names(t), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := f.status(t)
	if st.Reload.Trigger != "watch" || strings.Join(st.Reload.Changed, ",") != fileRegistry || len(st.Reload.Refused) != 0 ||
		fmt.Sprint(st.Reload.Added, st.Reload.Replaced) != "[a__pid b__echo] [a__echo]" {
		t.Errorf("checkpoint_status reload after the swap: %+v", st.Reload)
	}
	if st.Registry == nil || st.Registry.State != string(conf.StateLoaded) || len(st.Registry.Servers) != 2 {
		t.Errorf("checkpoint_status registry after the swap: %+v", st.Registry)
	}
}

// TestReloadWatchQuietWithoutConfDir: the default tools.conf's directory
// need not exist (built-ins only): the watch skips it without a word at
// the default level (stderr is the client's error log), and watches the
// rest.
func TestReloadWatchQuietWithoutConfDir(t *testing.T) {
	f := newReloadFixture(t)
	var buf testbin.Buffer
	f.r.log.SetOutput(&buf)
	f.r.log.SetLevel(logrus.InfoLevel)
	f.r.paths[fileConf] = "/nonexistent/toolgate/tools.conf"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.r.run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	time.Sleep(100 * time.Millisecond) // the watch is set up
	writeFile(t, f.tokens, tokenLine("bob", "bob-token"))
	deadline := time.Now().Add(10 * time.Second)
	for f.authenticates("bob-token") != "bob" {
		if time.Now().After(deadline) {
			t.Fatal("the token file was not reloaded within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := buf.String(); strings.Contains(got, "level=error") || strings.Contains(got, "level=warn") {
		t.Errorf("log at the default level:\n%s\nwant no warning or error", got)
	}
}

// TestReloadSumNeverBlocks: a FIFO where tools.conf was, or among the
// registry's fragments, is summed without blocking the reloader (opening
// a FIFO to read waits for a writer), and differs from a file.
func TestReloadSumNeverBlocks(t *testing.T) {
	f := newReloadFixture(t)
	reg := t.TempDir()
	f.r.paths[fileRegistry] = reg
	before := f.r.sum(fileRegistry)
	for _, p := range []string{filepath.Join(reg, "10-a.toml"), f.conf} {
		_ = os.Remove(p)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan [2][sha256.Size]byte, 1)
	go func() { done <- [2][sha256.Size]byte{f.r.sum(fileRegistry), f.r.sum(fileConf)} }()
	select {
	case sums := <-done:
		if sums[0] == before {
			t.Error("the registry's sum did not change with a FIFO added")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("summing a FIFO blocked")
	}
	f.r.reload("watch") // refuses the FIFO conf, and returns
	if st := f.status(t); st.Conf.State != "refused" {
		t.Errorf("conf with a FIFO for tools.conf: %s, want refused", st.Conf.State)
	}
}

// TestReloadConfRechecksRegistry: at start, a tools.conf tool whose
// sandbox dir holds a downstream server's egress_credentials secret file
// refuses the registry (secretsBound); a tools.conf-only reload (watch)
// reads the registry again beside the new conf and refuses the same.
func TestReloadConfRechecksRegistry(t *testing.T) {
	if os.Geteuid() != 0 {
		testbin.Missing(t, "secret files are trusted as the registry is: needs root")
	}
	f := newReloadFixture(t)
	keys := filepath.Join(testbin.Dir(t), "keys")
	if err := os.Mkdir(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(keys, "api")
	writeFile(t, key, "Bearer sk-review-1\n")
	dir := filepath.Join(t.TempDir(), "reg.d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	frag := "schema_version = 8\n[tool_mcp_servers.api]\ntransport = \"stdio\"\ncommand = \"" + f.exe + "\"\ncwd = \"" + f.dir +
		"\"\nenabled_tools = [\"q\"]\ndefault_tools_approval_mode = \"auto\"\nstartup_timeout_sec = 5\ntool_timeout_sec = 5\n" +
		"allowed_hosts = [\"api.example.com:443\"]\n[tool_mcp_servers.api.egress_credentials.\"api.example.com:443\"]\nheader = \"Authorization\"\nsecret_file = \"" + key + "\"\n"
	if err := os.WriteFile(filepath.Join(dir, "10-api.toml"), []byte(frag), 0o644); err != nil {
		t.Fatal(err)
	}
	f.r.paths[fileRegistry] = dir
	f.r.sums[fileRegistry] = f.r.sum(fileRegistry)
	reg := f.r.loadRegistry(registry.TakenNames(nil, f.r.conf), f.r.conf)
	if reg.State != conf.StateLoaded {
		t.Fatalf("registry %s: %v", reg.State, reg.Err())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f.srv.ConnectDownstream(ctx, gateway.Options{Registry: reg})
	t.Cleanup(f.srv.Close)

	old, err := os.ReadFile(f.conf)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, f.conf, string(old)+"tool peek "+f.exe+" test 20 4096 on "+filepath.Dir(keys)+" --\n")
	atStart := registry.Load(dir, registry.Options{Conf: conf.Load(f.conf, f.r.confOpts), Visible: sandboxVisible})
	if atStart.State != conf.StateRefused {
		t.Fatalf("a start with this tools.conf: registry %s, want refused", atStart.State)
	}
	f.r.reload("watch")
	if _, ok := f.srv.ReloadRegistry(<-f.r.registry, f.r.loadRegistry); !ok {
		t.Error("the registry was not reloaded beside the conf")
	}
	st := f.status(t)
	if st.Registry.State != string(conf.StateRefused) || strings.Contains(f.names(t), "api__") {
		t.Errorf("after the reload: tools %s, registry %s: want the registry refused (peek's sandbox binds %s, which holds server api's secret), as a start does",
			f.names(t), st.Registry.State, filepath.Dir(keys))
	}
}
