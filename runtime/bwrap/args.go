package bwrap

import (
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/bundle"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/shim"
)

// SeccompFD is the descriptor bwrap reads the seccomp program from: the
// first of the started process's ExtraFiles.
const SeccompFD = 3

// ReleaseFD is the descriptor of a prepared sandbox's release channel (the
// second ExtraFile; rt.ReleaseFD(1)): bwrap leaves it open, and the
// standby shim inside waits on it.
const ReleaseFD = SeccompFD + 1

// maskedPaths are the files of the sandbox's /proc that bwrap masks with
// /dev/null, as the OCI runtimes mask every path of bundle.MaskedPaths
// (bound without its device, so that it cannot be opened at all; runc's
// mask reads empty). /proc/keys lists every key its reader may view, and
// a key's owner may view it without holding it: a sandbox of a non-root
// toolgate runs as toolgate's uid and would see the descriptions of
// toolgate's keyrings and keys, whatever its own session keyring (issue
// 21). The other paths of bundle.MaskedPaths are a known difference
// (parity_test.go).
var maskedPaths = []string{"/proc/keys"}

// Plan is what one sandboxed call adds to the policy: the tool, and for a
// service the three ways its sandbox differs.
type Plan struct {
	// Template is the tool, as the call (or the pool) carries it: Path is
	// the canonical executable, Argv[0] the executable as configured (both
	// are visible inside), Dir the tool dir (bound read-only at its own
	// path, and the working directory), Env the variables the init shim
	// adds to the four, SplitStderr a helper's stderr kept apart from its
	// stdout. A service's plan has no Env: its values travel in bwrap's
	// environment.
	rt.Template

	// The fields below are for services (Runner.StartService); a tool
	// call leaves them zero.

	// Service starts the exe through the service shim (shim.Service):
	// stdin, stdout and stderr untouched, and the environment bwrap itself
	// was started with (rt.Env plus the service's variables, set by
	// StartService) instead of --clearenv and --setenv of rt.Env. A Plan
	// holds no variable values, so none can reach bwrap's command line.
	// Dir may be empty: the working directory is then / and nothing is
	// bound for it.
	Service bool
	// ShareNet relaxes the sandbox: the host's network is kept (no
	// --unshare-net) and the name-resolution files of the host are bound.
	// Only a registry entry with network = true sets it.
	ShareNet bool
	// ReadOnly are further canonical host paths bound read-only at their
	// own path, in order, skipping those already visible.
	ReadOnly []string

	// EgressDir, when set, is the host directory of the call's (or the
	// service's) egress proxy socket (rt.Egress.Dir): bound read-only at
	// bundle.EgressDir, and the shim bridges the sandbox's loopback proxy
	// port onto it. The network namespace stays unshared.
	EgressDir string
	// Trust (a call with a credential) binds EgressDir's
	// bundle.TrustBundle over bundle.SystemTrust, where the host has it.
	// A sandbox prepared for a proxied template (Standby, Proxied) takes
	// its call's proxy socket at release; its EgressDir, set when it is
	// Trusted, is rt.TrustDir, the server's trust files alone.
	Trust bool

	// Standby (set for every Session template too) prepares the sandbox
	// ahead of its call (the pool, rt.Pool):
	// the sandbox is the same in every respect, but its first process is
	// the standby shim (shim.Standby), which sets the rlimits, waits on
	// the release channel at ReleaseFD, and on release takes the call's
	// streams and execs the tool exactly as the init (or service) shim
	// would.
	Standby bool
}

// Args returns bwrap's argv (without the bwrap path) for plan p under
// policy pol: the bwrap rendering of the sandbox policy (bundle/policy.go
// says what it is; bundle.Spec is the OCI rendering of the same value, and
// runtime/oci's parity test compares the two). A pure function of its
// inputs, golden-tested. What bwrap needs beyond the policy's words, each
// for a verified reason (SANDBOX.md §2):
//
//   - --disable-userns (the OCI rendering's seccomp rules refuse nested
//     user namespaces too), --as-pid-1 (no bwrap reaper inside the sandbox,
//     which would carry bwrap's environment and could be ptraced),
//     --die-with-parent, --new-session (no TIOCSTI);
//   - the init shim runs first and execs the tool with exactly the
//     policy's environment, because bwrap always adds PWD; the rlimits are
//     set by it too;
//   - the seccomp program is read from descriptor SeccompFD;
//   - /proc/keys is masked (maskedPaths), as runc masks it;
//   - a prepared sandbox (Plan.Standby) differs only in its first
//     process, the standby shim, which waits on ReleaseFD before it does
//     what the init or service shim does.
//
// A service (Plan.Service) differs in three ways, each on purpose: the
// network namespace is kept only when ShareNet says so; ReadOnly adds
// read-only binds; and instead of --clearenv and --setenv the service shim
// execs the server with bwrap's own environment minus PWD, which
// StartService sets to rt.Env plus the server's variables, so that no
// value (a forwarded credential) is ever on a command line.
func Args(pol bundle.Policy, p Plan) []string {
	h := pol.Host
	a := []string{
		"--unshare-user", "--uid", strconv.Itoa(int(pol.UID)), "--gid", strconv.Itoa(int(pol.GID)),
		"--disable-userns",
		"--unshare-ipc", "--unshare-pid",
	}
	if !p.ShareNet {
		a = append(a, "--unshare-net")
	}
	a = append(a,
		"--unshare-uts", "--unshare-cgroup",
		"--hostname", bundle.Hostname,
		"--die-with-parent", "--new-session", "--as-pid-1", "--cap-drop", "ALL",
	)
	for i, b := range h.Binds(p.ShareNet) {
		a = append(a, "--ro-bind", b.Source, b.Dest)
		if i == 0 { // /usr, then the usr-merge links into it
			for _, l := range h.UsrLinks {
				a = append(a, "--symlink", "usr/"+l, "/"+l)
			}
		}
	}
	// /dev's tmpfs (--dev) would take writes without bound: it is
	// remounted read-only below, and /dev/shm is a tmpfs capped like /tmp.
	size := strconv.FormatInt(pol.TmpSize, 10)
	a = append(a,
		"--dev", "/dev",
		"--perms", "1777", "--size", size, "--tmpfs", "/dev/shm",
		"--proc", "/proc",
	)
	for _, m := range maskedPaths {
		a = append(a, "--ro-bind", "/dev/null", m)
	}
	a = append(a,
		"--perms", "1777", "--size", size, "--tmpfs", "/tmp",
	)
	var bound []string
	if p.Dir != "" {
		a = append(a, "--ro-bind", p.Dir, p.Dir)
		bound = append(bound, p.Dir)
	}
	visible := func(path string) bool {
		if h.Visible(path) {
			return true
		}
		for _, d := range bound {
			if bundle.Within(path, d) {
				return true
			}
		}
		return false
	}
	for _, d := range p.ReadOnly {
		if !visible(d) {
			a = append(a, "--ro-bind", d, d)
			bound = append(bound, d)
		}
	}
	exe := p.exe()
	if !visible(p.Path) {
		a = append(a, "--ro-bind", p.Path, p.Path)
	}
	if exe != p.Path && !visible(exe) {
		a = append(a, "--ro-bind", p.Path, exe)
	}
	chdir := p.Dir
	if chdir == "" {
		chdir = "/"
	}
	a = append(a, "--ro-bind", pol.Shim, bundle.ShimPath)
	var egress string
	if p.EgressDir != "" {
		a = append(a, "--ro-bind", p.EgressDir, bundle.EgressDir)
		egress = bundle.EgressSocketPath
		if p.Trust && h.Visible(bundle.SystemTrust) {
			a = append(a, "--ro-bind", p.EgressDir+"/"+bundle.TrustBundle, bundle.SystemTrust)
		}
	}
	if p.Standby && p.Proxied {
		// Prepared ahead of its call, whose proxy does not exist yet: the
		// socket comes with the release (EgressDir, when set, holds the
		// trust files alone).
		egress = shim.EgressAtRelease
	}
	a = append(a, "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", chdir)
	if pol.Seccomp {
		a = append(a, "--seccomp", strconv.Itoa(SeccompFD))
	}
	rlimits := rt.ShimRlimits(pol.Rlimits)
	if p.Service {
		svc := shim.Spec{Mode: shim.Service, Rlimits: rlimits, Egress: egress, Path: exe, Argv: p.Argv}
		if p.Standby {
			svc.Mode, svc.KeepStderr, svc.KeepEnv, svc.ReleaseFD = shim.Standby, true, true, ReleaseFD
		}
		a = append(a, "--", bundle.ShimPath)
		return append(a, svc.Args()...)
	}
	a = append(a, "--clearenv")
	for _, kv := range bundle.Env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	a = append(a, "--", bundle.ShimPath)
	init := shim.Spec{Mode: shim.Init, Rlimits: rlimits, KeepStderr: p.SplitStderr, Egress: egress, Env: p.Env, Path: exe, Argv: p.Argv}
	switch {
	case p.Session:
		// A helper session: its shim runs the commands the release
		// channel brings, each Argv and further words (Template.Session).
		init = shim.Spec{Mode: shim.Session, Rlimits: rlimits, Env: p.Env, Verbs: p.Verbs, ReleaseFD: ReleaseFD, Path: exe, Argv: p.Argv}
	case p.Standby:
		init.Mode, init.ReleaseFD, init.Answer = shim.Standby, ReleaseFD, true
	}
	return append(a, init.Args()...)
}

// exe is the executable as configured: Argv[0].
func (p Plan) exe() string {
	if len(p.Argv) == 0 {
		return ""
	}
	return p.Argv[0]
}
