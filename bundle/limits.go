package bundle

import (
	"errors"
	"fmt"
)

// Limits are the per-call resource limits of a sandboxed call, one value
// for every sandbox backend and the Policy they render (bwrap applies them
// with a cgroup and, for the rlimits, the shim inside the sandbox; an OCI
// runtime from the spec). DefaultLimits gives the documented defaults;
// serve flags may change them.
//
// Rlimits can only be lowered on a host without CAP_SYS_RESOURCE: a value
// above the server's hard limit makes every call fail to start, never run
// with a higher limit.
type Limits struct {
	// Rlimits are applied soft = hard. NProc is not enforced for a
	// process whose kernel uid is 0, which is why sandboxes run the tool
	// as an unprivileged uid. Defaults: nofile 1024, nproc 512, core 0 (no
	// core dumps), fsize 1 GiB (the largest file a tool can write).
	Rlimits `json:"rlimits"`
	// TmpSize is the size in bytes of /tmp and of /dev/shm, the sandbox's
	// only writable places. Default 64 MiB.
	TmpSize int64 `json:"tmpSize"`
	// Pids caps the processes (and threads) of one call through a pids
	// cgroup, Memory its memory (and swap) in bytes through a memory
	// cgroup; 0 leaves the limit out. Defaults 256 and 512 MiB.
	Pids   int64 `json:"pids,omitempty"`
	Memory int64 `json:"memory,omitempty"`
	// EgressConns and EgressBytes bound one call's traffic through its
	// egress proxy (a tool with an allowlist): the connections it may ask
	// for, allowed or refused, and the bytes it may move both ways; 0
	// means no bound. Defaults 256 and 256 MiB.
	EgressConns int   `json:"egressConns,omitempty"`
	EgressBytes int64 `json:"egressBytes,omitempty"`
}

// The default limits.
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

// DefaultLimits returns the documented defaults.
func DefaultLimits() Limits {
	return Limits{
		Rlimits: Rlimits{NoFile: DefaultNoFile, NProc: DefaultNProc, Core: DefaultCore, FSize: DefaultFSize},
		TmpSize: DefaultTmpSize,
		Pids:    DefaultPids,
		Memory:  DefaultMemory,

		EgressConns: DefaultEgressConns,
		EgressBytes: DefaultEgressBytes,
	}
}

// Validate reports the first limit that cannot be applied as given.
func (l Limits) Validate() error {
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
	return nil
}
