//go:build seccomp

package bundle

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

const haveSeccomp = true

// allowedUnconditionally reports whether some rule allows name with no
// argument condition.
func allowedUnconditionally(p *specs.LinuxSeccomp, name string) bool {
	for _, sc := range p.Syscalls {
		if sc.Action == specs.ActAllow && len(sc.Args) == 0 && slices.Contains(sc.Names, name) {
			return true
		}
	}
	return false
}

func rulesFor(p *specs.LinuxSeccomp, name string) []specs.LinuxSyscall {
	var out []specs.LinuxSyscall
	for _, sc := range p.Syscalls {
		if slices.Contains(sc.Names, name) {
			out = append(out, sc)
		}
	}
	return out
}

func TestDefaultSeccomp(t *testing.T) {
	p, err := DefaultSeccomp()
	if err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != 38 {
		t.Errorf("default action = %s/%v, want SCMP_ACT_ERRNO ENOSYS", p.DefaultAction, p.DefaultErrnoRet)
	}
	if d := cmp.Diff([]specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}, p.Architectures); d != "" {
		t.Errorf("architectures (-want +got):\n%s", d)
	}
	// Nested user namespaces: clone and unshare only without
	// CLONE_NEWUSER, clone3 ENOSYS.
	masked := []specs.LinuxSeccompArg{{Index: 0, Value: 0x10000000, ValueTwo: 0, Op: specs.OpMaskedEqual}}
	for _, name := range []string{"clone", "unshare"} {
		want := []specs.LinuxSyscall{{Names: []string{name}, Action: specs.ActAllow, Args: masked}}
		if d := cmp.Diff(want, rulesFor(p, name)); d != "" {
			t.Errorf("%s rules (-want +got):\n%s", name, d)
		}
	}
	enosys := uint(38)
	if d := cmp.Diff([]specs.LinuxSyscall{{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys}}, rulesFor(p, "clone3")); d != "" {
		t.Errorf("clone3 rules (-want +got):\n%s", d)
	}
	// The kernel's keyrings (not namespaced: issue 21): refused with
	// EPERM, as moby refuses them, by one rule and no other.
	eperm := uint(1)
	for _, name := range []string{"add_key", "keyctl", "request_key"} {
		want := []specs.LinuxSyscall{{Names: []string{"add_key", "keyctl", "request_key"}, Action: specs.ActErrno, ErrnoRet: &eperm}}
		if d := cmp.Diff(want, rulesFor(p, name)); d != "" {
			t.Errorf("%s rules (-want +got):\n%s", name, d)
		}
	}
	// Converted for an empty capability set: what a capability would
	// allow stays refused. (containers/common allows mount, ptrace,
	// keyctl and setns to everyone and leaves them to capability checks,
	// which fail with every set empty.)
	for _, name := range []string{"bpf", "chroot", "init_module", "kexec_load", "open_by_handle_at", "perf_event_open", "sethostname", "settimeofday", "iopl"} {
		if allowedUnconditionally(p, name) {
			t.Errorf("%s allowed unconditionally", name)
		}
	}
	// Ordinary syscalls stay allowed.
	for _, name := range []string{"read", "write", "execve", "openat", "statx", "wait4", "socket"} {
		if len(rulesFor(p, name)) == 0 {
			t.Errorf("%s has no rule", name)
		}
	}
	// Shared, computed once.
	q, _ := DefaultSeccomp()
	if p != q {
		t.Errorf("DefaultSeccomp returned a new profile: the conversion must run once")
	}
}

func TestWithClone3AllowedCopies(t *testing.T) {
	s := mustSpec(t, testTool(), Policy{}.withDefaults(), WithClone3Allowed())
	rules := rulesFor(s.Linux.Seccomp, "clone3")
	if d := cmp.Diff([]specs.LinuxSyscall{{Names: []string{"clone3"}, Action: specs.ActAllow}}, rules); d != "" {
		t.Errorf("clone3 rules (-want +got):\n%s", d)
	}
	// The shared profile is untouched.
	p, _ := DefaultSeccomp()
	if rulesFor(p, "clone3")[0].Action != specs.ActErrno {
		t.Errorf("WithClone3Allowed modified the shared profile")
	}
	// clone and unshare keep their mask.
	if allowedUnconditionally(s.Linux.Seccomp, "clone") || allowedUnconditionally(s.Linux.Seccomp, "unshare") {
		t.Errorf("clone or unshare allowed unconditionally")
	}
}

func BenchmarkSpec(b *testing.B) {
	p := Policy{}.withDefaults()
	tl := testTool()
	for b.Loop() {
		if _, err := Spec(tl, p); err != nil {
			b.Fatal(err)
		}
	}
}
