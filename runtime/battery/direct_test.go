package battery

import (
	"context"

	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/direct"
)

// directRunner is the unsandboxed direct backend, the battery's negative
// control.
type directRunner struct {
	cg   *cgroup.Manager
	shim string
}

func (d *directRunner) Run(ctx context.Context, inv rt.Invocation) (rt.Result, error) {
	return (&direct.Runner{Cgroups: d.cg, Shim: d.shim}).Run(ctx, inv)
}
