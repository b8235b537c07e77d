package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/conf"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/status"
)

// sandboxFlags are the per-call limits of sandboxed calls and the pool of
// sandboxes prepared ahead of them.
type sandboxFlags struct {
	limits rt.SandboxLimits
	pool   rt.PoolConfig
	// which of the id flags were given
	rangeSet, fixedUID, fixedGID bool
}

func (f *sandboxFlags) register(fs *flag.FlagSet) {
	f.limits = rt.DefaultSandboxLimits()
	fs.Int64Var(&f.limits.Pids, "sandbox-pids", f.limits.Pids, "processes and threads of one sandboxed call (pids cgroup; 0 = none)")
	fs.Int64Var(&f.limits.Memory, "sandbox-memory", f.limits.Memory, "memory of one sandboxed call in bytes (memory cgroup; 0 = none)")
	fs.Uint64Var(&f.limits.NoFile, "sandbox-nofile", f.limits.NoFile, "RLIMIT_NOFILE of sandboxed tools")
	fs.Uint64Var(&f.limits.NProc, "sandbox-nproc", f.limits.NProc, "RLIMIT_NPROC of sandboxed tools (per sandbox uid)")
	fs.Uint64Var(&f.limits.Core, "sandbox-core", f.limits.Core, "RLIMIT_CORE of sandboxed tools in bytes")
	fs.Uint64Var(&f.limits.FSize, "sandbox-fsize", f.limits.FSize, "RLIMIT_FSIZE of sandboxed tools in bytes")
	fs.Int64Var(&f.limits.TmpSize, "sandbox-tmp", f.limits.TmpSize, "size of a sandbox's private /tmp in bytes")
	fs.IntVar(&f.limits.EgressConns, "sandbox-egress-connections", f.limits.EgressConns, "connections one call of a tool with an egress allowlist may ask its proxy for, allowed or refused (0 = no limit)")
	fs.Int64Var(&f.limits.EgressBytes, "sandbox-egress-bytes", f.limits.EgressBytes, "bytes one call of a tool with an egress allowlist may move through its proxy, both ways (0 = no limit)")
	fs.Func("sandbox-id-range", fmt.Sprintf("FIRST:COUNT: when toolgate is root, each sandbox (a call's, a prepared one, a helper's, a downstream server's) runs as a uid and gid of its own, FIRST+i, held until nothing of it can run; no account, group or subordinate id range may fall in it (default %d:%d)", rt.DefaultIDFirst, rt.DefaultIDCount), f.rangeFlag)
	fs.Func("sandbox-uid", "one fixed uid that every sandbox runs as when toolgate is root, instead of --sandbox-id-range, never 0 (sandboxes then share it: prefer the range)", f.fixedFlag(true))
	fs.Func("sandbox-gid", "the gid of --sandbox-uid (default the same number), never 0", f.fixedFlag(false))
	f.pool = rt.PoolConfig{Depth: rt.DefaultPoolDepth, Max: rt.DefaultPoolMax, MaxAge: rt.DefaultPoolMaxAge}
	fs.IntVar(&f.pool.Depth, "sandbox-pool", f.pool.Depth, "sandboxes kept prepared ahead of their calls for each test-class tool (and one for each sandboxed stdio downstream server); 0 turns the pool off")
	fs.IntVar(&f.pool.Max, "sandbox-pool-max", f.pool.Max, "prepared sandboxes held at once, in all; beyond it the least recently called tool's are given up (0: no bound)")
	fs.DurationVar(&f.pool.MaxAge, "sandbox-pool-max-age", f.pool.MaxAge, "a prepared sandbox older than this is replaced")
}

// check reports a pool setting that cannot be used.
func (f *sandboxFlags) check() error {
	switch {
	case f.pool.Depth < 0:
		return fmt.Errorf("--sandbox-pool %d: want 0 (off) or more", f.pool.Depth)
	case f.pool.Max < 0:
		return fmt.Errorf("--sandbox-pool-max %d: want 0 (no bound) or more", f.pool.Max)
	case f.pool.MaxAge <= 0:
		return fmt.Errorf("--sandbox-pool-max-age %s: want more than 0", f.pool.MaxAge)
	case f.fixedGID && !f.fixedUID:
		return errors.New("--sandbox-gid goes with --sandbox-uid")
	case f.fixedUID && f.rangeSet:
		return errors.New("--sandbox-uid and --sandbox-id-range: give one (a fixed uid, or a range of one uid per sandbox)")
	}
	if err := f.limits.IDs.Validate(); err != nil {
		if f.limits.IDs.Shared {
			return fmt.Errorf("--sandbox-uid %d --sandbox-gid %d: %w", f.limits.IDs.UID, f.limits.IDs.GID, err)
		}
		return fmt.Errorf("--sandbox-id-range: %w", err)
	}
	if !f.limits.IDs.Shared {
		if found := f.limits.IDs.Accounts(); len(found) > 0 {
			return fmt.Errorf("--sandbox-id-range %s holds ids in use here (%s): a process of that account could reach the sandboxes of its id; choose a range no account, group or subordinate range uses", f.limits.IDs, strings.Join(found, ", "))
		}
	}
	return nil
}

// rangeFlag parses --sandbox-id-range FIRST:COUNT.
func (f *sandboxFlags) rangeFlag(v string) error {
	first, count, ok := strings.Cut(v, ":")
	a, err1 := strconv.ParseUint(first, 10, 32)
	n, err2 := strconv.ParseUint(count, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("want FIRST:COUNT (%d:%d)", rt.DefaultIDFirst, rt.DefaultIDCount)
	}
	f.limits.IDs = rt.IDRange{UID: uint32(a), GID: uint32(a), Count: uint32(n)}
	f.rangeSet = true
	return nil
}

// fixedFlag parses --sandbox-uid (uid) or --sandbox-gid: one pair that
// every sandbox shares.
func (f *sandboxFlags) fixedFlag(uid bool) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return fmt.Errorf("want a number: %w", err)
		}
		ids := &f.limits.IDs
		if !f.fixedUID && !f.fixedGID {
			*ids = rt.IDRange{UID: uint32(n), GID: uint32(n), Count: 1, Shared: true}
		}
		if uid {
			ids.UID, f.fixedUID = uint32(n), true
			if !f.fixedGID {
				ids.GID = uint32(n)
			}
		} else {
			ids.GID, f.fixedGID = uint32(n), true
		}
		return nil
	}
}

// poolTemplates are what the pool keeps sandboxes prepared for: every
// served test-class tool, in conf order (the Template of the invocation
// the call handler runs, server.InvocationOf), then the built-ins' helper
// sandboxes (builtin.PoolTemplates). A tool with an egress line is kept
// too: its proxy is still the call's own (its caps and audit records are
// the call's), started at the release (rt.EgressAttacher); a backend that
// cannot take it then (oci) makes its sandbox on the call's path
// (rt.Pool.CanPrepare).
func poolTemplates(c *conf.Config, served []status.Tool, helpers []rt.Template) []rt.Template {
	names := map[string]bool{}
	for _, t := range served {
		if t.Kind == status.KindExternal {
			names[t.Name] = true
		}
	}
	var out []rt.Template
	if c != nil {
		for _, t := range c.Tools {
			if t.Class == conf.ClassTest && names[t.Name] {
				out = append(out, server.InvocationOf(t).Template)
			}
		}
	}
	return append(out, helpers...)
}

// ids are the host ids sandboxes run as, for the access checks at load:
// the range (or the fixed pair) when the server is root, the server's own
// ids otherwise (the zero range, not checked).
func (f *sandboxFlags) ids() rt.IDRange {
	if os.Geteuid() == 0 {
		return f.limits.IDs
	}
	return rt.IDRange{}
}

// sandboxToolCheck returns the conf load hook: a test-class tool whose dir
// or exe the sandbox cannot use safely refuses the line. Answers are
// remembered per (dir, exe): a conf names the same ones on many lines.
func sandboxToolCheck(ids rt.IDRange) func(conf.Tool) error {
	seen := map[[2]string]error{}
	return func(t conf.Tool) error {
		if t.Class != conf.ClassTest {
			return nil
		}
		key := [2]string{t.DirResolved, t.ExeResolved}
		err, ok := seen[key]
		if !ok {
			err = rt.CheckSandboxTool(t.DirResolved, t.ExeResolved, ids)
			seen[key] = err
		}
		return err
	}
}

// newSandbox returns the chosen backend, set up beside serving: what can
// be checked without starting a process is checked here (a backend that
// fails it is unavailable from the start), the self-test runs in the
// background, and a sandboxed call that arrives before it has finished
// waits for it within its own timeout. Test-class tools answer isError
// while the backend is unavailable, never run unsandboxed.
//
// The error is that of the checks before the self-test: the built-ins that
// need a helper are then not served at all.
func (s *settings) newSandbox(shim string, cg *cgroup.Manager, log *logrus.Logger) (*rt.Sandbox, error) {
	start, err := s.prepareSandbox(rt.Backend(s.backend), shim, cg, log)
	if err != nil {
		log.WithError(err).WithField("backend", s.backend).Error("sandbox backend unavailable: test-class tools answer isError, never run unsandboxed; the built-ins that need a helper are not served")
		return rt.FailedSandbox(s.backend, err), err
	}
	return rt.NewSandbox(s.backend, func(ctx context.Context) (rt.Runner, error) {
		t := time.Now()
		b, err := start(ctx)
		e := log.WithFields(logrus.Fields{"backend": s.backend, "ms": time.Since(t).Milliseconds()})
		if err != nil && ctx.Err() != nil {
			// The server is stopping (stdin closed, a signal) before the
			// self-test ended: nothing is wrong with the backend, and a
			// client such as Claude Code files every stderr line as an
			// error.
			e.WithError(err).Debug("sandbox self-test cancelled: the server is stopping")
			return nil, err
		}
		if err != nil {
			e.WithError(err).Error("sandbox backend unavailable: its self-test failed; test-class tools and the built-ins' helpers will answer isError, never run unsandboxed")
			return nil, err
		}
		e.Debug("sandbox backend ready")
		if p := rt.NewPool(b.runner, s.sandbox.pool); p != nil {
			return p, nil
		}
		return b.runner, nil
	}), nil
}

// startedSandbox is a backend set up and proven to work, with what cmd
// uses of it besides running calls, as its preparer states it.
type startedSandbox struct {
	runner rt.Runner
	// describe is doctor's one-line summary of the backend; nil says
	// nothing more than that it is available.
	describe func() string
	// close releases what the backend holds on the host (the oci
	// backend's containers and directories); nil when it holds nothing.
	close func() error
}

// about is doctor's summary of the backend.
func (b startedSandbox) about() string {
	if b.describe == nil {
		return "available"
	}
	return b.describe()
}

// release releases what the backend holds on the host, if anything (the
// zero startedSandbox, of a backend that did not start, holds nothing).
func (b startedSandbox) release() {
	if b.close != nil {
		_ = b.close()
	}
}

// sandboxStart finishes setting up a prepared backend and proves it works
// here (bounded by ctx). On error the startedSandbox is the zero one.
type sandboxStart func(ctx context.Context) (startedSandbox, error)

// sandboxBackend is a row of the backend table: how to prepare the
// backend, and what it can do beyond running tool calls.
type sandboxBackend struct {
	// prepare checks the backend with the configured limits as far as
	// that needs no process (log may be nil) and returns how to start it.
	prepare func(s *settings, shim string, cg *cgroup.Manager, log *logrus.Logger) (sandboxStart, error)
	// services: the backend also runs long-lived stdio servers (the
	// registry's downstream servers); the others run tools only.
	services bool
}

// sandboxBackends are the sandbox backends, by name (rt.KnownBackends).
var sandboxBackends = map[rt.Backend]sandboxBackend{
	rt.BackendBwrap: {prepare: (*settings).prepareBwrapSandbox, services: true},
	rt.BackendOCI:   {prepare: (*settings).prepareOCISandbox},
}

// prepareSandbox prepares backend b (see sandboxBackends).
func (s *settings) prepareSandbox(b rt.Backend, shim string, cg *cgroup.Manager, log *logrus.Logger) (sandboxStart, error) {
	row, ok := sandboxBackends[b]
	if !ok {
		_, err := rt.ParseBackend(string(b))
		return nil, fmt.Errorf("backend %q is not available in this build: %w", b, err)
	}
	return row.prepare(s, shim, cg, log)
}

func (s *settings) prepareBwrapSandbox(shim string, cg *cgroup.Manager, _ *logrus.Logger) (sandboxStart, error) {
	r, err := bwrap.Prepare(bwrap.Config{Shim: shim, Cgroups: cg, Limits: s.sandbox.limits})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (startedSandbox, error) {
		if err := r.SelfTest(ctx); err != nil {
			return startedSandbox{}, err
		}
		return startedSandbox{runner: r, describe: r.String}, nil
	}, nil
}

// newSandboxBackend sets up backend b and proves it works, before it
// returns (doctor, selftest). Release it with its release method.
func (s *settings) newSandboxBackend(b rt.Backend, shim string, cg *cgroup.Manager, log *logrus.Logger) (startedSandbox, error) {
	start, err := s.prepareSandbox(b, shim, cg, log)
	if err != nil {
		return startedSandbox{}, err
	}
	return start(context.Background())
}

// confOptions are the options serve, check, spec and doctor load
// tools.conf with: the built-ins' names, the sandbox's load-time check of
// each test-class tool, and the host view every sandbox sees (a
// credential's secret file there is refused).
func (s *settings) confOptions() conf.Options {
	return conf.Options{
		Builtins: builtin.Names(),
		Check:    sandboxToolCheck(s.sandbox.ids()),
		Visible:  sandboxVisible,
	}
}

// sandboxVisible reports whether a canonical host path is in the host view
// every sandbox binds (/usr, the /etc allow-list, the shim).
func sandboxVisible(p string) bool {
	host, err := bundle.DetectHost(os.Lstat, os.Stat, os.Readlink)
	if err != nil {
		return true // unknown: refuse rather than risk it
	}
	if host.Visible(p) {
		return true
	}
	shim, err := rt.FindShim()
	return err == nil && p == shim
}
