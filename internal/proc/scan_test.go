package proc

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestDescendants: a child and the grandchild it started are listed below
// this process, with their states, and the child's own listing holds the
// grandchild alone.
func TestDescendants(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 10 & wait")
	if err := cmd.Start(); err != nil {
		t.Skipf("SKIPPING: no /bin/sh: %v", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	var below []Process
	for range 200 {
		if below = Descendants(cmd.Process.Pid); len(below) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(below) != 1 {
		t.Fatalf("Descendants(sh) = %v, want the one sleep", below)
	}
	all := Descendants(os.Getpid())
	pids := make([]int, 0, len(all))
	for _, p := range all {
		pids = append(pids, p.Pid)
		if p.State == 0 {
			t.Errorf("process %d without a state", p.Pid)
		}
	}
	for _, want := range []int{cmd.Process.Pid, below[0].Pid} {
		if !slices.Contains(pids, want) {
			t.Errorf("Descendants(self) = %v, want it to hold %d", pids, want)
		}
	}
	if got := Descendants(below[0].Pid); len(got) != 0 {
		t.Errorf("Descendants(sleep) = %v, want none", got)
	}
}

// TestStatusAndCgroups: this process's status has its resident size, its
// cgroup file at least one line; a pid that does not exist has neither.
func TestStatusAndCgroups(t *testing.T) {
	if st := StatusKiB(os.Getpid()); st == nil || st["VmRSS"] <= 0 {
		t.Errorf("StatusKiB(self)[VmRSS] = %v, want more than 0", st["VmRSS"])
	}
	if got := Cgroups(os.Getpid()); len(got) == 0 {
		t.Error("Cgroups(self) = none, want a line per hierarchy")
	}
	const gone = 1 << 30 // above pid_max
	if st := StatusKiB(gone); st != nil {
		t.Errorf("StatusKiB(%d) = %v, want nil", gone, st)
	}
	if got := Cgroups(gone); got != nil {
		t.Errorf("Cgroups(%d) = %v, want nil", gone, got)
	}
	if got := PSS(gone); got != 0 {
		t.Errorf("PSS(%d) = %d, want 0", gone, got)
	}
}

// TestFDs: a descriptor this process opened is listed, and so are the
// standard ones. (That a closed one is not cannot be told: the scan's own
// descriptor takes the lowest free number.)
func TestFDs(t *testing.T) {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := FDs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, fd) || !slices.Contains(got, 0) {
		t.Errorf("FDs() = %v, want it to hold 0 and %d", got, fd)
	}
	syscall.Close(fd)
}
