// Package battery is the sandbox escape and fault battery: every case runs
// through every sandbox backend available here, via the real runner, and
// asserts the same guarantees. The probe program (internal/probe) is the
// tool; its destructive modes refuse to run outside a pid namespace.
package battery

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
)

func TestMain(m *testing.M) {
	rt.MaybeShim()
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// The battery's limits: small, so that the bombs end quickly.
func batteryLimits() rt.SandboxLimits {
	l := rt.DefaultSandboxLimits()
	l.Pids = 64
	l.Memory = 128 << 20
	l.TmpSize = 16 << 20
	return l
}

const secretVar = "TOOLGATE_BATTERY_SECRET"

// backend is one sandbox under test.
type backend struct {
	name string
	run  rt.Runner
}

func requireOrSkip(t *testing.T, format string, a ...any) {
	t.Helper()
	if os.Getenv("TOOLGATE_REQUIRE_ALL") == "1" {
		t.Fatalf("required backend unavailable: "+format, a...)
	}
	t.Logf("SKIPPING backend: "+format, a...)
}

// backends returns every sandbox backend that runs here. The server's
// environment carries a secret the sandboxes must never see.
func backends(t *testing.T) []backend {
	t.Helper()
	t.Setenv(secretVar, "leaked-"+strconv.Itoa(os.Getpid()))
	cg := rt.DetectCgroups()
	t.Cleanup(cg.Close)
	var out []backend
	if b, err := bwrap.New(bwrap.Config{Shim: testbin.Shim(t), Cgroups: cg, Limits: batteryLimits()}); err != nil {
		requireOrSkip(t, "bwrap: %v", err)
	} else {
		out = append(out, backend{"bwrap", b})
	}
	out = append(out, ociBackends(t, cg)...)
	if len(out) == 0 {
		t.Skip("no sandbox backend runs here")
	}
	return out
}

var callSeq int

// call runs the probe with args through b, in dir.
func call(t *testing.T, b backend, dir string, timeout time.Duration, max int, args ...string) rt.Result {
	t.Helper()
	probe := testbin.Probe(t)
	callSeq++
	res, err := b.run.Run(context.Background(), rt.Invocation{
		ID:   fmt.Sprintf("battery%d", callSeq),
		Name: "probe", Path: probe, Argv: append([]string{probe}, args...),
		Dir: dir, Timeout: timeout, MaxBytes: max,
	})
	if err != nil {
		t.Fatalf("%s: Run(%q): %v", b.name, args, err)
	}
	return res
}

func each(t *testing.T, f func(t *testing.T, b backend, dir string)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			f(t, b, testbin.Dir(t))
		})
	}
}

func wantLines(t *testing.T, out []byte, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(string(out), l+"\n") {
			t.Errorf("output lacks %q:\n%s", l, out)
		}
	}
}

// TestNetwork: no interface but lo; a listener on the host's 127.0.0.1 is
// unreachable; the sandbox's own loopback works. No packet leaves the
// machine: the only target is a listener this test starts.
func TestNetwork(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// Control: the listener is reachable from the host.
	if c, err := net.Dial("tcp", l.Addr().String()); err != nil {
		t.Fatalf("control: host cannot reach its own listener: %v", err)
	} else {
		c.Close()
	}
	each(t, func(t *testing.T, b backend, dir string) {
		res := call(t, b, dir, 20*time.Second, 4096, "net", l.Addr().String())
		wantLines(t, res.Output, "interfaces: lo", "connect "+l.Addr().String()+": denied ECONNREFUSED", "loopback: ok")
	})
}

func TestWrites(t *testing.T) {
	each(t, func(t *testing.T, b backend, dir string) {
		if err := os.WriteFile(filepath.Join(dir, "existing"), []byte("keep"), 0o666); err != nil {
			t.Fatal(err)
		}
		res := call(t, b, dir, 20*time.Second, 4096, "write",
			dir+"/new", dir+"/existing", dir+"/../escape", "/new", "/etc/new", "/etc/passwd", "/usr/new", "/tmp/mine")
		out := string(res.Output)
		for _, p := range []string{dir + "/new", dir + "/existing", "/new", "/etc/new", "/etc/passwd", "/usr/new"} {
			if !strings.Contains(out, "write "+p+": denied") {
				t.Errorf("write %s was not denied:\n%s", p, out)
			}
		}
		wantLines(t, res.Output, "write /tmp/mine: ok")
		if b, _ := os.ReadFile(filepath.Join(dir, "existing")); string(b) != "keep" {
			t.Errorf("the bound dir was modified: %q", b)
		}
		// dir/.. is the sandbox's private /tmp when dir is under /tmp: the
		// write may succeed there, but must not reach the host.
		for _, p := range []string{filepath.Join(dir, "new"), filepath.Join(dir, "..", "escape")} {
			if _, err := os.Stat(p); err == nil {
				os.Remove(p)
				t.Errorf("%s appeared on the host", p)
			}
		}
		// /tmp is private to the call: gone in the next one.
		res = call(t, b, dir, 20*time.Second, 4096, "exists", "/tmp/mine")
		wantLines(t, res.Output, "exists /tmp/mine: false")
	})
}

// TestEnvironment: exactly the four variables, and no process visible in
// the sandbox carries a variable of the server's.
func TestEnvironment(t *testing.T) {
	each(t, func(t *testing.T, b backend, dir string) {
		res := call(t, b, dir, 20*time.Second, 4096, "env")
		want := "GIT_CONFIG_NOSYSTEM=1\nGIT_PAGER=cat\nPAGER=cat\nPATH=" + rt.DefaultPath + "\n"
		if string(res.Output) != want {
			t.Errorf("environment = %q, want exactly %q", res.Output, want)
		}
		res = call(t, b, dir, 20*time.Second, 4096, "environ-all", secretVar)
		if !regexp.MustCompile(`environ: \d+ processes visible, 0 with the marker`).Match(res.Output) {
			t.Errorf("the server's environment is visible in the sandbox:\n%s", res.Output)
		}
	})
}

func TestPrivileges(t *testing.T) {
	each(t, func(t *testing.T, b backend, dir string) {
		res := call(t, b, dir, 20*time.Second, 4096, "status")
		for _, l := range []string{"CapInh: 0000000000000000", "CapPrm: 0000000000000000", "CapEff: 0000000000000000",
			"CapBnd: 0000000000000000", "prctl no_new_privs: 1", "hostname: sandbox"} {
			if !strings.Contains(string(res.Output), l) {
				t.Errorf("status lacks %q:\n%s", l, res.Output)
			}
		}
		// Every capability line the kernel reports is empty (gVisor does
		// not report CapAmb).
		if m := regexp.MustCompile(`Cap[A-Za-z]+: (0*[1-9a-f][0-9a-f]*)`).Find(res.Output); m != nil {
			t.Errorf("a capability is held: %s", m)
		}
		res = call(t, b, dir, 20*time.Second, 4096, "pid")
		wantLines(t, res.Output, "pid=1 ppid=0")
		res = call(t, b, dir, 20*time.Second, 4096, "userns")
		if !strings.Contains(string(res.Output), "unshare user: denied") {
			t.Errorf("a nested user namespace was created:\n%s", res.Output)
		}
	})
}

// TestHostInvisible: the host's private places are absent, /etc/shadow is
// unreadable even when the server runs as root.
func TestHostInvisible(t *testing.T) {
	runDir := os.Getenv("XDG_RUNTIME_DIR")
	if runDir == "" {
		runDir = "/run"
	}
	each(t, func(t *testing.T, b backend, dir string) {
		res := call(t, b, dir, 20*time.Second, 4096, "exists", "/home", "/root", "/run", "/var", runDir, "/etc/shadow", "/etc/ssh", "/boot", "/sys/firmware")
		for _, p := range []string{"/home", "/root", "/var", runDir, "/etc/shadow", "/etc/ssh", "/boot"} {
			if !strings.Contains(string(res.Output), "exists "+p+": false") {
				t.Errorf("%s is visible in the sandbox:\n%s", p, res.Output)
			}
		}
		res = call(t, b, dir, 20*time.Second, 4096, "read", "/etc/shadow", "/proc/1/environ")
		if !strings.Contains(string(res.Output), "read /etc/shadow: denied") {
			t.Errorf("/etc/shadow readable:\n%s", res.Output)
		}
	})
}

// TestLinksOutOfDir: symlinks and a hard link placed in the tool's dir,
// pointing outside, read nothing they should not.
func TestLinksOutOfDir(t *testing.T) {
	// A root-only host file on the same filesystem as the tool dirs, for
	// the hard link (only possible when the test runs as root).
	secret := filepath.Join(os.TempDir(), fmt.Sprintf("toolgate-battery-secret-%d", os.Getpid()))
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(secret)
	each(t, func(t *testing.T, b backend, dir string) {
		for name, target := range map[string]string{
			"abs": "/etc/shadow", "up": "../../../../../../etc/shadow", "proc": "/proc/1/root/etc/shadow",
			"root": "/", "secret": secret,
		} {
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		hard := filepath.Join(dir, "hard")
		if err := os.Link(secret, hard); err != nil {
			t.Logf("no hard link case: %v", err)
			hard = ""
		}
		args := []string{"read", dir + "/abs", dir + "/up", dir + "/proc", dir + "/root/etc/shadow", dir + "/secret"}
		if hard != "" {
			args = append(args, hard)
		}
		res := call(t, b, dir, 20*time.Second, 4096, args...)
		for _, p := range args[1:] {
			if !strings.Contains(string(res.Output), "read "+p+": denied") {
				t.Errorf("read %s was not denied:\n%s", p, res.Output)
			}
		}
	})
}

func TestPtrace(t *testing.T) {
	each(t, func(t *testing.T, b backend, dir string) {
		res := call(t, b, dir, 20*time.Second, 1<<16, "ptrace")
		if !regexp.MustCompile(`ptrace: \d+ visible, 0 attachable`).Match(res.Output) {
			t.Errorf("a process is attachable:\n%s", res.Output)
		}
	})
}

// TestForkBomb: the process limit stops a fork bomb, and the backend keeps
// serving.
func TestForkBomb(t *testing.T) {
	each(t, func(t *testing.T, b backend, dir string) {
		start := time.Now()
		res := call(t, b, dir, 30*time.Second, 4096, "forkbomb", "2000")
		m := regexp.MustCompile(`forkbomb: started (\d+) of 2000`).FindSubmatch(res.Output)
		switch {
		case m != nil:
			n, _ := strconv.Atoi(string(m[1]))
			if n >= int(batteryLimits().Pids) {
				t.Errorf("the fork bomb started %d processes; the limit is %d", n, batteryLimits().Pids)
			}
			t.Logf("fork bomb stopped at %d processes in %s (limit %q)", n, time.Since(start), res.Limit)
		case b.name == "oci-runsc" && res.ExitCode != 0 && !res.TimedOut:
			// gVisor: the Sentry's own tasks count against the cgroup, and
			// the bomb's memory kills the whole sandbox before it reports
			// (SANDBOX.md §3): stopped, without a report.
			t.Logf("fork bomb ended the whole sandbox (exit %d) in %s", res.ExitCode, time.Since(start))
		default:
			t.Fatalf("no forkbomb report (exit %d, limit %q, timed out %v):\n%s", res.ExitCode, res.Limit, res.TimedOut, res.Output)
		}
		assertNoProbes(t)
		res = call(t, b, dir, 20*time.Second, 4096, "echo", "still serving")
		wantLines(t, res.Output, "still serving")
	})
}

// TestMemoryBomb: the memory limit stops a memory bomb (OOM kill), and the
// backend keeps serving.
func TestMemoryBomb(t *testing.T) {
	each(t, func(t *testing.T, b backend, dir string) {
		res := call(t, b, dir, 60*time.Second, 1<<16, "membomb", "1024")
		if strings.Contains(string(res.Output), "all 1024 MiB allocated") {
			t.Fatalf("1 GiB allocated under a %d MiB limit:\n%s", batteryLimits().Memory>>20, res.Output)
		}
		if res.ExitCode == 0 {
			t.Errorf("membomb exited 0")
		}
		if res.ExitCode != 128+9 || res.TimedOut {
			t.Errorf("membomb: exit %d timed out %v, want an OOM kill (137)", res.ExitCode, res.TimedOut)
		}
		// bwrap calls run in toolgate's own cgroup, whose events name the
		// limit; OCI runtimes delete the container's cgroup with it.
		if b.name == "bwrap" && res.Limit != rt.LimitMemory {
			t.Errorf("Limit = %q, want memory (exit %d)", res.Limit, res.ExitCode)
		}
		res = call(t, b, dir, 20*time.Second, 4096, "echo", "still serving")
		wantLines(t, res.Output, "still serving")
	})
}

// TestFlood: 1 GB of output is capped with bounded server memory.
func TestFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	each(t, func(t *testing.T, b backend, dir string) {
		before := vmHWM(t)
		res := call(t, b, dir, 120*time.Second, 1<<20, "flood", strconv.Itoa(1<<30))
		if len(res.Output) != 1<<20 || !res.Truncated || res.OutputBytes != 1<<30 || res.ExitCode != 0 {
			t.Errorf("kept %d total %d truncated %v exit %d:\n%.200s", len(res.Output), res.OutputBytes, res.Truncated, res.ExitCode, res.Output)
		}
		if grew := vmHWM(t) - before; grew > 32<<20 {
			t.Errorf("peak RSS grew by %d MiB for a 1 GB flood", grew>>20)
		}
		t.Logf("1 GB flood capped at 1 MiB in %s", res.Elapsed)
	})
}

func vmHWM(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(b)
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n << 10
}

// TestTimeoutAndDaemons: a SIGTERM-ignoring tree dies at the timeout; a
// daemonized grandchild neither delays the call nor survives it.
func TestTimeoutAndDaemons(t *testing.T) {
	each(t, func(t *testing.T, b backend, dir string) {
		start := time.Now()
		res := call(t, b, dir, 2*time.Second, 4096, "ignoreterm")
		if !res.TimedOut || res.Limit != rt.LimitTimeout {
			t.Errorf("ignoreterm: TimedOut %v Limit %q", res.TimedOut, res.Limit)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("a 2 s timeout took %s", d)
		}
		base := time.Now()
		call(t, b, dir, 20*time.Second, 4096, "exit", "0")
		trivial := time.Since(base)
		start = time.Now()
		res = call(t, b, dir, 30*time.Second, 4096, "daemon")
		if d := time.Since(start); d > 2*trivial+rt.DrainGrace+500*time.Millisecond {
			t.Errorf("daemon call took %s (trivial call %s)", d, trivial)
		}
		if !strings.Contains(string(res.Output), "parent exiting") {
			t.Errorf("daemon output: %q", res.Output)
		}
		assertNoProbes(t)
	})
}

// assertNoProbes fails if any probe process is alive on the host after the
// calls returned (the probes run only as sandboxed tools here).
func assertNoProbes(t *testing.T) {
	t.Helper()
	probe := testbin.Probe(t)
	deadline := time.Now().Add(2 * time.Second)
	for {
		var alive []string
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
			if err != nil || exe != probe {
				continue
			}
			stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
			if f := strings.Fields(string(stat)); len(f) > 2 && f[2] == "Z" {
				continue
			}
			alive = append(alive, e.Name())
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("probe processes survived their calls: %v", alive)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKillAll: kill(-1, SIGKILL) from inside kills only the sandbox.
func TestKillAll(t *testing.T) {
	each(t, func(t *testing.T, b backend, dir string) {
		res := call(t, b, dir, 20*time.Second, 4096, "killall")
		_ = res
		res = call(t, b, dir, 20*time.Second, 4096, "echo", "alive")
		wantLines(t, res.Output, "alive")
	})
}
