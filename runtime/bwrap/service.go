package bwrap

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/toolgate/toolgate/bundle"
	rt "github.com/toolgate/toolgate/runtime"
)

// StartService starts s, a long-lived server speaking on its stdin and
// stdout, in a sandbox with the policy of a tool call (user, pid, ipc, uts
// and cgroup namespaces, no capabilities, no new privileges, the host's
// /usr and /etc allow-list only, a private /tmp, the per-call limits and a
// cgroup of its own), with three differences that Plan.Service documents:
// the network is kept only when s.Network says so, s.Dir and s.ReadOnly are
// bound read-only, and the environment is rt.Env plus s.Env, passed
// through the environment of the enter shim and bwrap, never their argv.
//
// The Process owns the cgroup; killing it (or its exit) kills everything in
// the sandbox: bwrap runs with --die-with-parent and the server is PID 1
// of the sandbox's pid namespace.
func (r *Runner) StartService(ctx context.Context, s rt.Service) (*rt.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	plan, err := r.servicePlan(s)
	if err != nil {
		return nil, err
	}
	// The Process owns the ids from its start, and gives them back once
	// nothing of the sandbox can still run.
	id, err := r.ids.Acquire()
	if err != nil {
		return nil, err
	}
	eg, err := s.StartEgress(id.UID, id.GID)
	if err != nil {
		id.Release()
		return nil, err
	}
	env := rt.ServiceEnv(s.Env)
	if eg != nil {
		plan.EgressDir, plan.Trust = eg.Dir, eg.Trust
		if eg.Trust {
			env = append(env, bundle.TrustEnv...)
		}
	}
	filter, err := r.seccompFile()
	if err != nil {
		eg.Close()
		id.Release()
		return nil, err
	}
	defer filter.Close()
	group, st, err := r.enter(s.ID, plan, id)
	if err != nil {
		eg.Close()
		id.Release()
		return nil, err
	}
	p, err := rt.StartProcess(rt.ServiceCmd{
		Proc:   rt.Proc{Path: st.path, Args: st.argv, Env: env, Dir: "/", Group: group, ExtraFiles: []*os.File{filter}},
		Stderr: s.Stderr,
		Egress: eg,
		IDs:    id,
	})
	if err != nil {
		if group != nil {
			group.Close()
		}
		eg.Close()
		id.Release()
		return nil, err
	}
	return p, nil
}

// PrepareService starts the sandbox of service s ahead of its start
// (rt.ServicePreparer): the sandbox StartService would make, held by the
// standby shim until ReleaseService.
func (r *Runner) PrepareService(s rt.Service) (*rt.Standby, error) {
	if len(s.Egress) > 0 {
		// Its egress proxy lives with its process (rt.Service.StartEgress):
		// a service with an allowlist starts on its path.
		return nil, fmt.Errorf("sandbox %s: a service with an egress allowlist is not prepared ahead of its start", s.Name)
	}
	plan, err := r.servicePlan(s)
	if err != nil {
		return nil, err
	}
	plan.Standby = true
	return r.prepare(plan, rt.ServiceEnv(s.Env), fixedPaths(s.Dir, s.Path))
}

// ReleaseService starts the service a prepared sandbox holds.
func (r *Runner) ReleaseService(sb *rt.Standby, s rt.Service) (*rt.Process, error) {
	return sb.ReleaseService(s.Stderr)
}

// servicePlan checks s and returns its plan.
func (r *Runner) servicePlan(s rt.Service) (Plan, error) {
	if len(s.Argv) == 0 || !filepath.IsAbs(s.Argv[0]) || !filepath.IsAbs(s.Path) {
		return Plan{}, fmt.Errorf("start %s: want an absolute path and argv[0] (got %q, %q)", s.Name, s.Path, s.Argv)
	}
	if s.Dir != "" {
		if err := r.Check(s.Dir, s.Path); err != nil {
			return Plan{}, fmt.Errorf("sandbox %s: %w", s.Name, err)
		}
	} else if err := rt.CanExecute(s.Path, r.rng); err != nil {
		return Plan{}, fmt.Errorf("sandbox %s: %w", s.Name, err)
	}
	for _, p := range s.ReadOnly {
		if err := rt.CheckServiceBind(p); err != nil {
			return Plan{}, fmt.Errorf("sandbox %s: %w", s.Name, err)
		}
	}
	if s.Network && len(s.Egress) > 0 {
		return Plan{}, fmt.Errorf("sandbox %s: an egress allowlist beside the host's network", s.Name)
	}
	return Plan{
		Template: rt.Template{Name: s.Name, Path: s.Path, Argv: s.Argv, Dir: s.Dir},
		Service:  true, ShareNet: s.Network, ReadOnly: s.ReadOnly,
	}, nil
}

var (
	_ rt.ServiceStarter  = (*Runner)(nil)
	_ rt.ServicePreparer = (*Runner)(nil)
	_ rt.Preparer        = (*Runner)(nil)
)
