package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolgate/toolgate/internal/probes"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/battery"
	"github.com/toolgate/toolgate/runtime/cgroup"
)

// runBattery runs cases through r and prints each; false when a
// guarantee broke.
func runBattery(stdout io.Writer, name string, r rt.Runner, probe battery.Probe, limits rt.SandboxLimits, cases []battery.Case) bool {
	env, err := battery.NewEnv(name, r, probe, limits)
	if err != nil {
		fmt.Fprintf(stdout, "[BROKEN] %v\n", err)
		return false
	}
	defer env.Close()
	ok := true
	for _, c := range cases {
		o := battery.Run(context.Background(), env, []battery.Case{c})[0]
		switch o.State {
		case battery.Held:
			fmt.Fprintf(stdout, "[held]   %-15s %s\n", o.Case, o.Guarantee)
		case battery.Skipped:
			fmt.Fprintf(stdout, "[skip]   %-15s %s\n         %s\n", o.Case, o.Guarantee, o.Detail)
		default:
			ok = false
			fmt.Fprintf(stdout, "[BROKEN] %-15s %s\n         %s\n", o.Case, o.Guarantee, strings.ReplaceAll(o.Detail, "\n", "\n         "))
		}
	}
	return ok
}

// selftest runs the sandbox escape battery against the configured backend
// (or every backend with --all) and prints each guarantee as held or
// broken. It changes nothing on the host even where a guarantee is broken.
// It exits 1 when a guarantee is broken or a backend cannot start.
func selftest(args []string, stdout, stderr io.Writer) int {
	var s settings
	fs := flag.NewFlagSet("selftest", flag.ContinueOnError)
	s.register(fs)
	all := fs.Bool("all", false, "test every sandbox backend, not only --backend")
	short := fs.Bool("short", false, "leave out the slow cases (the 1 GB flood)")
	if !parse(fs, args, stderr) {
		return 2
	}
	// The battery checks that no sandbox sees the server's environment;
	// the secret must be in this process's environment from exec on.
	if err := battery.ReexecWithSecret(); err != nil {
		fmt.Fprintf(stderr, "toolgate selftest: %v\n", err)
		return 2
	}
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		fmt.Fprintf(stderr, "toolgate selftest: %v\n", err)
		return 2
	}
	shim, err := rt.FindShim()
	if err != nil {
		fmt.Fprintf(stderr, "toolgate selftest: %v\n", err)
		return 2
	}
	cg := cgroup.Setup()
	defer cg.Close()

	backends := []rt.Backend{rt.Backend(s.backend)}
	if *all {
		backends = rt.KnownBackends()
	}
	var cases []battery.Case
	for _, c := range battery.Cases() {
		if !(*short && c.Slow) {
			cases = append(cases, c)
		}
	}
	// The toolgate binary itself is the probe: nothing to install.
	probe := battery.Probe{Path: self, Prefix: []string{probes.ShimArg}}
	failed := false
	for _, b := range backends {
		name := string(b)
		if b == rt.BackendOCI {
			name += "/" + s.oci.runtime
		}
		fmt.Fprintf(stdout, "== %s\n", name)
		r, err := s.newSandboxBackend(b, shim, cg, nil)
		if err != nil {
			fmt.Fprintf(stdout, "[BROKEN] backend cannot start: %v\n", err)
			failed = true
			continue
		}
		if err := rt.CanExecute(self, s.sandbox.ids()); err != nil {
			fmt.Fprintf(stdout, "[BROKEN] the probe (this binary) cannot run in the sandbox: %v\n", err)
			r.release()
			failed = true
			continue
		}
		// The backend as configured, then with the pool on: every call in
		// a sandbox prepared ahead of it (what serve runs by default).
		if !runBattery(stdout, name, r.runner, probe, s.sandbox.limits, cases) {
			failed = true
		}
		if pool := rt.NewPool(r.runner, s.sandbox.pool); pool != nil {
			fmt.Fprintf(stdout, "== %s, pool on (--sandbox-pool %d)\n", name, s.sandbox.pool.Depth)
			if !runBattery(stdout, name+"/pool", pool, probe, s.sandbox.limits, cases) {
				failed = true
			}
			_ = pool.Close() // its prepared sandboxes
		}
		r.release()
	}
	if failed {
		fmt.Fprintln(stdout, "\nselftest: a guarantee is broken or a backend cannot start (see above)")
		return 1
	}
	fmt.Fprintln(stdout, "\nselftest: every guarantee held")
	return 0
}
