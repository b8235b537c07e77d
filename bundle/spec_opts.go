package bundle

import (
	"fmt"
	"path"
	"slices"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SpecVersion is the ociVersion written into every spec. The types come
// from runtime-spec v1.3, but the spec uses nothing newer than 1.0.2, and
// crun 1.8 refuses a version it does not know ("unknown version specified").
const SpecVersion = "1.0.2"

// Mount options of read-only binds: directories get recursive read-only
// ("rro"), files plain "ro" (crun rejects "rro" on a file bind).
var (
	dirBindOptions  = []string{"rbind", "rro", "nosuid", "nodev"}
	fileBindOptions = []string{"rbind", "ro", "nosuid", "nodev"}
)

// MaskedPaths and ReadonlyPaths are runc's defaults.
var (
	MaskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap",
	}
	ReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	// devReadonly makes /dev read-only once the runtime has made its
	// device nodes (the bwrap backend remounts its /dev read-only too):
	// its tmpfs would otherwise take writes. /dev/shm, mounted on it, stays
	// writable, capped like /tmp.
	devReadonly = "/dev"
)

// Opt changes a spec. Options are applied in order by Apply and return the
// first problem as an error.
type Opt func(*specs.Spec) error

// Apply applies opts to s in order and returns the first error.
func Apply(s *specs.Spec, opts ...Opt) error {
	for _, o := range opts {
		if err := o(s); err != nil {
			return err
		}
	}
	return nil
}

// Default returns the hardened base spec: read-only root "rootfs", no
// terminal, uid/gid 65534, no_new_privs, every capability set empty, the
// default rlimits of the package (nofile 1024, nproc 512, core 0,
// fsize 1 GiB), new network, pid, ipc, uts, mount and cgroup namespaces,
// hostname "sandbox", /proc, /dev, /dev/pts, /dev/shm and a 64 MiB /tmp,
// runc's masked and read-only paths, and a deny-all device cgroup. It has
// no args, no binds, no seccomp and no cgroup limits: options add them.
func Default() *specs.Spec {
	return &specs.Spec{
		Version:  SpecVersion,
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Hostname: Hostname,
		Process: &specs.Process{
			Terminal: false,
			User:     specs.User{UID: SandboxUID, GID: SandboxGID},
			Cwd:      "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding:    []string{},
				Effective:   []string{},
				Inheritable: []string{},
				Permitted:   []string{},
				Ambient:     []string{},
			},
			Rlimits:         rlimits(Rlimits{NoFile: 1024, NProc: 512, Core: 0, FSize: 1 << 30}),
			NoNewPrivileges: true,
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			shmMount(64 << 20),
			tmpMount(64 << 20),
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.NetworkNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.CgroupNamespace},
			},
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
			},
			MaskedPaths:   slices.Clone(MaskedPaths),
			ReadonlyPaths: append(slices.Clone(ReadonlyPaths), devReadonly),
		},
	}
}

func shmMount(size int64) specs.Mount {
	return specs.Mount{
		Destination: "/dev/shm", Type: "tmpfs", Source: "shm",
		Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=" + strconv.FormatInt(size, 10)},
	}
}

func tmpMount(size int64) specs.Mount {
	return specs.Mount{
		Destination: "/tmp", Type: "tmpfs", Source: "tmpfs",
		Options: []string{"nosuid", "nodev", "mode=1777", "size=" + strconv.FormatInt(size, 10)},
	}
}

// Rlimits are the process rlimits of the container (soft = hard).
type Rlimits struct {
	NoFile uint64
	NProc  uint64
	Core   uint64
	FSize  uint64
}

func rlimits(r Rlimits) []specs.POSIXRlimit {
	return []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Hard: r.NoFile, Soft: r.NoFile},
		{Type: "RLIMIT_NPROC", Hard: r.NProc, Soft: r.NProc},
		{Type: "RLIMIT_CORE", Hard: r.Core, Soft: r.Core},
		{Type: "RLIMIT_FSIZE", Hard: r.FSize, Soft: r.FSize},
	}
}

// ensureProcess, ensureLinux and ensureResources guard nil fields.
func ensureProcess(s *specs.Spec) *specs.Process {
	if s.Process == nil {
		s.Process = &specs.Process{}
	}
	return s.Process
}

func ensureLinux(s *specs.Spec) *specs.Linux {
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
	return s.Linux
}

func ensureResources(s *specs.Spec) *specs.LinuxResources {
	l := ensureLinux(s)
	if l.Resources == nil {
		l.Resources = &specs.LinuxResources{}
	}
	return l.Resources
}

// WithArgs sets the process argv.
func WithArgs(args ...string) Opt {
	return func(s *specs.Spec) error {
		if len(args) == 0 {
			return fmt.Errorf("process args: empty")
		}
		ensureProcess(s).Args = slices.Clone(args)
		return nil
	}
}

// WithEnv sets the process environment to exactly env.
func WithEnv(env []string) Opt {
	return func(s *specs.Spec) error {
		ensureProcess(s).Env = slices.Clone(env)
		return nil
	}
}

// WithCwd sets the working directory.
func WithCwd(dir string) Opt {
	return func(s *specs.Spec) error {
		if !path.IsAbs(dir) {
			return fmt.Errorf("cwd %q: not absolute", dir)
		}
		ensureProcess(s).Cwd = dir
		return nil
	}
}

// WithUser sets the uid and gid of the process. uid or gid 0 is refused:
// a root process in the container is root on the host.
func WithUser(uid, gid uint32) Opt {
	return func(s *specs.Spec) error {
		if uid == 0 || gid == 0 {
			return fmt.Errorf("user %d:%d: the sandbox never runs as uid or gid 0", uid, gid)
		}
		ensureProcess(s).User = specs.User{UID: uid, GID: gid}
		return nil
	}
}

// WithRlimits sets nofile, nproc, core and fsize (soft = hard).
func WithRlimits(r Rlimits) Opt {
	return func(s *specs.Spec) error {
		ensureProcess(s).Rlimits = rlimits(r)
		return nil
	}
}

// WithRootfs sets the root path (the skeleton rootfs), read-only.
func WithRootfs(p string) Opt {
	return func(s *specs.Spec) error {
		s.Root = &specs.Root{Path: p, Readonly: true}
		return nil
	}
}

// WithTmpSize sets the size in bytes of the private /tmp tmpfs, and of
// /dev/shm: the sandbox's two writable places are capped alike.
func WithTmpSize(size int64) Opt {
	return func(s *specs.Spec) error {
		for _, m := range []specs.Mount{tmpMount(size), shmMount(size)} {
			i := slices.IndexFunc(s.Mounts, func(x specs.Mount) bool { return x.Destination == m.Destination })
			if i < 0 {
				s.Mounts = append(s.Mounts, m)
			} else {
				s.Mounts[i] = m
			}
		}
		return nil
	}
}

// WithReadonlyBind binds source at dest read-only: recursively read-only
// ("rro") when dir is true, plain "ro" for a file.
func WithReadonlyBind(source, dest string, dir bool) Opt {
	return func(s *specs.Spec) error {
		opts := fileBindOptions
		if dir {
			opts = dirBindOptions
		}
		s.Mounts = append(s.Mounts, specs.Mount{
			Destination: dest, Type: "bind", Source: source, Options: slices.Clone(opts),
		})
		return nil
	}
}

// WithoutRecursiveReadonly relaxes every "rro" bind to "ro", for runtimes
// that reject "rro" (runsc 2022, which keeps submounts of a "ro" bind
// read-only itself). Under runc "ro" is not recursive: do not use it there.
func WithoutRecursiveReadonly() Opt {
	return func(s *specs.Spec) error {
		for i := range s.Mounts {
			for j, o := range s.Mounts[i].Options {
				if o == "rro" {
					s.Mounts[i].Options[j] = "ro"
				}
			}
		}
		return nil
	}
}

// WithPidsLimit caps the processes of the container through its pids
// cgroup.
func WithPidsLimit(n int64) Opt {
	return func(s *specs.Spec) error {
		if n <= 0 {
			return fmt.Errorf("pids limit %d: want more than 0", n)
		}
		ensureResources(s).Pids = &specs.LinuxPids{Limit: &n}
		return nil
	}
}

// WithMemoryLimit caps the memory of the container in bytes; with swap set,
// memory plus swap is capped at the same value (no swap use).
func WithMemoryLimit(n int64, swap bool) Opt {
	return func(s *specs.Spec) error {
		if n <= 0 {
			return fmt.Errorf("memory limit %d: want more than 0", n)
		}
		m := &specs.LinuxMemory{Limit: &n}
		if swap {
			sw := n
			m.Swap = &sw
		}
		ensureResources(s).Memory = m
		return nil
	}
}

// WithCgroupsPath sets linux.cgroupsPath.
func WithCgroupsPath(p string) Opt {
	return func(s *specs.Spec) error {
		if p == "" {
			return fmt.Errorf("cgroups path: empty")
		}
		ensureLinux(s).CgroupsPath = p
		return nil
	}
}

// WithSeccomp sets the default seccomp profile (see DefaultSeccomp). It is
// an error when this build has no seccomp support.
func WithSeccomp() Opt {
	return func(s *specs.Spec) error {
		p, err := DefaultSeccomp()
		if err != nil {
			return err
		}
		ensureLinux(s).Seccomp = p
		return nil
	}
}
