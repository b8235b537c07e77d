package bwrap

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

func newRunner(t *testing.T) *Runner {
	t.Helper()
	if _, err := Find(); err != nil {
		if os.Getenv("TOOLGATE_REQUIRE_ALL") == "1" {
			t.Fatalf("bwrap required: %v", err)
		}
		t.Skipf("SKIPPING: %v", err)
	}
	cg := rt.DetectCgroups()
	t.Cleanup(cg.Close)
	r, err := New(Config{Shim: testbin.Shim(t), Cgroups: cg, Limits: rt.DefaultSandboxLimits()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

func TestRunSmoke(t *testing.T) {
	r := newRunner(t)
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	for _, args := range [][]string{{"env"}, {"id"}, {"cwd"}, {"status"}, {"pid"}, {"net", "127.0.0.1:1"}, {"write", dir + "/x", "/tmp/x", "/x", "/etc/x"}} {
		res, err := r.Run(context.Background(), rt.Invocation{ID: "smoke" + args[0], Path: probe, Argv: append([]string{probe}, args...), Dir: dir, Timeout: 10 * time.Second, MaxBytes: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v: exit %d %s in %s\n%s", args, res.ExitCode, res.Limit, res.Elapsed, res.Output)
	}
}
