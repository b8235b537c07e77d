package proc

import (
	"os/exec"
	"slices"
	"testing"
)

// TestChildPids: a child this process started is listed until it is
// reaped, and not after.
func TestChildPids(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Skipf("SKIPPING: no sleep: %v", err)
	}
	pid := cmd.Process.Pid
	if got := ChildPids(); !slices.Contains(got, pid) {
		t.Errorf("ChildPids() = %v, want it to hold %d", got, pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if got := ChildPids(); slices.Contains(got, pid) {
		t.Errorf("ChildPids() = %v after the reap, want it without %d", got, pid)
	}
}
