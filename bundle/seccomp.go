package bundle

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// ErrNoSeccomp is returned when seccomp is asked for and this binary was
// built without the seccomp build tag. It is never a silent downgrade.
var ErrNoSeccomp = errors.New("seccomp requested but this toolgate was built without seccomp support (rebuild with cgo, libseccomp-dev and -tags seccomp)")

// cloneNewUser is CLONE_NEWUSER, the flag the tightened profile masks.
const cloneNewUser = unix.CLONE_NEWUSER

// userNSSyscalls are the syscalls that can create a user namespace.
var userNSSyscalls = []string{"clone", "clone3", "unshare"}

// keyringSyscalls are the syscalls of the kernel's key management: the
// profile refuses them with EPERM, as moby's default profile does (it
// leaves them out of its allow list, whose default is EPERM). Keyrings are
// not namespaced: a session keyring a sandbox could reach is shared with
// whatever else holds it (issue 21).
var keyringSyscalls = []string{"add_key", "keyctl", "request_key"}

// defaultSeccomp converts and tightens the profile once per process; every
// spec shares the result.
var defaultSeccomp = sync.OnceValues(func() (*specs.LinuxSeccomp, error) {
	p, err := convertDefaultProfile()
	if err != nil {
		return nil, err
	}
	return refuseKeyrings(tightenUserNS(p)), nil
})

// DefaultSeccomp returns the containers/common default seccomp profile,
// converted for an empty capability set (the blocks gated on a capability
// drop out), tightened by tightenUserNS so that no nested user namespace
// can be created, and by refuseKeyrings so that no keyring can be read,
// searched, created or linked (containers/common allows keyctl to
// everyone). The profile is computed once and shared by every spec:
// callers must not modify it.
func DefaultSeccomp() (*specs.LinuxSeccomp, error) {
	p, err := defaultSeccomp()
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	return p, nil
}

// defaultSeccompBPF compiles the default profile once per process.
var defaultSeccompBPF = sync.OnceValues(func() ([]byte, error) {
	p, err := defaultSeccomp()
	if err != nil {
		return nil, err
	}
	return compileBPF(withoutDefaultRules(p))
})

// withoutDefaultRules returns p less the rules whose action is the default
// action anyway (the clone3 rule: ENOSYS, as is the default): the runtimes
// skip them, and libseccomp refuses them ("requested action matches default
// action of filter"). The filter is the same.
func withoutDefaultRules(p *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	errno := func(e *uint) uint {
		if e == nil {
			return uint(unix.EPERM)
		}
		return *e
	}
	out := *p
	out.Syscalls = slices.DeleteFunc(slices.Clone(p.Syscalls), func(sc specs.LinuxSyscall) bool {
		return sc.Action == p.DefaultAction && len(sc.Args) == 0 &&
			(sc.Action != specs.ActErrno || errno(sc.ErrnoRet) == errno(p.DefaultErrnoRet))
	})
	return &out
}

// DefaultSeccompBPF returns DefaultSeccomp compiled by libseccomp into the
// BPF program the kernel loads: what the bwrap backend hands bwrap
// (--seccomp FD), so that both backends filter with the same profile. It
// is compiled once per process; callers must not modify it.
func DefaultSeccompBPF() ([]byte, error) {
	b, err := defaultSeccompBPF()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	return b, nil
}

// tightenUserNS removes clone, clone3 and unshare from every rule of p and
// adds: clone and unshare allowed only when CLONE_NEWUSER is clear in their
// flags (argument 0 on the architectures the profile converts for), and
// clone3 failing with ENOSYS (its flags are behind a pointer that seccomp
// cannot read; libc falls back to clone). It returns a new profile.
func tightenUserNS(p *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	out := withoutSyscalls(p, userNSSyscalls, 3)
	noUserNS := []specs.LinuxSeccompArg{{Index: 0, Value: cloneNewUser, ValueTwo: 0, Op: specs.OpMaskedEqual}}
	enosys := uint(unix.ENOSYS)
	out.Syscalls = append(out.Syscalls,
		specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow, Args: noUserNS},
		specs.LinuxSyscall{Names: []string{"unshare"}, Action: specs.ActAllow, Args: slices.Clone(noUserNS)},
		specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
	)
	return out
}

// refuseKeyrings removes keyringSyscalls from every rule of p and adds one
// rule refusing them with EPERM (moby's errno for them; the profile's
// default, ENOSYS, would tell a program the kernel has no keys at all). It
// returns a new profile.
func refuseKeyrings(p *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	out := withoutSyscalls(p, keyringSyscalls, 1)
	eperm := uint(unix.EPERM)
	out.Syscalls = append(out.Syscalls,
		specs.LinuxSyscall{Names: slices.Clone(keyringSyscalls), Action: specs.ActErrno, ErrnoRet: &eperm})
	return out
}

// withoutSyscalls returns a copy of p with drop removed from every rule
// (a rule left with no name goes), room made for extra rules after.
func withoutSyscalls(p *specs.LinuxSeccomp, drop []string, extra int) *specs.LinuxSeccomp {
	out := *p
	out.Syscalls = make([]specs.LinuxSyscall, 0, len(p.Syscalls)+extra)
	for _, sc := range p.Syscalls {
		names := slices.DeleteFunc(slices.Clone(sc.Names), func(n string) bool {
			return slices.Contains(drop, n)
		})
		if len(names) == 0 {
			continue
		}
		sc.Names = names
		out.Syscalls = append(out.Syscalls, sc)
	}
	return &out
}

// WithClone3Allowed relaxes the clone3 rule of the seccomp profile from
// ENOSYS to allow. It is for runsc (gVisor 2022), whose filter ignores
// errnoRet, so that a filtered clone3 fails with EPERM, from which glibc's
// pthread_create does not fall back to clone (every threaded program
// aborts); its Sentry does not implement clone3 and answers ENOSYS itself.
// Nested user namespaces stay refused there through clone and unshare.
// Apply it after the profile is set; the shared profile is copied, never
// modified.
func WithClone3Allowed() Opt {
	return func(s *specs.Spec) error {
		if s.Linux == nil || s.Linux.Seccomp == nil {
			return errors.New("allow clone3: the spec has no seccomp profile")
		}
		p := *s.Linux.Seccomp
		p.Syscalls = slices.Clone(p.Syscalls)
		found := false
		for i, sc := range p.Syscalls {
			if slices.Equal(sc.Names, []string{"clone3"}) {
				p.Syscalls[i] = specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActAllow}
				found = true
			}
		}
		if !found {
			return errors.New("allow clone3: the profile has no clone3 rule")
		}
		s.Linux.Seccomp = &p
		return nil
	}
}
