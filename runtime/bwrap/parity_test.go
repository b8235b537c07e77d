package bwrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/egress/allowlist"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/oci"
	"github.com/toolgate/toolgate/runtime/shim"
)

// sandboxView is what a rendering of the sandbox policy means, whatever
// its syntax: the parity test reads one out of bwrap's argv and one out of
// an OCI spec, and compares them.
type sandboxView struct {
	// Mounts maps each path inside the sandbox to what is there.
	Mounts map[string]string
	// Namespaces are the new namespaces.
	Namespaces []string
	UID, GID   int
	Hostname   string
	// Env is the tool's exact environment; Cwd its working directory.
	Env []string
	Cwd string
	// Rlimits are name=value, sorted.
	Rlimits []string
	// Caps are the capabilities kept; NoNewPrivs is always true here.
	Caps       []string
	NoNewPrivs bool
	Seccomp    bool
	// Exec and Argv are what the init shim execs; KeepStderr how it
	// treats stderr.
	Exec       string
	Argv       []string
	KeepStderr bool
	// Egress is the proxy socket the init shim bridges ("" without an
	// allowlist).
	Egress string
}

// knownDifferences are the ways the two renderings differ on purpose,
// each with its reason. Anything else that differs fails the test.
var knownDifferences = map[string]string{
	// bwrap runs unprivileged (as the sandbox uid when toolgate is root)
	// and needs a user namespace to create the others; an OCI runtime
	// runs as root and sets the process's uid instead. Either way the
	// tool's kernel uid is not 0 (battery case "links").
	"namespace user": "bwrap only",
	// runc masks these /proc and /sys paths over its mount of /proc;
	// bwrap's --proc is the sandbox's own pid namespace's, and bwrap
	// remounts /proc/sys, /proc/sysrq-trigger, /proc/irq and /proc/bus
	// read-only itself. No /sys at all in either. Both mask /proc/keys
	// (maskedPaths).
	"masked /proc and /sys paths but /proc/keys": "OCI only",
}

// bwrapView reads a sandboxView out of bwrap's argv.
func bwrapView(t *testing.T, argv []string) sandboxView {
	t.Helper()
	v := sandboxView{Mounts: map[string]string{}, NoNewPrivs: true, Caps: nil}
	ns := map[string]bool{"mount": true} // bwrap always makes one
	var size, perms string
	rootRO := false
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		next := func() string {
			i++
			return argv[i]
		}
		switch a {
		case "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup":
			ns[map[string]string{
				"--unshare-user": "user", "--unshare-ipc": "ipc", "--unshare-pid": "pid",
				"--unshare-net": "network", "--unshare-uts": "uts", "--unshare-cgroup": "cgroup",
			}[a]] = true
		case "--uid":
			v.UID, _ = strconv.Atoi(next())
		case "--gid":
			v.GID, _ = strconv.Atoi(next())
		case "--hostname":
			v.Hostname = next()
		case "--cap-drop":
			if next() != "ALL" {
				t.Fatalf("bwrap argv drops only some capabilities")
			}
		case "--ro-bind":
			src, dst := next(), next()
			v.Mounts[dst] = "ro-bind " + src
			if src == "/dev/null" {
				v.Mounts[dst] = "masked"
			}
		case "--symlink":
			target, dst := next(), next()
			v.Mounts[dst] = "symlink " + target
		case "--dev":
			v.Mounts[next()] = "dev"
			v.Mounts["/dev/pts"] = "devpts" // bwrap's --dev makes it
		case "--proc":
			v.Mounts[next()] = "proc"
		case "--size":
			size = next()
		case "--perms":
			perms = next()
		case "--tmpfs":
			v.Mounts[next()] = fmt.Sprintf("tmpfs size=%s mode=%s", size, perms)
			size, perms = "", ""
		case "--remount-ro":
			if d := next(); d == "/" {
				rootRO = true
			} else {
				v.Mounts[d] += " read-only"
			}
		case "--chdir":
			v.Cwd = next()
		case "--seccomp":
			if next() != strconv.Itoa(SeccompFD) {
				t.Fatal("bwrap reads the seccomp program from an unexpected descriptor")
			}
			v.Seccomp = true
		case "--setenv":
			k, val := next(), next()
			v.Env = append(v.Env, k+"="+val)
		case "--clearenv", "--disable-userns", "--die-with-parent", "--new-session", "--as-pid-1":
		case "--":
			inside := argv[i+1:]
			if inside[0] != bundle.ShimPath {
				t.Fatalf("bwrap runs %q first, want the shim at %s", inside[0], bundle.ShimPath)
			}
			spec := parseInit(t, inside[1:])
			v.Exec, v.Argv, v.KeepStderr, v.Egress = spec.path, spec.argv, spec.keepStderr, spec.egress
			v.Rlimits = spec.rlimits
			i = len(argv)
		default:
			t.Fatalf("bwrap argv has %q, which the parity test does not know: teach it what it means", a)
		}
	}
	if m, ok := v.Mounts["/"]; ok || !rootRO {
		t.Fatalf("bwrap's / is not the read-only tmpfs it makes (%q, remounted read-only: %v)", m, rootRO)
	}
	v.Mounts["/"] = "root read-only"
	v.Namespaces = keys(ns)
	return v
}

// initSpec is what the init shim is told.
type initSpec struct {
	path       string
	argv       []string
	rlimits    []string
	keepStderr bool
	egress     string
}

// parseInit reads the init shim's arguments (shim.Spec.Args).
func parseInit(t *testing.T, a []string) initSpec {
	t.Helper()
	// A prepared sandbox's standby shim does what the init shim does,
	// once released on its release descriptor.
	if len(a) < 2 || a[0] != shim.Arg || (shim.Mode(a[1]) != shim.Init && shim.Mode(a[1]) != shim.Standby) {
		t.Fatalf("the shim is not run in init (or standby) mode: %q", a)
	}
	var s initSpec
	a = a[2:]
	for len(a) > 0 && a[0] != "--" {
		switch a[0] {
		case "--rlimit":
			s.rlimits = append(s.rlimits, a[1])
		case "--release-fd":
			if a[1] != strconv.Itoa(ReleaseFD) {
				t.Fatalf("the standby shim waits on descriptor %s, want %d", a[1], ReleaseFD)
			}
		case "--answer":
			// A prepared tool sandbox's shim runs the tool as its child
			// and answers its status: the sandbox is the same.
		case "--stderr":
			s.keepStderr = a[1] == "keep"
		case "--egress":
			s.egress = a[1]
		default:
			t.Fatalf("init shim option %q unknown to the parity test", a[0])
		}
		a = a[2:]
	}
	s.path, s.argv = a[1], a[2:] // after "--": the path to exec, then argv
	sort.Strings(s.rlimits)
	return s
}

// ociView reads a sandboxView out of an OCI spec, with the skeleton
// rootfs's symlinks (runtime/oci makes them from the same policy).
func ociView(t *testing.T, s *specs.Spec, h bundle.Host) sandboxView {
	t.Helper()
	v := sandboxView{
		Mounts: map[string]string{}, Hostname: s.Hostname, Env: s.Process.Env, Cwd: s.Process.Cwd,
		UID: int(s.Process.User.UID), GID: int(s.Process.User.GID), NoNewPrivs: s.Process.NoNewPrivileges,
		Seccomp: s.Linux.Seccomp != nil,
	}
	c := s.Process.Capabilities
	if caps := slices.Concat(c.Bounding, c.Effective, c.Inheritable, c.Permitted, c.Ambient); len(caps) > 0 {
		v.Caps = caps
	}
	if !s.Root.Readonly {
		t.Fatal("the OCI root is writable")
	}
	v.Mounts["/"] = "root read-only"
	for _, l := range h.UsrLinks {
		v.Mounts["/"+l] = "symlink usr/" + l
	}
	readonly := map[string]bool{}
	for _, p := range s.Linux.ReadonlyPaths {
		readonly[p] = true
	}
	// The masked paths that bwrap masks too; the others are a known
	// difference.
	for _, p := range s.Linux.MaskedPaths {
		if slices.Contains(maskedPaths, p) {
			v.Mounts[p] = "masked"
		}
	}
	for _, m := range s.Mounts {
		opt := func(prefix string) string {
			for _, o := range m.Options {
				if v, ok := strings.CutPrefix(o, prefix); ok {
					return v
				}
			}
			return ""
		}
		var what string
		switch m.Type {
		case "bind":
			if !slices.Contains(m.Options, "ro") && !slices.Contains(m.Options, "rro") {
				t.Fatalf("OCI bind %s is writable", m.Destination)
			}
			what = "ro-bind " + m.Source
		case "tmpfs":
			if m.Destination == "/dev" {
				what = "dev"
			} else {
				what = fmt.Sprintf("tmpfs size=%s mode=%s", opt("size="), opt("mode="))
			}
		case "proc":
			what = "proc"
		case "devpts":
			what = "devpts"
		default:
			t.Fatalf("OCI mount type %q unknown to the parity test", m.Type)
		}
		if readonly[m.Destination] {
			what += " read-only"
		}
		v.Mounts[m.Destination] = what
	}
	for _, n := range s.Linux.Namespaces {
		if n.Path != "" {
			t.Fatalf("the OCI spec joins namespace %s", n.Path)
		}
		v.Namespaces = append(v.Namespaces, string(n.Type))
	}
	sort.Strings(v.Namespaces)
	args := s.Process.Args
	if args[0] != bundle.ShimPath {
		t.Fatalf("the OCI process is %q, want the shim at %s", args[0], bundle.ShimPath)
	}
	spec := parseInit(t, args[1:])
	v.Exec, v.Argv, v.KeepStderr, v.Egress = spec.path, spec.argv, spec.keepStderr, spec.egress
	for _, r := range s.Process.Rlimits {
		if r.Soft != r.Hard {
			t.Fatalf("OCI rlimit %s soft %d != hard %d", r.Type, r.Soft, r.Hard)
		}
		v.Rlimits = append(v.Rlimits, strings.ToLower(strings.TrimPrefix(r.Type, "RLIMIT_"))+"="+strconv.FormatUint(r.Hard, 10))
	}
	sort.Strings(v.Rlimits)
	return v
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// withoutKnown removes the known differences from a view: the namespaces
// that knownDifferences lists (the masked paths are not in a view).
func withoutKnown(v sandboxView) sandboxView {
	v.Namespaces = slices.DeleteFunc(slices.Clone(v.Namespaces), func(n string) bool {
		_, known := knownDifferences["namespace "+n]
		return known
	})
	return v
}

// TestPolicyParity renders every golden plan that an OCI runtime can run
// (a tool call, made on the call's path or prepared ahead of it: an OCI
// runtime's create renders the same spec either way; services run under
// bwrap alone) both ways, from the same policy and call, and compares what
// the two mean: mounts with their modes
// and sizes, namespaces, ids, hostname, environment, working directory,
// rlimits, capabilities, no_new_privs, the seccomp filter, and what runs.
// A difference fails unless knownDifferences lists it.
func TestPolicyParity(t *testing.T) {
	if _, err := bundle.DefaultSeccomp(); errors.Is(err, bundle.ErrNoSeccomp) {
		// Plain go test ./...: the OCI rendering always carries the
		// seccomp profile, which only the seccomp build has.
		testbin.Missing(t, "this test binary was built without -tags seccomp (go test -tags seccomp): %v", err)
	}
	for _, tc := range goldenPlans() {
		// A helper session has no OCI rendering: the OCI backends run each
		// of its commands in a container of its own, rendered as a tool's
		// (TestSessionIsTheSameSandbox holds the bwrap one to a tool's).
		if tc.plan.Service || tc.plan.Session {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			pol := tc.policy
			pol.Rootfs, pol.CgroupsPath = "/run/toolgate/1/rootfs", "toolgate-1/c1"
			inv := rt.Invocation{ID: "c1", Template: tc.plan.Template, Call: rt.Call{Timeout: time.Second, MaxBytes: 1}}
			inv.Name = tc.name
			if tc.plan.SplitStderr {
				inv.StderrMax = 1
			}
			if tc.plan.EgressDir != "" {
				inv.Egress = allowlist.List{{Host: "api.example.com", Port: 443}}
			}
			spec, err := oci.RenderSpec(pol, oci.Runc, inv, tc.plan.EgressDir)
			if err != nil {
				t.Fatalf("RenderSpec: %v", err)
			}
			b, o := withoutKnown(bwrapView(t, Args(pol, tc.plan))), withoutKnown(ociView(t, spec, pol.Host))
			// A known difference: bwrap's init execs the exe at its path
			// as configured (and binds the resolved one there when
			// nothing shows it), the OCI init execs the resolved path, as
			// the direct backend does. argv, argv[0] included, is the same.
			if b.Exec != tc.plan.exe() || o.Exec != tc.plan.Path {
				t.Errorf("exec: bwrap %q, oci %q; want %q and %q", b.Exec, o.Exec, tc.plan.exe(), tc.plan.Path)
			}
			b.Exec, o.Exec = "", ""
			if tc.plan.exe() != tc.plan.Path {
				delete(b.Mounts, tc.plan.exe()) // the configured path's bind, bwrap only
			}
			if d := cmp.Diff(b, o); d != "" {
				t.Errorf("the bwrap and OCI renderings of %s differ (-bwrap +oci):\n%s", tc.name, d)
			}
		})
	}
}

// auditArchX86_64 is AUDIT_ARCH_X86_64, the arch a seccomp filter sees
// for a native x86_64 system call.
const auditArchX86_64 = 0xc000003e

// seccompVerdict runs prog, a classic BPF seccomp program (what bwrap is
// handed at SeccompFD), on the seccomp_data of system call nr made on
// x86_64 with every argument 0, and returns what the program returns.
// It knows the instructions libseccomp emits; any other fails the test.
func seccompVerdict(t *testing.T, prog []byte, nr uint32) uint32 {
	t.Helper()
	var data [64]byte // struct seccomp_data: nr, arch, instruction_pointer, args[6]
	binary.NativeEndian.PutUint32(data[0:], nr)
	binary.NativeEndian.PutUint32(data[4:], auditArchX86_64)
	var a, x uint32
	var mem [16]uint32
	jump := func(cond bool, jt, jf uint8) int {
		if cond {
			return int(jt)
		}
		return int(jf)
	}
	for pc := 0; pc < len(prog)/8; pc++ {
		in := prog[pc*8 : pc*8+8]
		code, jt, jf, k := binary.NativeEndian.Uint16(in[0:]), in[2], in[3], binary.NativeEndian.Uint32(in[4:])
		switch code {
		case 0x20: // BPF_LD|BPF_W|BPF_ABS
			if k+4 > uint32(len(data)) {
				t.Fatalf("seccomp program reads seccomp_data at %d", k)
			}
			a = binary.NativeEndian.Uint32(data[k:])
		case 0x00: // BPF_LD|BPF_IMM
			a = k
		case 0x01: // BPF_LDX|BPF_IMM
			x = k
		case 0x60: // BPF_LD|BPF_MEM
			a = mem[k%16]
		case 0x61: // BPF_LDX|BPF_MEM
			x = mem[k%16]
		case 0x02: // BPF_ST
			mem[k%16] = a
		case 0x03: // BPF_STX
			mem[k%16] = x
		case 0x07: // BPF_MISC|BPF_TAX
			x = a
		case 0x87: // BPF_MISC|BPF_TXA
			a = x
		case 0x54: // BPF_ALU|BPF_AND|BPF_K
			a &= k
		case 0x05: // BPF_JMP|BPF_JA
			pc += int(k)
		case 0x15: // BPF_JMP|BPF_JEQ|BPF_K
			pc += jump(a == k, jt, jf)
		case 0x25: // BPF_JMP|BPF_JGT|BPF_K
			pc += jump(a > k, jt, jf)
		case 0x35: // BPF_JMP|BPF_JGE|BPF_K
			pc += jump(a >= k, jt, jf)
		case 0x45: // BPF_JMP|BPF_JSET|BPF_K
			pc += jump(a&k != 0, jt, jf)
		case 0x1d: // BPF_JMP|BPF_JEQ|BPF_X
			pc += jump(a == x, jt, jf)
		case 0x06: // BPF_RET|BPF_K
			return k
		case 0x16: // BPF_RET|BPF_A
			return a
		default:
			t.Fatalf("seccomp program: instruction %#04x at %d unknown to the test", code, pc)
		}
	}
	t.Fatal("seccomp program ran off its end")
	return 0
}

// ociVerdict is what profile p says for system call name with every
// argument 0, as the kernel's return value: the action of the rule that
// names it with no argument condition, else the default.
func ociVerdict(p *specs.LinuxSeccomp, name string) uint32 {
	verdict := func(act specs.LinuxSeccompAction, errno *uint) uint32 {
		switch act {
		case specs.ActAllow:
			return 0x7fff0000 // SECCOMP_RET_ALLOW
		case specs.ActErrno:
			e := uint32(unix.EPERM) // the runtimes' errno when none is given
			if errno != nil {
				e = uint32(*errno)
			}
			return 0x00050000 | e // SECCOMP_RET_ERRNO
		}
		return 0 // SECCOMP_RET_KILL_THREAD: not in the profile
	}
	for _, sc := range p.Syscalls {
		if len(sc.Args) == 0 && slices.Contains(sc.Names, name) {
			return verdict(sc.Action, sc.ErrnoRet)
		}
	}
	return verdict(p.DefaultAction, p.DefaultErrnoRet)
}

// TestSeccompParity: the filter bwrap loads (bundle.DefaultSeccompBPF,
// compiled by libseccomp) and the profile of an OCI spec give the same
// verdict for the same system calls: the keyring calls refused with EPERM
// (issue 21), clone3 with ENOSYS, and controls of each kind (allowed,
// refused by a rule, refused by the default).
func TestSeccompParity(t *testing.T) {
	if goruntime.GOARCH != "amd64" {
		t.Skipf("SKIPPING: the test evaluates the filter for x86_64 system calls, not %s", goruntime.GOARCH)
	}
	prog, err := bundle.DefaultSeccompBPF()
	if errors.Is(err, bundle.ErrNoSeccomp) {
		testbin.Missing(t, "this test binary was built without -tags seccomp (go test -tags seccomp): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	tc := goldenPlans()[0]
	pol := tc.policy
	pol.Rootfs, pol.CgroupsPath = "/run/toolgate/1/rootfs", "toolgate-1/c1"
	spec, err := oci.RenderSpec(pol, oci.Runc, rt.Invocation{ID: "c1", Template: tc.plan.Template, Call: rt.Call{Timeout: time.Second, MaxBytes: 1}}, "")
	if err != nil {
		t.Fatalf("RenderSpec: %v", err)
	}
	eperm, enosys := uint32(0x00050000|unix.EPERM), uint32(0x00050000|unix.ENOSYS)
	for _, sc := range []struct {
		name string
		nr   uint32
		want uint32
	}{
		{"keyctl", unix.SYS_KEYCTL, eperm},
		{"add_key", unix.SYS_ADD_KEY, eperm},
		{"request_key", unix.SYS_REQUEST_KEY, eperm},
		{"clone3", unix.SYS_CLONE3, enosys},
		{"bpf", unix.SYS_BPF, eperm},          // refused by containers/common's own rule
		{"vserver", unix.SYS_VSERVER, enosys}, // in no rule: the default
		{"read", unix.SYS_READ, 0x7fff0000},
		{"openat", unix.SYS_OPENAT, 0x7fff0000},
	} {
		b, o := seccompVerdict(t, prog, sc.nr), ociVerdict(spec.Linux.Seccomp, sc.name)
		if b != sc.want || o != sc.want {
			t.Errorf("%s: bwrap's filter returns %#x, the OCI profile %#x; want %#x", sc.name, b, o, sc.want)
		}
	}
}
