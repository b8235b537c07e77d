package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestServerDirs(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	own := Prefix + pid
	oci := own + OCISuffix
	c := &Manager{
		V2: "/sys/fs/cgroup/unified/" + own,
		V1: map[string]string{"pids": "/sys/fs/cgroup/pids/" + own, "memory": "/sys/fs/cgroup/memory/process_api/abc/" + own},
		host: Host{
			Mounts: []Mount{
				{Root: "/", Point: "/sys/fs/cgroup/unified", FSType: "cgroup2"},
				{Root: "/", Point: "/sys/fs/cgroup/memory", FSType: "cgroup", Super: []string{"rw", "memory"}},
				{Root: "/", Point: "/sys/fs/cgroup/cpu,cpuacct", FSType: "cgroup", Super: []string{"rw", "cpu", "cpuacct"}},
				// A container's mount shows its own subtree only.
				{Root: "/libpod/1", Point: "/sys/fs/cgroup/pids", FSType: "cgroup", Super: []string{"rw", "pids"}},
				{Root: "/", Point: "/tmp", FSType: "tmpfs"},
			},
			own: map[string]string{"0": "/", "memory": "/process_api/abc", "cpu": "/", "cpuacct": "/", "pids": "/libpod/1"},
		},
	}
	for _, tc := range []struct {
		oci  bool
		want []string
	}{
		{false, []string{c.V2, c.V1["pids"], c.V1["memory"]}},
		{true, []string{
			c.V2, c.V1["pids"], c.V1["memory"],
			"/sys/fs/cgroup/unified/" + oci,
			"/sys/fs/cgroup/memory/" + oci,
			"/sys/fs/cgroup/memory/process_api/abc/" + oci,
			"/sys/fs/cgroup/memory/process_api/" + oci,
			"/sys/fs/cgroup/cpu,cpuacct/" + oci,
			"/sys/fs/cgroup/pids/" + oci,
		}},
	} {
		got := c.ServerDirs(tc.oci)
		if !slices.Equal(got, tc.want) {
			t.Errorf("ServerDirs(%v) =\n%s\nwant\n%s", tc.oci, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
		for _, d := range got {
			if !IsServerDir(d, os.Getpid()) {
				t.Errorf("ServerDirs(%v) lists %s, which IsServerDir refuses", tc.oci, d)
			}
		}
	}
	if got := (*Manager)(nil).ServerDirs(true); got != nil {
		t.Errorf("nil Manager: ServerDirs = %v, want nil", got)
	}
}

func TestIsServerDir(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want bool
	}{
		{"/sys/fs/cgroup/unified/toolgate-42", true},
		{"/sys/fs/cgroup/memory/a/b/toolgate-42.oci", true},
		{"/sys/fs/cgroup/unified/toolgate-42.server", false}, // the server's own leaf
		{"/sys/fs/cgroup/unified/toolgate-421", false},
		{"/sys/fs/cgroup/unified/toolgate-4", false},
		{"/sys/fs/cgroup/unified/toolgate-42/pool-3", false},
		{"/sys/fs/cgroup/unified", false},
		{"/sys/fs/cgroup/unified/toolgate-42/", false},
		{"/sys/fs/cgroup/x/../toolgate-42", false},
		{"toolgate-42", false},
	} {
		if got := IsServerDir(tc.dir, 42); got != tc.want {
			t.Errorf("IsServerDir(%q, 42) = %v, want %v", tc.dir, got, tc.want)
		}
	}
	if IsServerDir("/sys/fs/cgroup/toolgate-0", 0) {
		t.Error("IsServerDir(toolgate-0, 0) = true, want false")
	}
}

func sleeper(t *testing.T, attr *syscall.SysProcAttr) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sleep", "60")
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// exited reports whether cmd ended within 3 s (reaping it).
func exited(cmd *exec.Cmd) bool {
	done := make(chan struct{})
	go func() { _, _ = cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(3 * time.Second):
		return false
	}
}

// TestKillServerDirsRefuses: a directory not named as the server's, or
// not on a cgroup filesystem (a look-alike whose cgroup.procs lists a
// live process), is refused and nothing is killed; one that does not
// exist is nothing to do.
func TestKillServerDirsRefuses(t *testing.T) {
	pid := os.Getpid()
	cmd := sleeper(t, nil)
	fake := filepath.Join(t.TempDir(), Prefix+strconv.Itoa(pid))
	if err := os.Mkdir(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cgroup.procs", "cgroup.kill"} {
		if err := os.WriteFile(filepath.Join(fake, f), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found, err := KillServerDirs([]string{fake}, pid)
	if !errors.Is(err, ErrNotCgroup) || len(found) != 0 {
		t.Errorf("KillServerDirs(%s) = %v, %v; want none, %v", fake, found, err, ErrNotCgroup)
	}
	found, err = KillServerDirs([]string{"/sys/fs/cgroup"}, pid)
	if want := "/sys/fs/cgroup is not a cgroup directory of server " + strconv.Itoa(pid); err == nil || err.Error() != want || len(found) != 0 {
		t.Errorf("KillServerDirs(/sys/fs/cgroup) = %v, %v; want none, %q", found, err, want)
	}
	missing := "/sys/fs/cgroup/" + Prefix + strconv.Itoa(pid) + OCISuffix
	if found, err := KillServerDirs([]string{missing}, pid); err != nil || len(found) != 0 {
		t.Errorf("KillServerDirs(%s) = %v, %v; want none, nil", missing, found, err)
	}
	if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
		t.Errorf("the look-alike's listed process was signalled: %v", err)
	}
	if _, err := os.Stat(fake); err != nil {
		t.Errorf("the look-alike was removed: %v", err)
	}
}

// TestKillServerDirs: the server's directories on this host, with a
// process in a group of each hierarchy, are killed and removed.
func TestKillServerDirs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING: makes cgroups: needs root (or a delegated cgroup tree)")
	}
	c := Setup()
	defer c.Close()
	if c.V2 == "" && len(c.V1) == 0 {
		t.Skipf("SKIPPING: no usable cgroups here: %v", c.Notes)
	}
	g, err := c.NewGroup("g", Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	attr := &syscall.SysProcAttr{}
	if g.FD() >= 0 {
		attr.UseCgroupFD, attr.CgroupFD = true, g.FD()
	}
	cmd := sleeper(t, attr)
	for _, j := range g.Joins() {
		if err := os.WriteFile(j, []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	dirs := c.ServerDirs(true)
	found, err := KillServerDirs(dirs, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if want := c.ServerDirs(false); !slices.Equal(found, want) {
		t.Errorf("KillServerDirs found %v, want %v", found, want)
	}
	if !exited(cmd) {
		t.Errorf("process %d in the server's group still running", cmd.Process.Pid)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want removed", d, err)
		}
	}
}
