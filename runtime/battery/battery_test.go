package battery

import (
	"context"
	"os"
	"testing"

	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
)

func TestMain(m *testing.M) {
	rt.MaybeShim()
	if err := ReexecWithSecret(); err != nil {
		panic(err)
	}
	// As main does: ReexecWithSecret left an inherited descriptor open.
	if err := rt.SealInheritedFDs(); err != nil {
		panic(err)
	}
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// testLimits are small, so that the bombs end quickly.
func testLimits() rt.SandboxLimits {
	l := rt.DefaultSandboxLimits()
	l.Pids = 64
	l.Memory = 128 << 20
	l.TmpSize = 16 << 20
	return l
}

// backend is one sandbox under test.
type backend struct {
	name   string
	run    rt.Runner
	limits rt.SandboxLimits
}

func requireOrSkip(t *testing.T, format string, a ...any) {
	t.Helper()
	if os.Getenv("TOOLGATE_REQUIRE_ALL") == "1" {
		t.Fatalf("required backend unavailable: "+format, a...)
	}
	t.Logf("SKIPPING backend: "+format, a...)
}

// backends returns every sandbox backend that runs here.
func backends(t *testing.T) []backend {
	t.Helper()
	cg := rt.DetectCgroups()
	t.Cleanup(cg.Close)
	var out []backend
	if b, err := bwrap.New(context.Background(), bwrap.Config{Shim: testbin.Shim(t), Cgroups: cg, Limits: testLimits()}); err != nil {
		requireOrSkip(t, "bwrap: %v", err)
	} else {
		out = append(out, backend{"bwrap", b, testLimits()})
	}
	// Without cgroup limits (a container's configuration) bwrap is exec'd
	// directly, with no enter shim: the rlimits alone bound the call.
	nolim := testLimits()
	nolim.Pids, nolim.Memory = 0, 0
	if b, err := bwrap.New(context.Background(), bwrap.Config{Shim: testbin.Shim(t), Cgroups: cg, Limits: nolim}); err != nil {
		requireOrSkip(t, "bwrap without cgroup limits: %v", err)
	} else {
		out = append(out, backend{"bwrap/no-cgroup-limits", b, nolim})
	}
	out = append(out, ociBackends(t, cg)...)
	if len(out) == 0 {
		t.Skip("no sandbox backend runs here")
	}
	return out
}

// TestBattery runs every case through every backend: each guarantee must
// hold (a skipped case is a failure under TOOLGATE_REQUIRE_ALL=1).
func TestBattery(t *testing.T) {
	probe := Probe{Path: testbin.Probe(t)}
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			env, err := NewEnv(b.name, b.run, probe, b.limits)
			if err != nil {
				t.Fatal(err)
			}
			defer env.Close()
			for _, c := range Cases() {
				t.Run(c.Name, func(t *testing.T) {
					if c.Slow && testing.Short() {
						t.Skip("short mode")
					}
					o := Run(context.Background(), env, []Case{c})[0]
					switch o.State {
					case Held:
						t.Logf("held in %s", o.Elapsed)
					case Skipped:
						if c.Name == "memory-bomb" && b.limits.Memory == 0 {
							t.Logf("no memory limit configured: %s", o.Detail)
							return
						}
						requireOrSkip(t, "%s: %s", c.Name, o.Detail)
					default:
						t.Errorf("%s: %s\n%s", o.State, c.Guarantee, o.Detail)
					}
				})
			}
		})
	}
}

// TestBrokenSandboxIsReported runs the battery through the direct runner,
// which is no sandbox: the battery must say so, case by case, and change
// nothing on the host while doing it.
func TestBrokenSandboxIsReported(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cg := rt.DetectCgroups()
	t.Cleanup(cg.Close)
	env, err := NewEnv("direct", &directRunner{cg: cg, shim: self}, Probe{Path: testbin.Probe(t)}, testLimits())
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	outcomes := Run(context.Background(), env, Cases())
	broken := map[string]bool{}
	for _, o := range outcomes {
		broken[o.Case] = o.State == Broken
	}
	for _, c := range []string{"network", "read-only", "environment", "privileges", "host-invisible", "links", "fork-bomb", "memory-bomb"} {
		if !broken[c] {
			t.Errorf("case %s held on the unsandboxed direct runner", c)
		}
	}
	if _, err := os.Stat("/etc/new"); err == nil {
		t.Error("the battery wrote /etc/new on the host")
	}
}
