//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"
)

// TestSandboxedTool: a test-class tool runs under the default backend with
// no network, its dir read-only, and exactly the four variables, while a
// read-class tool of the same server (run directly, as the server's own
// user) reaches the same listener and writes the same dir. On the image
// target the listener lives in the appliance container's own network
// namespace: the container has a network and reaches it on its loopback,
// the sandbox inside it does not, and no packet leaves the machine.
func TestSandboxedTool(t *testing.T) {
	requireTarget(t)
	var addr string
	if image == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addr = l.Addr().String()
	} else {
		// The conf is read at start, before the container's namespace
		// exists: pick the port now, listen once the container runs. A
		// fresh namespace has every port free.
		addr = fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(20000))
	}
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	// World-writable, so that the server's own user (root on the host, the
	// image's non-root user in the container) can write it: the sandbox's
	// denial is then the read-only bind, not the mode.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	conf := writeConf(t, fmt.Sprintf(`tool net %[1]s test 20 4096 on %[2]s -- net %[3]s
tool writes %[1]s test 20 4096 on %[2]s -- write %[2]s/x /tmp/x
tool env %[1]s test 20 4096 on %[2]s -- env
tool status %[1]s test 20 4096 on %[2]s -- status
tool netdirect %[1]s read 20 4096 off %[2]s -- net %[3]s
tool writedirect %[1]s read 20 4096 off %[2]s -- write %[2]s/direct
`, probe, dir, addr))
	c, _, srv := startServer(t, "2025-06-18", conf)
	// No capability and no_new_privs in every sandbox; inside the
	// container the tool also keeps the container's seccomp filter
	// (images/seccomp.json), which bwrap alone does not install.
	status := []string{"CapEff: 0000000000000000", "CapBnd: 0000000000000000", "NoNewPrivs: 1", "hostname: sandbox"}
	if image != "" {
		listenInNetns(t, containerPID(t, srv.name), addr)
		status = append(status, "Seccomp: 2")
	}
	for _, tc := range []struct {
		name    string
		want    []string
		sandbox bool
	}{
		{"net", []string{"interfaces: lo\n", "connect " + addr + ": denied", "[exit=0 "}, true},
		{"writes", []string{"write " + dir + "/x: denied EROFS", "write /tmp/x: ok"}, true},
		{"env", []string{"GIT_CONFIG_NOSYSTEM=1\nGIT_PAGER=cat\nPAGER=cat\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n[exit=0 "}, true},
		{"status", status, true},
		{"netdirect", []string{"connect " + addr + ": ok", "[exit=0 "}, false},
		{"writedirect", []string{"write " + dir + "/direct: ok", "[exit=0 "}, false},
	} {
		res, err := call(t, c, tc.name, nil)
		if err != nil || res.IsError {
			t.Errorf("%s: %v %q", tc.name, err, text(res))
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(text(res), w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, text(res))
			}
		}
		if sc := fmt.Sprint(res.StructuredContent); tc.sandbox && !strings.Contains(sc, "bwrap") {
			t.Errorf("%s: backend not reported as bwrap: %s", tc.name, sc)
		}
		if tc.name == "env" {
			if env, _, _ := strings.Cut(text(res), "[exit="); strings.Count(env, "\n") != 4 {
				t.Errorf("env: the sandboxed tool sees %d variables, want exactly 4:\n%s", strings.Count(env, "\n"), env)
			}
		}
		if tc.name == "netdirect" {
			// The server's own network namespace has more than loopback:
			// the sandbox's "lo" alone is the sandbox's doing.
			ifs, _, _ := strings.Cut(strings.TrimPrefix(text(res), "interfaces: "), "\n")
			if ifs == "lo" || ifs == "" {
				t.Errorf("netdirect: the server's own interfaces are %q, want more than lo", ifs)
			}
		}
	}
}

// TestStdinCloseStops: closing stdin while a sandboxed and a direct call
// are running (both ignore SIGTERM and have a setsid child) stops the server
// promptly, and nothing it started is left running: no probe process on the
// host and, for the image, no container left in `podman ps -a`.
func TestStdinCloseStops(t *testing.T) {
	b := startBusy(t)
	cmd, stdin, out, srv, probe := b.cmd, b.stdin, b.out, b.srv, b.probe

	start := time.Now()
	stdin.Close()
	go io.Copy(io.Discard, out)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("server exited with %v after stdin closed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("server still running 10 s after stdin closed")
	}
	elapsed := time.Since(start)
	t.Logf("server exited %s after stdin closed", elapsed)
	if elapsed > 5*time.Second {
		t.Errorf("server took %s to stop after stdin closed, want under 5 s", elapsed)
	}
	waitFor(t, 5*time.Second, func() bool { return len(probes(probe)) == 0 })
	if image != "" && !containerGone(t, srv.name) {
		t.Errorf("container %s still listed by podman ps -a after stdin closed", srv.name)
	}
	if image == "" {
		// Nothing of the server is left, the sandboxes it kept prepared
		// for the next calls (--sandbox-pool, on by default) included:
		// their cgroups are removed once every process in them is gone.
		waitFor(t, 5*time.Second, func() bool { return len(serverCgroups(cmd.Process.Pid)) == 0 })
	}
}

// TestServerKilledMidCall: SIGKILL of the server in the middle of a
// sandboxed call and of a direct call, with sandboxes prepared for the
// next calls (the pool is on by default), leaves nothing that the next
// start does not sweep.
func TestServerKilledMidCall(t *testing.T) {
	onlyBinary(t)
	b := startBusy(t)
	cmd, probe, conf := b.cmd, b.probe, b.conf
	server := cmd.Process.Pid
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	leftDirs := serverCgroups(server)
	t.Logf("after SIGKILL: %d probe processes, cgroup dirs %v", len(probes(probe)), leftDirs)

	// The next start sweeps.
	next := exec.Command(binary, "serve", "--conf", conf)
	next.Stdin = strings.NewReader("")
	if out, err := next.CombinedOutput(); err != nil {
		t.Fatalf("next start: %v\n%s", err, out)
	}
	waitFor(t, 5*time.Second, func() bool { return len(probes(probe)) == 0 })
	if left := serverCgroups(server); len(left) > 0 {
		t.Errorf("cgroup dirs of the killed server survived the next start: %v", left)
	}
}

// probes lists live processes running the probe binary.
func probes(probe string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe != probe {
			continue
		}
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if f := strings.Fields(string(stat)); len(f) > 2 && f[2] == "Z" {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// serverCgroups finds the cgroup directories named for server pid.
func serverCgroups(pid int) []string {
	var out []string
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), fmt.Sprintf("toolgate-%d", pid)) {
			out = append(out, p)
			return filepath.SkipDir
		}
		if strings.Count(p, "/") > 7 {
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

// TestSIGTERMStops: SIGTERM in the middle of calls kills them and everything
// they started, and the server exits 0 within 2 s.
func TestSIGTERMStops(t *testing.T) {
	b := startBusy(t)
	cmd, stdin, out, srv, probe := b.cmd, b.stdin, b.out, b.srv, b.probe
	defer stdin.Close()
	go io.Copy(io.Discard, out)

	start := time.Now()
	if image != "" {
		if b, err := exec.Command(podman, "kill", "--signal", "TERM", srv.name).CombinedOutput(); err != nil {
			t.Fatalf("podman kill: %v %s", err, b)
		}
	} else if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("server exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server still running 10 s after SIGTERM")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("server took %s to stop after SIGTERM, want under 2 s", d)
	}
	waitFor(t, 5*time.Second, func() bool { return len(probes(probe)) == 0 })
	if image == "" {
		// The prepared sandboxes are gone too (see TestStdinCloseStops).
		waitFor(t, 5*time.Second, func() bool { return len(serverCgroups(cmd.Process.Pid)) == 0 })
	}
}

// busy is a server in the middle of two calls that ignore SIGTERM and have
// a setsid child: one sandboxed, one direct.
type busy struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	srv   server
	probe string
	conf  string
}

// startBusy starts `toolgate serve` on the target, initializes, makes the
// two calls and waits until both tools and their children are running.
// The server is killed when the test ends.
func startBusy(t *testing.T) busy {
	t.Helper()
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf(`tool boxed %[1]s test 60 4096 on %[2]s -- ignoreterm
tool direct %[1]s read 60 4096 off %[2]s -- ignoreterm
`, probe, dir))
	srv := serveCmd(t, conf)
	cmd := exec.Command(srv.argv[0], srv.argv[1:]...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	out := bufio.NewReader(stdout)
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"busy","version":"1"}}}`)
	if line, err := out.ReadString('\n'); err != nil || !strings.Contains(line, `"protocolVersion":"2025-06-18"`) {
		t.Fatalf("initialize: %v %q", err, line)
	}
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"boxed"}}`)
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"direct"}}`)
	// Both tools, and their setsid children, are running.
	waitFor(t, 20*time.Second, func() bool { return len(probes(probe)) >= 4 })
	return busy{cmd: cmd, stdin: stdin, out: out, srv: srv, probe: probe, conf: conf}
}
