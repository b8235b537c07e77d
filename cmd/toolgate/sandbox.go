package main

import (
	"flag"
	"fmt"
	"os"

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

// newSandbox sets up the chosen backend. An error says why it cannot run
// here; test-class tools then answer isError.
func (s *settings) newSandbox(shim string, cg *rt.Cgroups, log *logrus.Logger) (rt.Runner, error) {
	return s.newSandboxBackend(rt.Backend(s.backend), shim, cg, log)
}

// newSandboxBackend sets up backend b with the configured limits (log may
// be nil). It never returns a non-nil Runner with an error; close the
// Runner with closeSandbox.
func (s *settings) newSandboxBackend(b rt.Backend, shim string, cg *rt.Cgroups, log *logrus.Logger) (rt.Runner, error) {
	switch b {
	case rt.BackendOCI:
		return s.newOCISandbox(shim, log)
	case rt.BackendBwrap:
		r, err := bwrap.New(bwrap.Config{Shim: shim, Cgroups: cg, Limits: s.sandbox.limits})
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	return nil, fmt.Errorf("backend %q is not available in this build", b)
}
