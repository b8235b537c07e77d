package bundle

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Tool is what one call runs: plain values, so that this package needs
// nothing of the runtime.
type Tool struct {
	// Exe is the canonical absolute executable the init shim execs. It is
	// bound read-only at its own path when it lies outside every other
	// bind.
	Exe string `json:"exe"`
	// Dir is the canonical tool directory: bound read-only at its own path
	// and the working directory.
	Dir string `json:"dir"`
	// Args is the container process's argv: the init shim at ShimPath and
	// its arguments (runtime/oci builds them).
	Args []string `json:"args"`
	// Egress, when set, is the host directory of the call's egress proxy
	// socket, bound read-only at EgressDir (a tool with an allowlist; the
	// network namespace stays the container's own).
	Egress string `json:"egress,omitempty"`
	// Trust, with Egress, binds its TrustBundle over SystemTrust (a call
	// with a credential), where the host view has SystemTrust.
	Trust bool `json:"trust,omitempty"`
}

// Policy is the sandbox of every call (policy.go says what it is): all
// but the tool, rendered by Spec and by the bwrap backend alike.
type Policy struct {
	// Host is what this host shows every sandbox (/usr, the usr-merge
	// names, the /etc allow-list), from DetectHost.
	Host Host `json:"host"`
	// UID and GID run the process; 0 is refused.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Limits are the per-call limits: the rlimits, the size of /tmp and
	// /dev/shm, the cgroup limits (0 leaves one out), the egress caps.
	Limits
	// MemorySwap also caps memory plus swap at Memory (needs swap
	// accounting on the host).
	MemorySwap bool `json:"memorySwap,omitempty"`
	// Shim is the host path of the shim binary, bound at ShimPath.
	Shim string `json:"shim"`
	// Seccomp asks for the default seccomp profile (see DefaultSeccomp).
	Seccomp bool `json:"seccomp"`
	// Rootfs and CgroupsPath place the OCI rendering: the absolute path
	// of the (read-only) skeleton rootfs, and linux.cgroupsPath. The bwrap
	// backend has no use for them.
	Rootfs      string `json:"rootfs,omitempty"`
	CgroupsPath string `json:"cgroupsPath,omitempty"`
}

// Spec returns the runtime spec of one call of t under p: Default, then the
// options p asks for, then extra (runtime-specific adjustments such as
// WithoutRecursiveReadonly). The inputs are validated first; every rule
// has a named check.
func Spec(t Tool, p Policy, extra ...Opt) (*specs.Spec, error) {
	if err := Validate(t, p); err != nil {
		return nil, err
	}
	s := Default()
	opts := []Opt{
		WithRootfs(p.Rootfs),
		WithUser(p.UID, p.GID),
		WithRlimits(p.Rlimits),
		WithTmpSize(p.TmpSize),
		WithCgroupsPath(p.CgroupsPath),
	}
	system := p.Host.Binds(false)
	for _, b := range system {
		opts = append(opts, WithReadonlyBind(b.Source, b.Dest, b.Dir))
	}
	opts = append(opts,
		WithReadonlyBind(p.Shim, ShimPath, false),
		WithReadonlyBind(t.Dir, t.Dir, true),
	)
	if !Within(t.Exe, t.Dir) && !p.Host.Visible(t.Exe) {
		opts = append(opts, WithReadonlyBind(t.Exe, t.Exe, false))
	}
	if t.Egress != "" {
		opts = append(opts, WithReadonlyBind(t.Egress, EgressDir, true))
		if t.Trust && p.Host.Visible(SystemTrust) {
			opts = append(opts, WithReadonlyBind(t.Egress+"/"+TrustBundle, SystemTrust, false))
		}
	}
	opts = append(opts, WithArgs(t.Args...), WithEnv(Env), WithCwd(t.Dir))
	if p.Pids > 0 {
		opts = append(opts, WithPidsLimit(p.Pids))
	}
	if p.Memory > 0 {
		opts = append(opts, WithMemoryLimit(p.Memory, p.MemorySwap))
	}
	if p.Seccomp {
		opts = append(opts, WithSeccomp())
	}
	if err := Apply(s, append(opts, extra...)...); err != nil {
		return nil, err
	}
	return s, nil
}

// check is one validation rule of Spec's inputs.
type check func(Tool, Policy) error

var checks = []check{
	checkExe,
	checkDir,
	checkArgs,
	checkEgress,
	checkRootfs,
	checkUser,
	checkRlimits,
	checkTmpSize,
	checkResources,
	checkCgroupsPath,
	checkShim,
	checkHost,
}

// Validate runs every check and returns the first failure.
func Validate(t Tool, p Policy) error {
	for _, c := range checks {
		if err := c(t, p); err != nil {
			return err
		}
	}
	return nil
}

func checkExe(t Tool, _ Policy) error {
	if err := CheckExe(t.Exe); err != nil {
		return fmt.Errorf("tool %w", err)
	}
	return nil
}

func checkDir(t Tool, _ Policy) error {
	if err := CheckToolDir(t.Dir); err != nil {
		return fmt.Errorf("tool %w", err)
	}
	return nil
}

func checkArgs(t Tool, _ Policy) error {
	if len(t.Args) == 0 || t.Args[0] == "" {
		return errors.New("tool args: empty")
	}
	if !path.IsAbs(t.Args[0]) {
		return fmt.Errorf("tool args[0] %q: want an absolute path (no PATH search)", t.Args[0])
	}
	return nil
}

func checkEgress(t Tool, _ Policy) error {
	if t.Egress != "" && !cleanAbs(t.Egress) {
		return fmt.Errorf("tool egress dir %q: want a clean absolute path", t.Egress)
	}
	return nil
}

func checkRootfs(_ Tool, p Policy) error {
	if !cleanAbs(p.Rootfs) || p.Rootfs == "/" {
		return fmt.Errorf("policy rootfs %q: want a clean absolute path to a skeleton directory, not /", p.Rootfs)
	}
	return nil
}

func checkUser(_ Tool, p Policy) error {
	if p.UID == 0 || p.GID == 0 {
		return fmt.Errorf("policy user %d:%d: the sandbox never runs as uid or gid 0", p.UID, p.GID)
	}
	return nil
}

func checkRlimits(_ Tool, p Policy) error {
	r := p.Rlimits
	switch {
	case r.NoFile == 0:
		return errors.New("policy rlimit nofile 0: want at least 1")
	case r.NProc == 0:
		return errors.New("policy rlimit nproc 0: want at least 1")
	case r.FSize == 0:
		return errors.New("policy rlimit fsize 0: want at least 1")
	}
	return nil
}

func checkTmpSize(_ Tool, p Policy) error {
	if p.TmpSize <= 0 {
		return fmt.Errorf("policy tmp size %d: want more than 0", p.TmpSize)
	}
	return nil
}

func checkResources(_ Tool, p Policy) error {
	if p.Pids < 0 {
		return fmt.Errorf("policy pids %d: want 0 (no limit) or more", p.Pids)
	}
	if p.Memory < 0 {
		return fmt.Errorf("policy memory %d: want 0 (no limit) or more", p.Memory)
	}
	if p.MemorySwap && p.Memory == 0 {
		return errors.New("policy memory swap: set without a memory limit")
	}
	return nil
}

func checkCgroupsPath(_ Tool, p Policy) error {
	if p.CgroupsPath == "" || path.Clean(p.CgroupsPath) != p.CgroupsPath || strings.Contains(p.CgroupsPath, "..") {
		return fmt.Errorf("policy cgroups path %q: want a clean non-empty path", p.CgroupsPath)
	}
	return nil
}

func checkShim(_ Tool, p Policy) error {
	if !cleanAbs(p.Shim) {
		return fmt.Errorf("policy shim %q: want the clean absolute path of the toolgate binary", p.Shim)
	}
	return nil
}

func checkHost(_ Tool, p Policy) error {
	for _, d := range p.Host.RootDirs {
		if !cleanAbs(d) || !slices.Contains(UsrMergeNames, strings.TrimPrefix(d, "/")) {
			return fmt.Errorf("policy host root dir %q: not one of the usr-merge names %q", d, UsrMergeNames)
		}
	}
	for _, n := range p.Host.UsrLinks {
		if !slices.Contains(UsrMergeNames, n) {
			return fmt.Errorf("policy host usr link %q: not one of the usr-merge names %q", n, UsrMergeNames)
		}
	}
	for i, b := range append(slices.Clone(p.Host.Etc), p.Host.NetEtc...) {
		if !cleanAbs(b.Source) || b.Source != b.Dest {
			return fmt.Errorf("policy host /etc entry %d %q→%q: want a clean absolute path bound at itself", i, b.Source, b.Dest)
		}
		if !slices.Contains(EtcAllowList, b.Dest) && !slices.Contains(NetEtcAllowList, b.Dest) {
			return fmt.Errorf("policy host /etc entry %q: not in the /etc allow-list (never all of /etc)", b.Dest)
		}
	}
	return nil
}
