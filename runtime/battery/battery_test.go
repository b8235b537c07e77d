package battery

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
	"github.com/toolgate/toolgate/runtime/cgroup"
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
	l.EgressConns = 8
	l.EgressBytes = 4 << 20
	return l
}

// backend is one sandbox under test; missing, when set, is why it does
// not run here (its subtest is skipped loudly, or fails under
// TOOLGATE_REQUIRE_ALL=1).
type backend struct {
	name    string
	run     rt.Runner
	limits  rt.SandboxLimits
	missing string
}

// unavailable is a backend that does not run here, and why.
func unavailable(name, format string, a ...any) backend {
	return backend{name: name, missing: fmt.Sprintf(format, a...)}
}

// backends returns every sandbox backend, those that do not run here
// with the reason.
func backends(t *testing.T) []backend {
	t.Helper()
	cg := cgroup.Setup()
	t.Cleanup(cg.Close)
	var out []backend
	if b, err := bwrap.New(context.Background(), bwrap.Config{Shim: testbin.Shim(t), Cgroups: cg, Limits: testLimits()}); err != nil {
		out = append(out, unavailable("bwrap", "%v", err))
	} else {
		out = append(out, backend{name: "bwrap", run: b, limits: testLimits()})
	}
	// Without cgroup limits (a container's configuration) the enter shim
	// joins no cgroup: the rlimits alone bound the call.
	nolim := testLimits()
	nolim.Pids, nolim.Memory = 0, 0
	if b, err := bwrap.New(context.Background(), bwrap.Config{Shim: testbin.Shim(t), Cgroups: cg, Limits: nolim}); err != nil {
		out = append(out, unavailable("bwrap/no-cgroup-limits", "%v", err))
	} else {
		out = append(out, backend{name: "bwrap/no-cgroup-limits", run: b, limits: nolim})
	}
	out = append(out, ociBackends(t, cg)...)
	// Every backend again with the pool on: each call runs in a sandbox
	// prepared for it ahead of the call (Env.call checks it did).
	for _, b := range slices.Clip(out) {
		if b.missing != "" {
			out = append(out, unavailable(b.name+"/pool", "%s", b.missing))
			continue
		}
		p := rt.NewPool(b.run, rt.PoolConfig{Depth: 1, Max: 8, MaxAge: rt.DefaultPoolMaxAge})
		if p == nil {
			t.Fatalf("%s cannot prepare sandboxes", b.name)
		}
		t.Cleanup(func() { p.Close() })
		out = append(out, backend{name: b.name + "/pool", run: p, limits: b.limits})
	}
	return out
}

// TestBattery runs every case through every backend: each guarantee must
// hold (a skipped case is a failure under TOOLGATE_REQUIRE_ALL=1).
func TestBattery(t *testing.T) {
	probe := Probe{Path: testbin.Probe(t)}
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			if b.missing != "" {
				testbin.Missing(t, "the %s backend does not run here: %s", b.name, b.missing)
			}
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
							t.Skipf("not applicable: no memory limit configured for %s (%s)", b.name, o.Detail)
						}
						testbin.Missing(t, "%s on %s: %s", c.Name, b.name, o.Detail)
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
	cg := cgroup.Setup()
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
	for _, c := range []string{"network", "read-only", "environment", "privileges", "host-invisible", "links", "fork-bomb", "memory-bomb", "egress-reached", "egress-refused", "keyring"} {
		if !broken[c] {
			t.Errorf("case %s held on the unsandboxed direct runner", c)
		}
	}
	if _, err := os.Stat("/etc/new"); err == nil {
		t.Error("the battery wrote /etc/new on the host")
	}
}
