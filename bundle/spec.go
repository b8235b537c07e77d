package bundle

import (
	"errors"
	"fmt"
	"io/fs"
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
	// Env is the exact environment of the container process.
	Env []string `json:"env"`
}

// Bind is one read-only bind of a host path at the same or another path.
type Bind struct {
	Source string `json:"source"`
	Dest   string `json:"dest"`
	// Dir is true for a directory (bound "rro"), false for a file ("ro").
	Dir bool `json:"dir"`
}

// Policy is the sandbox of a call: everything but the tool.
type Policy struct {
	// Rootfs is the absolute path of the skeleton rootfs (read-only).
	Rootfs string `json:"rootfs"`
	// UID and GID run the process; 0 is refused.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Rlimits are applied soft = hard.
	Rlimits Rlimits `json:"rlimits"`
	// TmpSize is the /tmp tmpfs size in bytes.
	TmpSize int64 `json:"tmpSize"`
	// Pids and Memory are cgroup limits; 0 leaves the limit out.
	Pids   int64 `json:"pids,omitempty"`
	Memory int64 `json:"memory,omitempty"`
	// MemorySwap also caps memory plus swap at Memory (needs swap
	// accounting on the host).
	MemorySwap bool `json:"memorySwap,omitempty"`
	// CgroupsPath is linux.cgroupsPath, required.
	CgroupsPath string `json:"cgroupsPath"`
	// SystemBinds are the host's /usr (and non-merged /bin, /lib...) and
	// the /etc allow-list, as SystemBinds returns them.
	SystemBinds []Bind `json:"systemBinds"`
	// Shim is the host path of the toolgate binary, bound at ShimPath.
	Shim string `json:"shim"`
	// Seccomp asks for the default seccomp profile (see DefaultSeccomp).
	Seccomp bool `json:"seccomp"`
}

// EtcAllowList are the /etc entries a sandboxed tool may see, when they
// exist on the host: the dynamic loader's configuration, name service
// files, time zone, and TLS roots. Never all of /etc.
var EtcAllowList = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/localtime", "/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/hosts",
	"/etc/ssl", "/etc/ca-certificates",
}

// UsrMerge are the top-level directories that a usr-merged host makes
// symlinks into /usr (the skeleton provides them as symlinks).
var UsrMerge = []string{"/bin", "/sbin", "/lib", "/lib64"}

// SystemBinds returns the host binds every sandbox gets: /usr, the entries
// of UsrMerge that are real directories on the host (a host without
// usr-merge), and the entries of EtcAllowList that exist. lstat and stat
// are the host's (os.Lstat, os.Stat); a missing entry is left out, any
// other error is returned.
func SystemBinds(lstat, stat func(string) (fs.FileInfo, error)) ([]Bind, error) {
	binds := []Bind{{Source: "/usr", Dest: "/usr", Dir: true}}
	for _, p := range UsrMerge {
		fi, err := lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("system bind %q: %w", p, err)
		}
		if fi.IsDir() {
			binds = append(binds, Bind{Source: p, Dest: p, Dir: true})
		}
	}
	for _, p := range EtcAllowList {
		fi, err := stat(p) // follows /etc/localtime → /usr/share/zoneinfo/...
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("system bind %q: %w", p, err)
		}
		binds = append(binds, Bind{Source: p, Dest: p, Dir: fi.IsDir()})
	}
	return binds, nil
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
	for _, b := range p.SystemBinds {
		opts = append(opts, WithReadonlyBind(b.Source, b.Dest, b.Dir))
	}
	opts = append(opts,
		WithReadonlyBind(p.Shim, ShimPath, false),
		WithReadonlyBind(t.Dir, t.Dir, true),
	)
	if !covered(t.Exe, t.Dir, p.SystemBinds) {
		opts = append(opts, WithReadonlyBind(t.Exe, t.Exe, false))
	}
	opts = append(opts, WithArgs(t.Args...), WithEnv(t.Env), WithCwd(t.Dir))
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

// covered reports whether exe lies inside the tool dir or a directory
// bind, so that it needs no bind of its own.
func covered(exe, dir string, binds []Bind) bool {
	if within(exe, dir) {
		return true
	}
	for _, b := range binds {
		if b.Dir && b.Source == b.Dest && within(exe, b.Dest) {
			return true
		}
	}
	return false
}

// within reports whether p is dir or below it, on path boundaries (/etc
// does not contain /etcd).
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// check is one validation rule of Spec's inputs.
type check func(Tool, Policy) error

var checks = []check{
	checkExe,
	checkDir,
	checkArgs,
	checkEnv,
	checkRootfs,
	checkUser,
	checkRlimits,
	checkTmpSize,
	checkResources,
	checkCgroupsPath,
	checkShim,
	checkSystemBinds,
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

// cleanAbs reports whether p is absolute and already clean (no "..", no
// "//", no trailing slash): binds are made at exactly the path given.
func cleanAbs(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == p && !strings.ContainsRune(p, 0)
}

// reserved are container paths the spec itself mounts or masks; a tool dir
// or exe there would shadow or expose them.
var reserved = []string{"/proc", "/dev", "/sys", "/tmp", "/etc", "/.toolgate"}

func checkExe(t Tool, _ Policy) error {
	if !cleanAbs(t.Exe) {
		return fmt.Errorf("tool exe %q: want a clean absolute path", t.Exe)
	}
	for _, r := range []string{"/proc", "/dev", "/sys", "/.toolgate"} {
		if within(t.Exe, r) {
			return fmt.Errorf("tool exe %q: under %s, which the sandbox mounts itself", t.Exe, r)
		}
	}
	return nil
}

func checkDir(t Tool, _ Policy) error {
	if !cleanAbs(t.Dir) {
		return fmt.Errorf("tool dir %q: want a clean absolute path", t.Dir)
	}
	if t.Dir == "/" {
		return fmt.Errorf("tool dir %q: binding / would expose the whole host", t.Dir)
	}
	for _, r := range reserved {
		// The dir may lie below /tmp (bound over the private tmpfs) but
		// must not be /tmp itself, nor contain or lie in the others.
		if t.Dir == r || within(r, t.Dir) || (r != "/tmp" && within(t.Dir, r)) {
			return fmt.Errorf("tool dir %q: overlaps %s, which the sandbox mounts or hides itself", t.Dir, r)
		}
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

func checkEnv(t Tool, _ Policy) error {
	seen := map[string]bool{}
	for i, e := range t.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return fmt.Errorf("tool env[%d] %q: want KEY=VALUE", i, e)
		}
		if seen[k] {
			return fmt.Errorf("tool env[%d] %q: duplicate %s", i, e, k)
		}
		seen[k] = true
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

func checkSystemBinds(_ Tool, p Policy) error {
	if !slices.ContainsFunc(p.SystemBinds, func(b Bind) bool { return b.Dest == "/usr" }) {
		return errors.New("policy system binds: /usr is missing")
	}
	for i, b := range p.SystemBinds {
		if !cleanAbs(b.Source) || !cleanAbs(b.Dest) {
			return fmt.Errorf("policy system binds[%d] %q→%q: want clean absolute paths", i, b.Source, b.Dest)
		}
		for _, whole := range []string{"/", "/etc", "/proc", "/sys", "/dev", "/root", "/home", "/run", "/var"} {
			if b.Source == whole || b.Dest == whole {
				return fmt.Errorf("policy system binds[%d] %q: never bind all of %s", i, b.Source, whole)
			}
		}
		if within(b.Dest, "/etc") && !slices.Contains(EtcAllowList, b.Dest) {
			return fmt.Errorf("policy system binds[%d] %q: not in the /etc allow-list", i, b.Dest)
		}
	}
	return nil
}
