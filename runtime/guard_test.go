package runtime

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"
	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/shim"
)

// guardServerEnv makes the test binary guardServer (TestMain).
const guardServerEnv = "TOOLGATE_TEST_GUARD_SERVER"

// guardServer is the server-like parent of TestGuardKillsWhatOutlivesTheServer:
// it sets up its cgroups as serve does, starts the guard (unless
// guardServerEnv is "unguarded"), and starts processes in its cgroups
// that have no parent-death signal, as bubblewrap's child has none while
// it waits for its parent to write the uid maps: one in a group of every
// hierarchy (cgroup2 at clone, v1 joined after), one in the v1 hierarchy
// alone. It prints "guard PID orphans PID... dirs DIR..." and waits to be
// killed.
func guardServer(mode string) {
	cg := cgroup.Setup()
	dirs := cg.ServerDirs(false)
	if len(dirs) == 0 {
		fmt.Println("no cgroups:", strings.Join(cg.Notes, "; "))
		os.Exit(0)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	guardPid := 0
	if mode != "unguarded" {
		g, err := StartGuard(self, dirs, os.Stderr)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		guardPid = g.cmd.Process.Pid
	}
	managers := []*cgroup.Manager{cg}
	if len(cg.V1) > 0 && cg.V2 != "" {
		managers = append(managers, &cgroup.Manager{V1: cg.V1})
	}
	var orphans []string
	for i, m := range managers {
		g, err := m.NewGroup("orphan-"+strconv.Itoa(i), cgroup.Limits{Pids: 64})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		cmd := exec.Command("/bin/sleep", "600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if fd := g.FD(); fd >= 0 {
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		}
		if err := cmd.Start(); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		for _, j := range g.Joins() {
			if err := os.WriteFile(j, []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
				fmt.Println("error:", err)
				os.Exit(1)
			}
		}
		orphans = append(orphans, strconv.Itoa(cmd.Process.Pid))
	}
	fmt.Printf("guard %d orphans %s dirs %s\n", guardPid, strings.Join(orphans, " "), strings.Join(dirs, " "))
	select {}
}

// TestGuardKillsWhatOutlivesTheServer: a server killed with SIGKILL
// leaves processes in its cgroups that have no parent-death signal (as
// bubblewrap's child has none until it execs, and blocks for ever when
// bwrap dies before the uid maps are written); its guard kills them, in
// the cgroup2 and the v1 hierarchies, removes the server's directories
// and exits, within a moment. While the server lives, the guard kills
// nothing: not on its parent-death signal (sent when the server's thread
// that started it ends, not only at the server's death), nor on SIGTERM.
// Unguarded, the same processes outlive the server.
func TestGuardKillsWhatOutlivesTheServer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING: makes cgroups: needs root (or a delegated cgroup tree)")
	}
	for _, tc := range []struct {
		mode    string
		survive bool
	}{
		{"guarded", false},
		{"unguarded", true},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			srv, guard, orphans, dirs := startGuardServer(t, tc.mode)
			if tc.mode == "guarded" {
				guardIdleWhileServerLives(t, guard, orphans)
			}
			if err := srv.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = srv.Wait()
			killed := time.Now()
			left := waitGuardGone(guard, orphans, 3*time.Second)
			if tc.survive {
				if len(left) != len(orphans) {
					t.Fatalf("unguarded: left %v of %v: the check cannot tell a guard's work", left, orphans)
				}
				return
			}
			if len(left) > 0 {
				t.Fatalf("left 3 s after the server's SIGKILL: %v (orphans %v)", left, orphans)
			}
			if alive(guard) {
				t.Errorf("guard %d still running 3 s after its server's death", guard)
			}
			t.Logf("orphans %v and guard %d gone %s after the server's SIGKILL", orphans, guard, time.Since(killed).Round(time.Millisecond))
			for _, d := range dirs {
				if _, err := os.Stat(d); err == nil {
					t.Errorf("server directory %s still there", d)
				}
			}
		})
	}
}

// startGuardServer starts guardServer in mode and returns it, its
// guard's pid (0 unguarded), its orphans and its cgroup directories; the
// test's cleanup kills what is left.
func startGuardServer(t *testing.T, mode string) (srv *exec.Cmd, guard int, orphans []int, dirs []string) {
	t.Helper()
	srv = exec.Command(self(t))
	srv.Env = append(os.Environ(), guardServerEnv+"="+mode)
	srv.Stderr = os.Stderr
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("server: %v %q", err, line)
	}
	if rest, ok := strings.CutPrefix(line, "no cgroups:"); ok {
		testbin.Missing(t, "no usable cgroups here:%s", rest)
	}
	guard, orphans, dirs = parseGuardServer(t, line)
	t.Cleanup(func() {
		for _, p := range orphans {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		_, _ = cgroup.KillServerDirs(dirs, srv.Process.Pid)
	})
	for _, p := range orphans {
		if !alive(p) {
			t.Fatalf("orphan %d not running", p)
		}
	}
	if mode == "guarded" && guard <= 0 {
		t.Fatalf("server said %q: no guard", line)
	}
	return srv, guard, orphans, dirs
}

// guardIdleWhileServerLives: a parent-death signal or a SIGTERM sent to
// the guard while its server lives kills nothing, nor the guard.
func guardIdleWhileServerLives(t *testing.T, guard int, orphans []int) {
	t.Helper()
	for _, sig := range []syscall.Signal{shim.GuardSignal, syscall.SIGTERM} {
		if err := syscall.Kill(guard, sig); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if !alive(guard) {
		t.Fatalf("guard %d ended on a signal while its server lives", guard)
	}
	for _, p := range orphans {
		if !alive(p) {
			t.Fatalf("guard killed %d while its server lives", p)
		}
	}
}

// waitGuardGone waits up to d for the guard and the orphans to end and
// returns the orphans still running.
func waitGuardGone(guard int, orphans []int, d time.Duration) []int {
	var left []int
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		left = left[:0]
		for _, p := range orphans {
			if alive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 && (guard <= 0 || !alive(guard)) || time.Now().After(deadline) {
			return left
		}
	}
}

// parseGuardServer reads guardServer's line.
func parseGuardServer(t *testing.T, line string) (guard int, orphans []int, dirs []string) {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "guard" || f[2] != "orphans" {
		t.Fatalf("server said %q", line)
	}
	guard, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("server said %q", line)
	}
	i := 3
	for ; i < len(f) && f[i] != "dirs"; i++ {
		p, err := strconv.Atoi(f[i])
		if err != nil {
			t.Fatalf("server said %q", line)
		}
		orphans = append(orphans, p)
	}
	if i == len(f) || len(orphans) == 0 {
		t.Fatalf("server said %q", line)
	}
	for _, d := range f[i+1:] {
		dirs = append(dirs, filepath.Clean(d))
	}
	return guard, orphans, dirs
}

// TestGuardRefusesOtherDirs: the guard refuses, before it waits for
// anything, a directory that is not named as one of its server's (another
// server's, the hierarchy's root, the server's own ".server" leaf), and
// kills nothing.
func TestGuardRefusesOtherDirs(t *testing.T) {
	pid := os.Getpid()
	for _, dir := range []string{
		"/sys/fs/cgroup",
		fmt.Sprintf("/sys/fs/cgroup/%s%d", cgroup.Prefix, pid+1),
		fmt.Sprintf("/sys/fs/cgroup/%s%d.server", cgroup.Prefix, pid),
	} {
		t.Run(dir, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			spec := shim.Spec{Mode: shim.Guard, Cgroups: []string{dir}, Parent: pid, ParentFD: 3}
			cmd := exec.Command(self(t), spec.Args()...)
			cmd.ExtraFiles = []*os.File{r}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err = cmd.Run()
			r.Close()
			want := fmt.Sprintf("guard: %s is not a cgroup directory of server %d", dir, pid)
			if code := cmd.ProcessState.ExitCode(); code != 127 || !strings.Contains(stderr.String(), want) {
				t.Fatalf("guard --cgroup %s = exit %d (%v) %q, want 127 %q", dir, code, err, stderr.String(), want)
			}
		})
	}
}
