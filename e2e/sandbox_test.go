//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
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
// no network, its dir read-only, and exactly the four variables.
func TestSandboxedTool(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf(`tool net %[1]s test 20 4096 on %[2]s -- net %[3]s
tool writes %[1]s test 20 4096 on %[2]s -- write %[2]s/x /tmp/x
tool env %[1]s test 20 4096 on %[2]s -- env
`, probe, dir, l.Addr()))
	c, _ := start(t, "2025-06-18", "--conf", conf)
	for name, want := range map[string][]string{
		"net":    {"interfaces: lo\n", "connect " + l.Addr().String() + ": denied", "[exit=0 "},
		"writes": {"write " + dir + "/x: denied", "write /tmp/x: ok"},
		"env":    {"GIT_CONFIG_NOSYSTEM=1\nGIT_PAGER=cat\nPAGER=cat\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n[exit=0 "},
	} {
		res, err := call(t, c, name, nil)
		if err != nil || res.IsError {
			t.Errorf("%s: %v %q", name, err, text(res))
			continue
		}
		for _, w := range want {
			if !strings.Contains(text(res), w) {
				t.Errorf("%s: output lacks %q:\n%s", name, w, text(res))
			}
		}
		if sc := fmt.Sprint(res.StructuredContent); !strings.Contains(sc, "bwrap") {
			t.Errorf("%s: backend not reported as bwrap: %s", name, sc)
		}
	}
}

// TestServerKilledMidCall: SIGKILL of the server in the middle of a
// sandboxed call and of a direct call leaves nothing that the next start
// does not sweep.
func TestServerKilledMidCall(t *testing.T) {
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf(`tool boxed %[1]s test 60 4096 on %[2]s -- ignoreterm
tool direct %[1]s read 60 4096 off %[2]s -- ignoreterm
`, probe, dir))
	cmd := exec.Command(binary, "serve", "--conf", conf)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	server := cmd.Process.Pid
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"kill","version":"1"}}}`)
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	bufio.NewReader(stdout).ReadString('\n')
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"boxed"}}`)
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"direct"}}`)
	// Both tools, and their setsid children, are running.
	waitFor(t, 10*time.Second, func() bool { return len(probes(probe)) >= 4 })
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

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(50 * time.Millisecond)
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
