package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/internal/golden"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
)

var (
	// helper is the test tool, built by TestMain into toolDir (0755, so
	// that the sandbox uid can traverse it).
	helper  string
	toolDir string
	// outside is a copy of the helper outside toolDir, to test the
	// exe bind.
	outside string
	self    string
)

func TestMain(m *testing.M) {
	rt.MaybeShim()
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	base, err := os.MkdirTemp("", "toolgate-oci-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(base)
	toolDir = filepath.Join(base, "tool")
	for _, d := range []string{base, toolDir, filepath.Join(base, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		_ = os.Chmod(d, 0o755)
	}
	helper = filepath.Join(toolDir, "helper")
	outside = filepath.Join(base, "bin", "helper")
	for _, out := range []string{helper, outside} {
		cmd := exec.Command("go", "build", "-o", out, "./testdata/helper")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build helper: %v\n%s", err, b)
			return 1
		}
	}
	self, err = os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	return code
}

// needSeccomp skips a test that renders or runs the OCI backend's spec,
// which always carries its seccomp profile, when this test binary was
// built without -tags seccomp (plain go test ./...): loudly, and a failure
// under TOOLGATE_REQUIRE_ALL=1.
func needSeccomp(t *testing.T) {
	t.Helper()
	if _, err := bundle.DefaultSeccomp(); errors.Is(err, bundle.ErrNoSeccomp) {
		testbin.Missing(t, "this test binary was built without -tags seccomp (go test -tags seccomp): %v", err)
	}
}

// runners are created once per runtime and shared by the tests.
var (
	runnersMu sync.Mutex
	runners   = map[Name]*Runner{}
)

func runner(t *testing.T, name Name) *Runner {
	t.Helper()
	if os.Geteuid() != 0 {
		testbin.Missing(t, "the oci backend needs root (uid %d)", os.Geteuid())
	}
	if _, err := findBinary(string(name)); err != nil {
		testbin.Missing(t, "%v", err)
	}
	runnersMu.Lock()
	defer runnersMu.Unlock()
	if r, ok := runners[name]; ok {
		return r
	}
	runDir, err := os.MkdirTemp("", "toolgate-oci-run-")
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(context.Background(), Config{
		Runtime: name, Shim: self, RunDir: runDir, Limits: rt.DefaultSandboxLimits(),
	})
	if err != nil {
		_ = os.RemoveAll(runDir)
		if errors.Is(err, bundle.ErrNoSeccomp) {
			// Plain go test ./...: the OCI backend requires its seccomp
			// profile, which only the seccomp build has.
			testbin.Missing(t, "this test binary was built without -tags seccomp (go test -tags seccomp): %v", err)
		}
		t.Fatalf("New(%s) = %v", name, err)
	}
	runners[name] = r
	// Closed (and RunDir removed) when the whole test binary ends.
	cleanupMu.Lock()
	cleanups = append(cleanups, func() { _ = r.Close(); _ = os.RemoveAll(runDir) })
	cleanupMu.Unlock()
	return r
}

var (
	cleanupMu sync.Mutex
	cleanups  []func()
)

var callSeq struct {
	sync.Mutex
	n int
}

func nextID() string {
	callSeq.Lock()
	defer callSeq.Unlock()
	callSeq.n++
	return fmt.Sprintf("t%d", callSeq.n)
}

func inv(args ...string) rt.Invocation {
	return rt.Invocation{
		ID:       nextID(),
		Template: rt.Template{Name: "helper", Path: helper, Argv: append([]string{helper}, args...), Dir: toolDir},
		Call:     rt.Call{Timeout: 20 * time.Second, MaxBytes: 1 << 20},
	}
}

func run(t *testing.T, r *Runner, in rt.Invocation) rt.Result {
	t.Helper()
	res, err := r.Run(context.Background(), in)
	if err != nil {
		t.Fatalf("Run(%v) error: %v", in.Argv, err)
	}
	return res
}

// forEachRuntime runs f as a subtest for every runtime.
func forEachRuntime(t *testing.T, f func(t *testing.T, r *Runner)) {
	for _, name := range KnownRuntimes() {
		t.Run(string(name), func(t *testing.T) { f(t, runner(t, name)) })
	}
}

func TestExitCodes(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		for _, code := range []int{0, 3, 42} {
			res := run(t, r, inv("exit", fmt.Sprint(code)))
			if res.ExitCode != code || res.TimedOut {
				t.Errorf("exit %d: ExitCode = %d, TimedOut = %v, output %q", code, res.ExitCode, res.TimedOut, res.Output)
			}
		}
	})
}

func TestCombinedOutputInOrder(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		res := run(t, r, inv("out"))
		want := "out0\nerr0\nout1\nerr1\nout2\nerr2\n"
		if string(res.Output) != want || res.ExitCode != 0 {
			t.Errorf("output = %q (exit %d), want %q", res.Output, res.ExitCode, want)
		}
	})
}

func TestEnvIsExactlyTheFourVariables(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		res := run(t, r, inv("env"))
		want := slices.Sorted(slices.Values(testbin.ToolEnv))
		got := strings.Split(strings.TrimSpace(string(res.Output)), "\n")
		if !slices.Equal(got, want) {
			t.Errorf("env = %q, want exactly %q (no HOME)", got, want)
		}
	})
}

func TestCwdIsTheToolDir(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		res := run(t, r, inv("cwd"))
		if got := strings.TrimSpace(string(res.Output)); got != toolDir {
			t.Errorf("cwd = %q, want %q", got, toolDir)
		}
	})
}

func TestExeOutsideTheDirIsBound(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		in := inv("exit", "7")
		in.Path, in.Argv[0] = outside, outside
		res := run(t, r, in)
		if res.ExitCode != 7 {
			t.Errorf("exe %s outside the dir: exit %d, output %q; want 7", outside, res.ExitCode, res.Output)
		}
	})
}

func TestUserCapsAndNoNewPrivs(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		// A pair of the default range, its own: uid and gid the same
		// offset into it.
		res := run(t, r, inv("id"))
		var uid, gid, pid int
		got := strings.TrimSpace(string(res.Output))
		if _, err := fmt.Sscanf(got, "uid %d gid %d pid %d", &uid, &gid, &pid); err != nil ||
			!rt.DefaultIDRange().HasUID(uint32(uid)) || gid != uid || pid != 1 {
			t.Errorf("id = %q, want a uid of %s, the same gid, pid 1", got, rt.DefaultIDRange())
		}
		res = run(t, r, inv("status"))
		out := string(res.Output)
		want := []string{"CapInh: 0000000000000000", "CapPrm: 0000000000000000", "CapEff: 0000000000000000", "CapBnd: 0000000000000000"}
		if r.Runtime() != Runsc { // gVisor has no CapAmb line
			want = append(want, "CapAmb: 0000000000000000")
		}
		for _, want := range want {
			if !strings.Contains(out, want) {
				t.Errorf("status lacks %q:\n%s", want, out)
			}
		}
		if r.Runtime() != Runsc { // gVisor reports neither
			for _, want := range []string{"NoNewPrivs: 1", "Seccomp: 2"} {
				if !strings.Contains(out, want) {
					t.Errorf("status lacks %q:\n%s", want, out)
				}
			}
		}
	})
}

func TestWrites(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		res := run(t, r, inv("write", toolDir+"/new", helper, "/new", "/etc/passwd", "/usr/new", "/tmp/new"))
		lines := strings.Split(strings.TrimSpace(string(res.Output)), "\n")
		want := map[string]string{
			toolDir + "/new": "error", helper: "error", "/new": "error", "/etc/passwd": "error",
			"/usr/new": "error", "/tmp/new": "ok",
		}
		if len(lines) != len(want) {
			t.Fatalf("write output = %q", res.Output)
		}
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) < 2 || want[f[0]] != f[1] {
				t.Errorf("write %q: want %s", l, want[f[0]])
			}
		}
		if _, err := os.Stat(toolDir + "/new"); err == nil {
			t.Errorf("a write into the tool dir reached the host")
		}
	})
}

func TestNoNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	// Control: the listener is reachable from the host.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("control connect: %v", err)
	}
	c.Close()
	<-accepted
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		res := run(t, r, inv("net", ln.Addr().String()))
		out := string(res.Output)
		if !strings.Contains(out, "interfaces lo\n") {
			t.Errorf("interfaces: want only lo, got %q", out)
		}
		if !strings.Contains(out, "connect error") || strings.Contains(out, "connect ok") {
			t.Errorf("connect to the host's %s: want an error, got %q", ln.Addr(), out)
		}
		select {
		case <-accepted:
			t.Errorf("the host listener accepted a connection from the sandbox")
		default:
		}
	})
}

// listContainers returns the ids the runtime still knows in r's state dir.
func listContainers(t *testing.T, r *Runner) []string {
	t.Helper()
	res, err := r.op(r.fl.listArgv(r.bin, r.state))
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	return strings.Fields(string(res.Output))
}

func bundlesLeft(t *testing.T, r *Runner) []string {
	t.Helper()
	e, err := os.ReadDir(r.bundles)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range e {
		names = append(names, x.Name())
	}
	return names
}

func TestTimeoutKillsAndLeavesNothing(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		in := inv("sleep", "60s")
		in.Timeout = 1500 * time.Millisecond
		start := time.Now()
		res := run(t, r, in)
		if !res.TimedOut || res.Limit != rt.LimitTimeout {
			t.Errorf("TimedOut = %v, Limit = %q, want a timeout", res.TimedOut, res.Limit)
		}
		if el := time.Since(start); el > 8*time.Second {
			t.Errorf("call took %s after a 1.5 s timeout", el)
		}
		if ids := listContainers(t, r); len(ids) != 0 {
			t.Errorf("containers left after the call: %q", ids)
		}
		if b := bundlesLeft(t, r); len(b) != 0 {
			t.Errorf("bundles left after the call: %q", b)
		}
	})
}

func TestCancelKillsAndLeavesNothing(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		res, err := r.Run(ctx, inv("sleep", "60s"))
		if err != nil {
			t.Fatal(err)
		}
		if res.Limit != rt.LimitCancelled {
			t.Errorf("Limit = %q, want cancelled", res.Limit)
		}
		if ids := listContainers(t, r); len(ids) != 0 {
			t.Errorf("containers left after the call: %q", ids)
		}
	})
}

func TestOutputCapped(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		in := inv("flood", fmt.Sprint(1<<30))
		in.MaxBytes = 1 << 20
		in.Timeout = 60 * time.Second
		start := time.Now()
		res := run(t, r, in)
		if len(res.Output) != 1<<20 || !res.Truncated || res.Dropped != res.OutputBytes-1<<20 {
			t.Errorf("kept %d bytes, Truncated %v, Dropped %d of %d; want 1 MiB kept and the rest dropped", len(res.Output), res.Truncated, res.Dropped, res.OutputBytes)
		}
		if res.OutputBytes != 1<<30 || res.ExitCode != 0 {
			// The flood must run to the end: no EAGAIN on the shared pipe.
			t.Errorf("flood ended early: exit %d, %d bytes, tail %q", res.ExitCode, res.OutputBytes, tail(res.Output))
		}
		t.Logf("1 GiB flood: %s, %d bytes seen", time.Since(start), res.OutputBytes)
		if ids := listContainers(t, r); len(ids) != 0 {
			t.Errorf("containers left after the call: %q", ids)
		}
	})
}

func tail(b []byte) []byte {
	if len(b) > 200 {
		return b[len(b)-200:]
	}
	return b
}

func TestSweepRemovesADeadServersContainers(t *testing.T) {
	r := runner(t, Runc)
	// A pid that is certainly dead: a child that already exited.
	c := exec.Command("/usr/bin/true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	dead := c.Process.Pid
	// Lay out a server dir for the dead pid, as a killed server leaves
	// it, with a running container in its state dir.
	p := *r.plan
	p.dir = filepath.Join(r.cfg.RunDir, fmt.Sprint(dead))
	p.state = filepath.Join(p.dir, "state-runc")
	p.bundles = filepath.Join(p.dir, "bundles")
	p.prefix = fmt.Sprintf("%s%d-", IDPrefix, dead)
	for _, d := range []string{p.dir, p.state, p.bundles} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	stale := &Runner{plan: &p}
	in := inv("sleep", "60s")
	id, _ := stale.containerID(in.ID)
	s, err := stale.spec(in, id, "", rt.SandboxID{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	b := filepath.Join(p.bundles, id)
	if err := writeBundle(b, s); err != nil {
		t.Fatal(err)
	}
	// Detached, with /dev/null as stdio: a pipe would be held open by
	// the container.
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	run := exec.Command(r.bin, "--root", p.state, "run", "--detach", "--bundle", b, id)
	run.Stdin, run.Stdout, run.Stderr = null, null, null
	if err := run.Run(); err != nil {
		t.Fatalf("start the stale container: %v", err)
	}
	if ids := listContainers(t, stale); !slices.Contains(ids, id) {
		t.Fatalf("stale container %s not running: %q", id, ids)
	}
	removed, err := r.Sweep()
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if !slices.Contains(removed, p.dir) {
		t.Errorf("Sweep removed %q, want %s", removed, p.dir)
	}
	if _, err := os.Stat(p.dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists after the sweep", p.dir)
	}
	out, _ := exec.Command(r.bin, "--root", p.state, "state", id).CombinedOutput()
	if !strings.Contains(string(out), "does not exist") {
		t.Errorf("runc state %s after the sweep: %s", id, out)
	}
	// Its own directory is never swept.
	if _, err := os.Stat(r.dir); err != nil {
		t.Errorf("the live server's dir was swept: %v", err)
	}
}

// TestLoadRuleIsRenderRule: a tool dir is accepted at load (the rule
// tools.conf's check calls, rt.CheckSandboxTool) exactly when the OCI
// rendering takes it, and the bwrap rendering takes whatever load accepts
// (it validates nothing of its own): /etc/app was listed by check and
// failed every OCI call; /srv and /opt went the other way.
func TestLoadRuleIsRenderRule(t *testing.T) {
	needSeccomp(t)
	pol := rt.DefaultSandboxLimits().Policy(bundle.Host{}, "/usr/libexec/toolgate/toolgate-shim")
	pol.Rootfs, pol.CgroupsPath = "/run/toolgate/1/rootfs", "toolgate-1.oci/c1"
	for _, dir := range []string{
		"/srv/x", "/opt/x", "/home/me/p", "/tmp/w", "/usr/share/x", "/var/lib/x",
		"/etc/app", "/etc", "/srv", "/opt", "/", "/tmp", "/usr", "/proc/1", "/sys/x", "/dev/x", "/.toolgate",
	} {
		loadErr := rt.CheckSandboxTool(dir, "/usr/bin/true", rt.IDRange{})
		_, renderErr := RenderSpec(pol, Runc, rt.Invocation{ID: "c1", Template: rt.Template{Name: "t", Path: "/usr/bin/true", Argv: []string{"/usr/bin/true"}, Dir: dir}}, "")
		if (loadErr == nil) != (renderErr == nil) {
			t.Errorf("dir %s: load says %v, the OCI rendering %v", dir, loadErr, renderErr)
		}
	}
}

// TestRuntimeArgvGolden pins every runtime command line toolgate runs, per
// runtime: run; create and start (a prepared sandbox); kill, delete and
// list.
func TestRuntimeArgvGolden(t *testing.T) {
	var b strings.Builder
	for _, name := range KnownRuntimes() {
		fl := flavours[name]
		bin, root := "/usr/bin/"+string(name), "/run/toolgate/oci/42/state-"+string(name)
		for _, argv := range [][]string{
			fl.runArgv(bin, root, "/run/toolgate/oci/42/bundles/toolgate-42-c1", "toolgate-42-c1"),
			fl.createArgv(bin, root, "/run/toolgate/oci/42/bundles/toolgate-42-pool-1", "/run/toolgate/oci/42/bundles/toolgate-42-pool-1/pid", "toolgate-42-pool-1"),
			fl.startArgv(bin, root, "toolgate-42-pool-1"),
			fl.killArgv(bin, root, "toolgate-42-c1"),
			fl.deleteArgv(bin, root, "toolgate-42-c1"),
			fl.listArgv(bin, root),
		} {
			fmt.Fprintf(&b, "%s\n", strings.Join(argv, " "))
		}
	}
	golden.Check(t, filepath.Join("testdata", "argv.golden"), []byte(b.String()))
}
