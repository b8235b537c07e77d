package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testbin"
)

// TestSelftestCommand builds toolgate and toolgate-shim and runs
// `toolgate selftest --all --short` as an operator would after deploying:
// every guarantee must be reported held, on every backend.
func TestSelftestCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING: the oci backend needs root")
	}
	dir := testbin.Dir(t)
	for out, args := range map[string][]string{
		"toolgate":      {"build", "-tags", "seccomp", "-o", filepath.Join(dir, "toolgate"), "."},
		"toolgate-shim": {"build", "-o", filepath.Join(dir, "toolgate-shim"), "../toolgate-shim"},
	} {
		cmd := exec.Command("go", args...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", out, err, b)
		}
	}
	cmd := exec.Command(filepath.Join(dir, "toolgate"), "selftest", "--all", "--short")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("selftest: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "selftest: every guarantee held") || strings.Contains(s, "[BROKEN]") {
		t.Errorf("selftest output:\n%s", s)
	}
	for _, b := range []string{"== bwrap", "== oci/runc"} {
		if !strings.Contains(s, b) {
			t.Errorf("selftest did not test %s:\n%s", b, s)
		}
	}
	if n := strings.Count(s, "[held]"); n < 2*12 {
		t.Errorf("%d guarantees held, want every case on both backends:\n%s", n, s)
	}
}
