// Package testbin builds toolgate's test programs (the probe) once per test
// binary and hands out their paths. The build goes to a 0755 directory
// under the system temp dir so that a sandbox uid can execute it.
package testbin

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	once  sync.Once
	dir   string
	probe string
	shim  string
	err   error
)

// Probe returns the path of the built probe program (internal/probe).
func Probe(t testing.TB) string {
	t.Helper()
	once.Do(build)
	if err != nil {
		t.Fatalf("build probe: %v", err)
	}
	return probe
}

// Shim returns the path of the built toolgate-shim (cmd/toolgate-shim), in a
// directory a sandbox uid can traverse.
func Shim(t testing.TB) string {
	t.Helper()
	once.Do(build)
	if err != nil {
		t.Fatalf("build test programs: %v", err)
	}
	return shim
}

// Dir returns a fresh 0755 directory that a sandbox uid can traverse,
// removed when the test ends. Its name has a fixed length
// (toolgate-test-XXXXXXXX) so that rendered tables stay aligned.
func Dir(t testing.TB) string {
	t.Helper()
	var d string
	for {
		d = filepath.Join(os.TempDir(), fmt.Sprintf("toolgate-test-%08x", rand.Uint32()))
		err := os.Mkdir(d, 0o755)
		if err == nil {
			break
		}
		if !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(d, 0o755); err != nil { // umask
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func build() {
	dir, err = os.MkdirTemp("", "toolgate-testbin-")
	if err != nil {
		return
	}
	if err = os.Chmod(dir, 0o755); err != nil {
		return
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	probe = filepath.Join(dir, "probe")
	shim = filepath.Join(dir, "toolgate-shim")
	for out, pkg := range map[string]string{probe: "./internal/probe", shim: "./cmd/toolgate-shim"} {
		cmd := exec.Command("go", "build", "-o", out, pkg) //nolint:gosec // builds the project's own test programs
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, e := cmd.CombinedOutput(); e != nil {
			err = &buildError{err: e, out: string(b)}
			return
		}
	}
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// ToolEnv is the environment of every tool, helper and downstream server,
// in the order toolgate sets it: exactly four variables. It is written out
// here, not taken from runtime.Env, so that a test comparing with it fails
// when the code's list changes (a fifth variable, another PATH).
var ToolEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"PAGER=cat",
	"GIT_PAGER=cat",
	"GIT_CONFIG_NOSYSTEM=1",
}

// RequireAllEnv is the variable that makes every missing prerequisite of
// a test a failure instead of a skip (CI sets it to 1), so that a skip can
// never hide a regression.
const RequireAllEnv = "TOOLGATE_REQUIRE_ALL"

// RequireAll reports whether RequireAllEnv is 1.
func RequireAll() bool { return os.Getenv(RequireAllEnv) == "1" }

// Missing ends t because what it needs is not here (a binary, a backend,
// root, a build tag): a skip that says so loudly, or, under
// TOOLGATE_REQUIRE_ALL=1, a failure. Every such skip goes through it.
func Missing(t testing.TB, format string, a ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, a...)
	if RequireAll() {
		t.Fatalf("%s=1 and a prerequisite is missing: %s", RequireAllEnv, msg)
	}
	t.Skipf("SKIPPED, a prerequisite is missing (%s=1 makes this a failure): %s", RequireAllEnv, msg)
}

// Cleanup removes the built programs; call it from TestMain after m.Run.
func Cleanup() {
	if dir != "" {
		os.RemoveAll(dir)
	}
}
