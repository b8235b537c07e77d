//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"
)

// TestPreparedContainersKilledWhenToolgateKilled: with --backend oci and
// the pool on, the prepared containers wait created, in the runtime's own
// init, which no parent-death signal reaches once their hold shim has
// died; toolgate killed with SIGKILL, its guard kills them within a
// moment, and removes the cgroups they were in (unguarded, they stayed
// until the next start's sweep, parent 1).
func TestPreparedContainersKilledWhenToolgateKilled(t *testing.T) {
	onlyBinary(t) // watches the host's processes
	if _, err := exec.LookPath("runc"); err != nil {
		testbin.Missing(t, "no runc: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING: the oci backend runs as root here")
	}
	conf := writeConf(t, fmt.Sprintf("tool hi /usr/bin/echo test 10 4096 on %s -- hi\n", testbin.Dir(t)))
	srv := serveCmd(t, conf, "--backend", "oci", "--oci-runtime", "runc", "--sandbox-pool", "1")
	cmd := exec.Command(srv.argv[0], srv.argv[1:]...)
	stdin, err := cmd.StdinPipe() // held open: toolgate serves until killed
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	pid := cmd.Process.Pid
	// Not the start-up probe's container: the pool's.
	pool := fmt.Sprintf("toolgate-%d-pool-", pid)
	if !waitUntil(30*time.Second, func() bool { return len(inOCICgroups(pid, pool)) > 0 }) {
		t.Fatalf("no prepared container of toolgate %d within 30 s", pid)
	}
	before := describePids(inOCICgroups(pid, pool))
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	t0 := time.Now()
	if !waitUntil(3*time.Second, func() bool { return len(inOCICgroups(pid, "")) == 0 }) {
		t.Fatalf("left 3 s after toolgate's SIGKILL (prepared before: %s): %s", before, describePids(inOCICgroups(pid, "")))
	}
	t.Logf("prepared containers %s gone %s after toolgate's SIGKILL", before, time.Since(t0).Round(time.Millisecond))
	// The guard removes the directories the containers were in, once
	// they are empty.
	left := func() []string {
		var dirs []string
		_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == fmt.Sprintf("toolgate-%d.oci", pid) {
				dirs = append(dirs, p)
				return filepath.SkipDir
			}
			return nil
		})
		return dirs
	}
	if !waitUntil(3*time.Second, func() bool { return len(left()) == 0 }) {
		t.Errorf("cgroup directories left 3 s after toolgate's SIGKILL: %v", left())
	}
}

// inOCICgroups lists the live processes in a cgroup of the OCI
// backend of toolgate pid (toolgate-PID.oci/NAME, NAME starting with
// prefix), in any hierarchy.
func inOCICgroups(pid int, prefix string) []int {
	mark := fmt.Sprintf("/toolgate-%d.oci/%s", pid, prefix)
	var out []int
	files, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), mark) {
			continue
		}
		dir := filepath.Dir(f)
		stat, _ := os.ReadFile(filepath.Join(dir, "stat"))
		if _, rest, _ := strings.Cut(string(stat), ") "); strings.HasPrefix(rest, "Z") {
			continue
		}
		if p, err := strconv.Atoi(filepath.Base(dir)); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// describePids names each pid with its command line and parent.
func describePids(pids []int) string {
	var files []string
	for _, p := range pids {
		files = append(files, fmt.Sprintf("/proc/%d/cmdline", p))
	}
	return describeProcs(files)
}
