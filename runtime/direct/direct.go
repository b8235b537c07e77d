// Package direct runs read-class tools unsandboxed: execve of the
// configured absolute path with the fixed argv, the four-variable
// environment, stdin /dev/null, one pipe for stdout and stderr, in the
// tool's dir. Nothing the call starts outlives it: the call's processes are
// tracked by a cgroup2 group (killed as one) where the host offers one, and
// otherwise by the reap shim, a child subreaper that kills and reaps what
// the tool left when it exits.
package direct

import (
	"context"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/shim"
)

// Runner is the direct backend.
type Runner struct {
	// Cgroups is the host's cgroup support; without a cgroup2 part the
	// reap shim tracks the call instead.
	Cgroups *cgroup.Manager
	// Shim is the toolgate-shim binary (the reap shim).
	Shim string
}

// Tracking names how a call's processes are tracked: "cgroup2" or "reap".
func (r *Runner) Tracking() string {
	if r.Cgroups != nil && r.Cgroups.V2 != "" {
		return "cgroup2"
	}
	return "reap"
}

// Run runs inv directly.
func (r *Runner) Run(ctx context.Context, inv rt.Invocation) (rt.Result, error) {
	if len(inv.Egress) > 0 {
		// An allowlist is enforced only from inside a sandbox's own
		// network namespace: unsandboxed, it would be no bound at all.
		return rt.Result{}, fmt.Errorf("%s: an egress allowlist needs a sandbox: the direct backend never runs one", inv.Name)
	}
	if len(inv.Env) > 0 {
		// Seed 000: a read-class tool's environment is exactly the four.
		return rt.Result{}, fmt.Errorf("%s: variables of its own are for a sandboxed tool: the direct backend runs with exactly the four", inv.Name)
	}
	c := rt.Cmd{
		Proc: rt.Proc{Path: inv.Path, Args: inv.Argv, Env: rt.Env, Dir: inv.Dir},
		Call: inv.Call,
	}
	if r.Tracking() == "cgroup2" {
		g, err := r.Cgroups.NewGroup(inv.ID, cgroup.Limits{})
		if err == nil {
			defer g.Close()
			c.Group = g
			return rt.Exec(ctx, c)
		}
		// Tracking by the reap shim is as complete; only slower.
	}
	spec := shim.Spec{Mode: shim.Reap, Path: inv.Path, Argv: inv.Argv}
	c.Path = r.Shim
	c.Args = append([]string{r.Shim}, spec.Args()...)
	c.Stop = func(pid int) { _ = unix.Kill(pid, syscall.SIGTERM) }
	return rt.Exec(ctx, c)
}
