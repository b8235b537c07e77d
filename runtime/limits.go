package runtime

import (
	"github.com/toolgate/toolgate/bundle"

	"github.com/toolgate/toolgate/runtime/shim"
)

// SandboxLimits are what a sandbox backend is configured with beside its
// binaries: the per-call limits (bundle.Limits, the one value the Policy
// carries too) and the host ids its sandboxes run as. IDs are not in
// bundle.Limits because they are not a sandbox fact but a resource the
// runtime hands out (IDs, ids.go); the Policy gets the pair a tool sees.
type SandboxLimits struct {
	bundle.Limits
	// IDs are the host ids sandboxes run tools as when toolgate is root
	// (never 0): by default a pair of its own for each sandbox, from a
	// range no account uses (IDRange).
	IDs IDRange
}

// DefaultSandboxLimits returns the documented defaults
// (bundle.DefaultLimits, DefaultIDRange).
func DefaultSandboxLimits() SandboxLimits {
	return SandboxLimits{Limits: bundle.DefaultLimits(), IDs: DefaultIDRange()}
}

// Validate reports the first limit that cannot be applied as given.
func (l SandboxLimits) Validate() error {
	if err := l.Limits.Validate(); err != nil {
		return err
	}
	return l.IDs.Validate()
}

// Policy is the sandbox policy of these limits on host, with shim bound
// inside: what every backend renders. Seccomp is always on. Its ids are
// those a tool sees: bwrap maps them onto the sandbox's host ids; the OCI
// backend, which runs the tool as its host ids, sets them per sandbox.
func (l SandboxLimits) Policy(host bundle.Host, shim string) bundle.Policy {
	uid, gid := uint32(SandboxUID), uint32(SandboxGID)
	if l.IDs.Shared {
		uid, gid = l.IDs.UID, l.IDs.GID
	}
	return bundle.Policy{Host: host, UID: uid, GID: gid, Limits: l.Limits, Shim: shim, Seccomp: true}
}

// ShimRlimits returns a policy's rlimits in the form the shims take, in a
// fixed order: nofile, nproc, core, fsize.
func ShimRlimits(r bundle.Rlimits) []shim.Rlimit {
	return []shim.Rlimit{
		{Name: "nofile", Value: r.NoFile},
		{Name: "nproc", Value: r.NProc},
		{Name: "core", Value: r.Core},
		{Name: "fsize", Value: r.FSize},
	}
}
