package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/conf"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
)

// sandboxFlags are the per-call limits of sandboxed calls.
type sandboxFlags struct {
	limits rt.SandboxLimits
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
}

// sandboxIDs are the host uid and gid sandboxes run as: nobody when the
// server is root, the server's own ids otherwise (-1).
func sandboxIDs() (int, int) {
	if os.Geteuid() == 0 {
		return rt.SandboxUID, rt.SandboxGID
	}
	return -1, -1
}

// sandboxToolCheck returns the conf load hook: a test-class tool whose dir
// or exe the sandbox cannot use safely refuses the line. Answers are
// remembered per (dir, exe): a conf names the same ones on many lines.
func sandboxToolCheck() func(conf.Tool) error {
	uid, gid := sandboxIDs()
	seen := map[[2]string]error{}
	return func(t conf.Tool) error {
		if t.Class != conf.ClassTest {
			return nil
		}
		key := [2]string{t.DirResolved, t.ExeResolved}
		err, ok := seen[key]
		if !ok {
			err = rt.CheckSandboxTool(t.DirResolved, t.ExeResolved, uid, gid)
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
func (s *settings) newSandbox(shim string, cg *rt.Cgroups, log *logrus.Logger) (*rt.Sandbox, error) {
	start, err := s.prepareSandbox(rt.Backend(s.backend), shim, cg, log)
	if err != nil {
		log.WithError(err).WithField("backend", s.backend).Error("sandbox backend unavailable: test-class tools answer isError, never run unsandboxed; the built-ins that need a helper are not served")
		return rt.FailedSandbox(s.backend, err), err
	}
	return rt.NewSandbox(s.backend, func(ctx context.Context) (rt.Runner, error) {
		t := time.Now()
		r, err := start(ctx)
		e := log.WithFields(logrus.Fields{"backend": s.backend, "ms": time.Since(t).Milliseconds()})
		if err != nil {
			e.WithError(err).Error("sandbox backend unavailable: its self-test failed; test-class tools and the built-ins' helpers will answer isError, never run unsandboxed")
			return nil, err
		}
		e.Debug("sandbox backend ready")
		return r, nil
	}), nil
}

// sandboxStart finishes setting up a prepared backend and proves it works
// here (bounded by ctx). It never returns a non-nil Runner with an error.
type sandboxStart func(ctx context.Context) (rt.Runner, error)

// preparers are the sandbox backends, by name (rt.KnownBackends): each
// checks its backend with the configured limits as far as that needs no
// process (log may be nil) and returns how to start it.
var preparers = map[rt.Backend]func(s *settings, shim string, cg *rt.Cgroups, log *logrus.Logger) (sandboxStart, error){
	rt.BackendBwrap: (*settings).prepareBwrapSandbox,
	rt.BackendOCI:   (*settings).prepareOCISandbox,
}

// prepareSandbox prepares backend b (see preparers).
func (s *settings) prepareSandbox(b rt.Backend, shim string, cg *rt.Cgroups, log *logrus.Logger) (sandboxStart, error) {
	prepare, ok := preparers[b]
	if !ok {
		_, err := rt.ParseBackend(string(b))
		return nil, fmt.Errorf("backend %q is not available in this build: %w", b, err)
	}
	return prepare(s, shim, cg, log)
}

func (s *settings) prepareBwrapSandbox(shim string, cg *rt.Cgroups, _ *logrus.Logger) (sandboxStart, error) {
	r, err := bwrap.Prepare(bwrap.Config{Shim: shim, Cgroups: cg, Limits: s.sandbox.limits})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (rt.Runner, error) {
		if err := r.SelfTest(ctx); err != nil {
			return nil, err
		}
		return r, nil
	}, nil
}

// newSandboxBackend sets up backend b and proves it works, before it
// returns (doctor, selftest). Close the Runner with closeSandbox.
func (s *settings) newSandboxBackend(b rt.Backend, shim string, cg *rt.Cgroups, log *logrus.Logger) (rt.Runner, error) {
	start, err := s.prepareSandbox(b, shim, cg, log)
	if err != nil {
		return nil, err
	}
	return start(context.Background())
}
