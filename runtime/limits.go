package runtime

import (
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/bundle"

	"github.com/toolgate/toolgate/runtime/shim"
)

// SandboxLimits are the per-call resource limits of a sandboxed call, shared
// by every sandbox backend (bwrap applies them with the enter shim and a
// cgroup, oci writes them into the runtime spec). DefaultSandboxLimits gives
// the documented defaults; serve flags may change them.
//
// Rlimits can only be lowered on a host without CAP_SYS_RESOURCE: a value
// above the server's hard limit makes every call fail to start, never run
// with a higher limit.
type SandboxLimits struct {
	// Pids caps the processes (and threads) of one call through a pids
	// cgroup; 0 means no cgroup limit. Default 256.
	Pids int64
	// Memory caps the memory (and swap) of one call through a memory
	// cgroup, in bytes; 0 means no cgroup limit. Default 512 MiB.
	Memory int64
	// NoFile is RLIMIT_NOFILE (soft = hard). Default 1024.
	NoFile uint64
	// NProc is RLIMIT_NPROC (soft = hard). It is not enforced for a
	// process whose kernel uid is 0, which is why sandboxes run the tool as
	// an unprivileged uid. Default 512.
	NProc uint64
	// Core is RLIMIT_CORE in bytes. Default 0: no core dumps.
	Core uint64
	// FSize is RLIMIT_FSIZE in bytes: the largest file a tool can write.
	// Default 1 GiB.
	FSize uint64
	// TmpSize is the size of the private /tmp tmpfs, in bytes. Default
	// 64 MiB.
	TmpSize int64
	// EgressConns and EgressBytes bound the traffic of one call of a tool
	// with an egress allowlist: the connections it may ask for through the
	// proxy (allowed or refused) and the bytes it may move both ways; 0
	// means no bound. Defaults 256 and 256 MiB.
	EgressConns int
	EgressBytes int64
	// IDs are the host ids sandboxes run tools as when toolgate is root
	// (never 0): by default a pair of its own for each sandbox, from a
	// range no account uses (IDRange).
	IDs IDRange
}

// The default sandbox limits.
const (
	DefaultPids    = 256
	DefaultMemory  = 512 << 20
	DefaultNoFile  = 1024
	DefaultNProc   = 512
	DefaultCore    = 0
	DefaultFSize   = 1 << 30
	DefaultTmpSize = 64 << 20

	DefaultEgressConns = 256
	DefaultEgressBytes = 256 << 20
)

// DefaultSandboxLimits returns the documented defaults.
func DefaultSandboxLimits() SandboxLimits {
	return SandboxLimits{
		Pids:    DefaultPids,
		Memory:  DefaultMemory,
		NoFile:  DefaultNoFile,
		NProc:   DefaultNProc,
		Core:    DefaultCore,
		FSize:   DefaultFSize,
		TmpSize: DefaultTmpSize,

		EgressConns: DefaultEgressConns,
		EgressBytes: DefaultEgressBytes,

		IDs: DefaultIDRange(),
	}
}

// Validate reports the first limit that cannot be applied as given.
func (l SandboxLimits) Validate() error {
	switch {
	case l.Pids < 0:
		return fmt.Errorf("sandbox limit pids %d: want 0 (no cgroup limit) or more", l.Pids)
	case l.Memory < 0:
		return fmt.Errorf("sandbox limit memory %d: want 0 (no cgroup limit) or more", l.Memory)
	case l.Memory > 0 && l.Memory < 4<<20:
		return fmt.Errorf("sandbox limit memory %d: want at least 4 MiB", l.Memory)
	case l.NoFile < 8:
		return fmt.Errorf("sandbox limit nofile %d: want at least 8", l.NoFile)
	case l.NProc == 0:
		return errors.New("sandbox limit nproc 0: want at least 1")
	case l.FSize == 0:
		return errors.New("sandbox limit fsize 0: want at least 1")
	case l.TmpSize <= 0:
		return fmt.Errorf("sandbox limit tmp size %d: want more than 0", l.TmpSize)
	case l.EgressConns < 0:
		return fmt.Errorf("sandbox limit egress connections %d: want 0 (no limit) or more", l.EgressConns)
	case l.EgressBytes < 0:
		return fmt.Errorf("sandbox limit egress bytes %d: want 0 (no limit) or more", l.EgressBytes)
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
	return bundle.Policy{
		Host: host,
		UID:  uid,
		GID:  gid,
		Rlimits: bundle.Rlimits{
			NoFile: l.NoFile, NProc: l.NProc, Core: l.Core, FSize: l.FSize,
		},
		TmpSize: l.TmpSize,
		Pids:    l.Pids,
		Memory:  l.Memory,
		Shim:    shim,
		Seccomp: true,

		EgressConns: l.EgressConns,
		EgressBytes: l.EgressBytes,
	}
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
