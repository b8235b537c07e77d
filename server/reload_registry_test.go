package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/status"
)

// fakeServer is a registry entry of the fake server (unsandboxed) under
// id, serving tools.
func fakeServer(id string, tools ...string) string {
	quoted := make([]string, len(tools))
	for i, tool := range tools {
		quoted[i] = strconv.Quote(tool)
	}
	return fmt.Sprintf(`schema_version = 8

[tool_mcp_servers.%s]
transport = "stdio"
command = "SELF"
env = { TOOLGATE_FAKE_MCP = "1" }
sandbox = false
enabled_tools = [%s]
default_tools_approval_mode = "auto"
startup_timeout_sec = 20
tool_timeout_sec = 10
supports_parallel_tool_calls = true
`, id, strings.Join(quoted, ", "))
}

// registryDir is a registry directory a test rewrites: write replaces
// its fragments (name → text, SELF the test binary) and pins.
type registryDir struct {
	t   *testing.T
	dir string
}

func (d registryDir) write(fragments map[string]string, pins *registry.Pins) {
	d.t.Helper()
	self, err := os.Executable()
	if err != nil {
		d.t.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(d.dir, "*"))
	for _, p := range old {
		os.Remove(p)
	}
	for name, text := range fragments {
		if err := os.WriteFile(filepath.Join(d.dir, name), []byte(strings.ReplaceAll(text, "SELF", self)), 0o644); err != nil {
			d.t.Fatal(err)
		}
	}
	if pins != nil {
		b, err := registry.RenderPins(pins)
		if err != nil {
			d.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d.dir, registry.PinsFile), b, 0o644); err != nil {
			d.t.Fatal(err)
		}
	}
}

// reload reloads the registry of h as the directory holds it now.
func (d registryDir) reload(h *harness) status.Reload {
	rec, _ := h.s.ReloadRegistry("watch", d.load)
	return rec
}

// load is a RegistryLoader of the directory.
func (d registryDir) load(taken map[string]string, c *conf.Config) *registry.Registry {
	return registry.Load(d.dir, registry.Options{Taken: taken, Conf: c})
}

func pidOf(t *testing.T, h *harness, tool string) int {
	t.Helper()
	res := h.call(t, tool, nil)
	pid, err := strconv.Atoi(resultText(res))
	if err != nil || res.IsError {
		t.Fatalf("%s = %q: %v", tool, resultText(res), err)
	}
	return pid
}

// TestReloadRegistry: a reload of the registry keeps the server whose
// entry is unchanged running (the same process answers), replaces the
// one whose entry changed (a new process; its removed tool leaves
// tools/list) once its call in flight has finished under the old one,
// adds a new server's tools, and tells the session; the replaced
// server's process ends once its call has.
func TestReloadRegistry(t *testing.T) {
	d := registryDir{t, t.TempDir()}
	d.write(map[string]string{
		"10-fake.toml":  fakeServer("fake", "pid", "sleep", "writer"),
		"20-other.toml": fakeServer("other", "pid", "echo"),
	}, nil)
	r := registry.Load(d.dir, registry.Options{})
	if r.State != conf.StateLoaded {
		t.Fatalf("registry %s: %v", r.State, r.Err())
	}
	h := newHarness(t, Options{Conf: loadConf(t, twoTools)}, gateway.Options{Registry: r}, nil)
	changes := watchList(t, h.sess)
	otherPid, fakePid := pidOf(t, h, "other__pid"), pidOf(t, h, "fake__pid")

	inFlight := make(chan *mcp.CallToolResult, 1)
	go func() { inFlight <- h.call(t, "fake__sleep", map[string]any{"seconds": 1.5}) }()
	time.Sleep(300 * time.Millisecond) // the call is in the old fake
	d.write(map[string]string{
		"10-fake.toml":  fakeServer("fake", "pid", "sleep"),
		"20-other.toml": fakeServer("other", "pid", "echo"),
		"30-third.toml": fakeServer("third", "readonly"),
	}, nil)
	rec := d.reload(h)
	if got := fmt.Sprint(rec.Added, rec.Removed, rec.Replaced, rec.Refused); got != "[third__readonly] [fake__writer] [fake__pid fake__sleep] []" {
		t.Errorf("added, removed, replaced, refused = %s", got)
	}
	if res := <-inFlight; res.IsError || resultText(res) != "woke" {
		t.Errorf("the call in flight answered %q (isError %v), want the old server's answer", resultText(res), res.IsError)
	}
	want := []string{"checkpoint_status", "zeta", "alpha", "fake__pid", "fake__sleep", "other__pid", "other__echo", "third__readonly"}
	if got := listNames(t, h.sess); !slices.Equal(got, want) {
		t.Errorf("tools/list = %v\nwant %v", got, want)
	}
	if pid := pidOf(t, h, "other__pid"); pid != otherPid {
		t.Errorf("other, unchanged, answered from pid %d, want its running %d", pid, otherPid)
	}
	if pid := pidOf(t, h, "fake__pid"); pid == fakePid {
		t.Errorf("fake, changed, answered from the old process %d", pid)
	}
	if res, err := callTool(t, h.sess, "fake__writer", nil); err == nil && !res.IsError {
		t.Errorf("fake__writer, removed, answered %q", resultText(res))
	}
	if res := h.call(t, "third__readonly", nil); res.IsError || resultText(res) != "read" {
		t.Errorf("third__readonly = %q (isError %v)", resultText(res), res.IsError)
	}
	if err := waitGone(fakePid, 10*time.Second); err != nil {
		t.Errorf("the replaced server: %v", err)
	}
	waitFor(t, func() bool { n, names := changes.seen(); return n > 0 && slices.Equal(names, want) })
	st := h.status(t)
	if st.Registry == nil || len(st.Registry.Servers) != 3 || st.Reload == nil || st.Reload.Generation != 1 {
		t.Fatalf("checkpoint_status registry %+v, reload %+v", st.Registry, st.Reload)
	}
}

// TestReloadRegistryRefused: a refused registry disables every
// downstream server, as at start-up (their processes end), and says why;
// a good one serves them again.
func TestReloadRegistryRefused(t *testing.T) {
	d := registryDir{t, t.TempDir()}
	d.write(map[string]string{"20-other.toml": fakeServer("other", "pid", "echo")}, nil)
	h := newHarness(t, Options{}, gateway.Options{Registry: registry.Load(d.dir, registry.Options{})}, nil)
	otherPid := pidOf(t, h, "other__pid")
	d.write(map[string]string{"10-fake.toml": "schema_version = 8\n[tool_mcp_servers.fake\n"}, nil)
	rec := d.reload(h)
	if len(rec.Refused) != 1 || rec.Refused[0].File != "registry" || !strings.Contains(rec.Refused[0].Reason, "10-fake.toml") {
		t.Errorf("refused = %+v, want the registry's fragment named", rec.Refused)
	}
	if got := listNames(t, h.sess); !slices.Equal(got, []string{"checkpoint_status"}) {
		t.Errorf("tools/list after a refused registry = %v, want no downstream tool", got)
	}
	if st := h.status(t); st.Registry.State != string(conf.StateRefused) || len(st.Registry.Errors) == 0 || len(st.Registry.Servers) != 0 {
		t.Errorf("checkpoint_status registry = %+v, want refused with its errors", st.Registry)
	}
	if err := waitGone(otherPid, 10*time.Second); err != nil {
		t.Errorf("a server of the refused registry: %v", err)
	}

	d.write(map[string]string{"20-other.toml": fakeServer("other", "pid", "echo")}, nil)
	if rec = d.reload(h); len(rec.Refused) != 0 || fmt.Sprint(rec.Added) != "[other__echo other__pid]" {
		t.Errorf("reloaded good registry: %+v", rec)
	}
	if res := h.call(t, "other__echo", map[string]any{"text": "back"}); res.IsError || resultText(res) != "echo: back" {
		t.Errorf("other__echo = %q", resultText(res))
	}
}

// TestReloadRegistryPins: a changed pins file alone replaces the server
// it pins: a pinned = true server's tool whose pin no longer matches its
// definition is withheld, and served again when the pin is restored.
func TestReloadRegistryPins(t *testing.T) {
	d := registryDir{t, t.TempDir()}
	frag := map[string]string{"10-fake.toml": fakeServer("fake", "pid", "echo") + "pinned = true\n"}
	d.write(frag, nil)
	good, _ := livePins(t, registry.Load(d.dir, registry.Options{}))
	d.write(frag, good)
	r := registry.Load(d.dir, registry.Options{})
	if r.State != conf.StateLoaded {
		t.Fatalf("registry %s: %v", r.State, r.Err())
	}
	h := newHarness(t, Options{}, gateway.Options{Registry: r}, nil)
	if got := listNames(t, h.sess); !slices.Equal(got, []string{"checkpoint_status", "fake__pid", "fake__echo"}) {
		t.Fatalf("tools/list = %v", got)
	}
	// echo pinned with another description than the fake's.
	def := strings.Replace(string(good.Servers["fake"]["echo"].Definition), "The fake's echo.", "Echoes.", 1)
	sum := sha256.Sum256([]byte(def))
	bad := &registry.Pins{Servers: map[string]map[string]registry.Pin{"fake": {
		"pid":  good.Servers["fake"]["pid"],
		"echo": {SHA256: hex.EncodeToString(sum[:]), Definition: []byte(def)},
	}}}
	d.write(frag, bad)
	if rec := d.reload(h); fmt.Sprint(rec.Removed, rec.Replaced, rec.Refused) != "[fake__echo] [fake__pid] []" {
		t.Errorf("removed, replaced, refused = %v %v %+v", rec.Removed, rec.Replaced, rec.Refused)
	}
	if got := listNames(t, h.sess); !slices.Equal(got, []string{"checkpoint_status", "fake__pid"}) {
		t.Errorf("tools/list with echo's pin wrong = %v", got)
	}
	d.write(frag, good)
	if rec := d.reload(h); fmt.Sprint(rec.Added) != "[fake__echo]" {
		t.Errorf("added = %v", rec.Added)
	}
	if res := h.call(t, "fake__echo", map[string]any{"text": "x"}); res.IsError {
		t.Errorf("fake__echo with its pin back = %q", resultText(res))
	}
}

// TestReloadRegistryAfterClose: once Close has begun, no downstream server
// starts: a reload of the registry after it (the reloader outlives Close
// in serve) does nothing, and serves nothing new.
func TestReloadRegistryAfterClose(t *testing.T) {
	d := registryDir{t, t.TempDir()}
	d.write(map[string]string{"20-other.toml": fakeServer("other", "pid")}, nil)
	h := newHarness(t, Options{}, gateway.Options{Registry: registry.Load(d.dir, registry.Options{}), Eager: true}, nil)
	h.s.Close()
	d.write(map[string]string{
		"20-other.toml": fakeServer("other", "pid"),
		"30-third.toml": fakeServer("third", "pid"),
	}, nil)
	if rec, ok := h.s.ReloadRegistry("watch", d.load); ok || len(rec.Added) > 0 {
		t.Errorf("a reload after Close: %v, added %v", ok, rec.Added)
	}
	res, err := callTool(t, h.sess, "third__pid", nil)
	if err == nil && !res.IsError {
		t.Errorf("third__pid after Close answered %q", resultText(res))
	}
}

// slowDiscovery is a server whose one downstream server, fake (tool
// pid), takes 2 s to start: its start-up listing is under way when it
// returns.
func slowDiscovery(t *testing.T) *Server {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	slow := t.TempDir() + "/slow"
	if err := os.WriteFile(slow, []byte("#!/bin/sh\nsleep 2\nexec "+self+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := registryDir{t, t.TempDir()}
	d.write(map[string]string{"20-fake.toml": strings.Replace(fakeServer("fake", "pid"), "SELF", slow, 1)}, nil)
	r := registry.Load(d.dir, registry.Options{})
	if r.State != conf.StateLoaded {
		t.Fatalf("registry %s: %v", r.State, r.Err())
	}
	log := logrus.New()
	log.SetOutput(&testbin.Buffer{})
	s := New(Options{Conf: loadConf(t, twoTools), Log: log, Direct: &fakeRunner{}, Sandbox: rt.FailedSandbox("bwrap", errors.New("none"))})
	t.Cleanup(s.Close)
	s.StartDownstream(context.Background(), gateway.Options{Registry: r, DirectServices: &rt.DirectServices{Shim: testbin.Shim(t)}})
	return s
}

// TestCallDuringDiscovery: a call of a downstream tool while its server
// is still being listed at start-up waits for the listing and answers
// (its name is reserved before the listing; it was "tool not found").
func TestCallDuringDiscovery(t *testing.T) {
	s := slowDiscovery(t)
	res, err := callTool(t, session(t, s), "fake__pid", nil)
	if err != nil || res.IsError {
		t.Fatalf("fake__pid during the start-up listing: %v %v", err, res)
	}
	if _, err := strconv.Atoi(resultText(res)); err != nil {
		t.Errorf("fake__pid = %q, want the server's pid", resultText(res))
	}
}

// TestReloadConfDuringDiscovery: a tools.conf reload while the start-up
// discovery lists the registry cannot take a name a downstream server's
// tool will serve (the names are reserved before the listing): the
// downstream tool answers it, and policy decides it as the downstream
// tool it is, after one more tools.conf reload too.
func TestReloadConfDuringDiscovery(t *testing.T) {
	s := slowDiscovery(t)
	time.Sleep(500 * time.Millisecond) // past the collision check, inside the listing
	taking := loadConf(t, twoTools+"tool fake__pid EXE test 5 100 on DIR --\n")
	if rec := s.Reload(Snapshot{Conf: taking, Trigger: "watch", Changed: []string{"tools.conf"}}); len(rec.Refused) != 1 {
		t.Errorf("reload during discovery: added %v refused %+v, want fake__pid refused", rec.Added, rec.Refused)
	}
	s.waitListed(context.Background())
	s.Reload(Snapshot{Conf: taking, Trigger: "sighup", Changed: []string{"tools.conf"}})
	s.mu.RLock()
	res := s.resources["fake__pid"]
	s.mu.RUnlock()
	sess := session(t, s)
	req := mcp.CallToolRequest{}
	req.Params.Name = "fake__pid"
	out, err := sess.CallTool(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strconv.Atoi(resultText(out)); err != nil || res.Kind != status.KindDownstream {
		t.Errorf("fake__pid answers %q, policy decides it as %+v; want the downstream server's pid, and its resource", resultText(out), res)
	}
}

// TestReloadRegistryStalledListing: a new server that never answers its
// handshake holds a reload of the registry for its startup_timeout_sec
// (up to 600 s, twice: connect, then tools/list); a reload of tools.conf
// (or of the policy: a token revocation) does not wait behind it.
func TestReloadRegistryStalledListing(t *testing.T) {
	d := registryDir{t, t.TempDir()}
	d.write(map[string]string{"20-other.toml": fakeServer("other", "pid")}, nil)
	h := newHarness(t, Options{Conf: loadConf(t, twoTools)}, gateway.Options{Registry: registry.Load(d.dir, registry.Options{})}, nil)
	stall := strings.Replace(strings.Replace(fakeServer("stall", "pid"), `"SELF"`, `"/bin/sleep"`+"\nargs = [\"60\"]", 1), "startup_timeout_sec = 20", "startup_timeout_sec = 5", 1)
	d.write(map[string]string{"20-other.toml": fakeServer("other", "pid"), "30-stall.toml": stall}, nil)
	go d.reload(h)
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	h.s.Reload(Snapshot{Conf: loadConf(t, "tool zeta EXE read 5 100 off DIR --\n"), Trigger: "watch", Changed: []string{"tools.conf"}})
	if waited := time.Since(start); waited > 3*time.Second {
		t.Errorf("a tools.conf reload waited %s behind a registry reload listing a stalled server", waited.Round(time.Second))
	}
}
