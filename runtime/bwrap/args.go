package bwrap

import (
	"path/filepath"
	"strconv"
	"strings"

	rt "github.com/toolgate/toolgate/runtime"
)

// Host is what the bwrap argv needs to know about the host, found once at
// start-up: which usr-merge symlinks to recreate, which /etc allow-list
// entries exist.
type Host struct {
	// UsrLinks are the top-level names (bin, sbin, lib, lib64, ...) that
	// are symlinks into /usr on the host and are recreated as such.
	UsrLinks []string
	// RootDirs are top-level directories that are NOT merged into /usr on
	// this host (an unmerged /bin, /lib): they are bound read-only too.
	RootDirs []string
	// Etc is the allow-list of /etc entries present on the host.
	Etc []string
	// NetEtc are the entries of NetEtcAllowList present on the host, bound
	// only into a sandbox that keeps the network (Plan.ShareNet).
	NetEtc []string
}

// EtcAllowList is every /etc entry a sandbox may see: what the dynamic
// loader, name-service lookups, time zones and TLS need. Never all of /etc:
// /etc/shadow, keys and service credentials stay outside.
var EtcAllowList = []string{
	"/etc/ld.so.cache",
	"/etc/ld.so.conf",
	"/etc/ld.so.conf.d",
	"/etc/alternatives",
	"/etc/localtime",
	"/etc/nsswitch.conf",
	"/etc/passwd",
	"/etc/group",
	"/etc/hosts",
	"/etc/ssl",
	"/etc/ca-certificates",
}

// NetEtcAllowList are the /etc entries name resolution needs, bound only
// into a sandbox that keeps the host's network.
var NetEtcAllowList = []string{
	"/etc/resolv.conf",
	"/etc/host.conf",
	"/etc/gai.conf",
}

// ShimPath is where the init shim is bound inside the sandbox.
const ShimPath = "/.toolgate/shim"

// SeccompFD is the descriptor bwrap reads the seccomp program from: the
// first of the started process's ExtraFiles.
const SeccompFD = 3

// Plan is one sandboxed call, as the argv needs it.
type Plan struct {
	// Shim is the host path of the toolgate-shim binary, bound read-only at
	// ShimPath: the sandbox's first process, it sets the environment to
	// exactly rt.Env (bwrap always adds PWD) and execs the tool.
	Shim string
	// Exe is the executable as configured, ExeResolved its canonical path.
	Exe, ExeResolved string
	// Argv is the full argv; Argv[0] is Exe.
	Argv []string
	// Dir is the canonical tool dir: bound read-only at its own path and
	// the working directory.
	Dir string
	// TmpSize is the size of the private /tmp, in bytes.
	TmpSize int64
	// Rlimits are set by the shim inside the sandbox before it execs the
	// tool: everything the tool starts inherits them.
	Rlimits []rt.Rlimit
	// KeepStderr leaves the tool's stderr apart from its stdout (a
	// built-in's helper, whose stdout is parsed); a tool call has one
	// stream.
	KeepStderr bool
	// Seccomp makes bwrap load the seccomp program it reads from
	// descriptor SeccompFD into the sandbox, last thing before the exec.
	Seccomp bool

	// The fields below are for services (Runner.StartService); a tool
	// call leaves them zero.

	// Service starts the exe through the service shim (rt.ShimService):
	// stdin, stdout and stderr untouched, and the environment bwrap itself
	// was started with (rt.Env plus the service's variables, set by
	// StartService) instead of --clearenv and --setenv of rt.Env. A Plan
	// holds no variable values, so none can reach bwrap's command line.
	// Dir may be empty: the working directory is then / and nothing is
	// bound for it.
	Service bool
	// ShareNet relaxes the sandbox: the host's network is kept (no
	// --unshare-net) and NetEtc is bound. Only a registry entry with
	// network = true sets it.
	ShareNet bool
	// ReadOnly are further canonical host paths bound read-only at their
	// own path, in order, skipping those already visible.
	ReadOnly []string
}

// Args returns bwrap's argv (without the bwrap path) for p: a pure
// function of the host and the plan, golden-tested. Every flag is there for
// a verified reason (SANDBOX.md §2):
//
//   - user, pid, net (loopback only), ipc, uts, cgroup namespaces, with
//     nested user namespaces disabled;
//   - --as-pid-1: no bwrap reaper inside the sandbox, which would carry
//     bwrap's environment and could be ptraced;
//   - --die-with-parent, --new-session (no TIOCSTI), --cap-drop ALL;
//   - /usr read-only, the usr-merge symlinks, the /etc allow-list, a
//     private size-limited /tmp, a minimal /dev and a /proc of the new pid
//     namespace; nothing else of the host;
//   - the tool dir read-only at its canonical path, as the working dir; the
//     exe bound read-only when it lies outside what is bound already;
//   - --clearenv, then exactly the four variables of rt.Env; the init shim
//     runs first and execs the tool with exactly rt.Env, because bwrap
//     always adds PWD.
//
// A service (Plan.Service) differs in three ways, each on purpose: the
// network namespace is kept only when ShareNet says so; ReadOnly adds
// read-only binds; and instead of --clearenv and --setenv the service shim
// execs the server with bwrap's own environment minus PWD, which
// StartService sets to rt.Env plus the server's variables, so that no
// value (a forwarded credential) is ever on a command line.
func Args(h Host, p Plan) []string {
	a := []string{
		"--unshare-user", "--uid", strconv.Itoa(rt.SandboxUID), "--gid", strconv.Itoa(rt.SandboxGID),
		"--disable-userns",
		"--unshare-ipc", "--unshare-pid",
	}
	if !p.ShareNet {
		a = append(a, "--unshare-net")
	}
	a = append(a,
		"--unshare-uts", "--unshare-cgroup",
		"--hostname", "sandbox",
		"--die-with-parent", "--new-session", "--as-pid-1", "--cap-drop", "ALL",
		"--ro-bind", "/usr", "/usr",
	)
	for _, l := range h.UsrLinks {
		a = append(a, "--symlink", "usr/"+l, "/"+l)
	}
	for _, d := range h.RootDirs {
		a = append(a, "--ro-bind", d, d)
	}
	for _, e := range h.Etc {
		a = append(a, "--ro-bind", e, e)
	}
	if p.ShareNet {
		for _, e := range h.NetEtc {
			a = append(a, "--ro-bind", e, e)
		}
	}
	// /dev's tmpfs (--dev) would take writes without bound: it is
	// remounted read-only below, and /dev/shm is a tmpfs capped like /tmp.
	size := strconv.FormatInt(p.TmpSize, 10)
	a = append(a,
		"--dev", "/dev",
		"--perms", "1777", "--size", size, "--tmpfs", "/dev/shm",
		"--proc", "/proc",
		"--perms", "1777", "--size", size, "--tmpfs", "/tmp",
	)
	var bound []string
	if p.Dir != "" {
		a = append(a, "--ro-bind", p.Dir, p.Dir)
		bound = append(bound, p.Dir)
	}
	visible := func(path string) bool {
		if h.visible(path) {
			return true
		}
		for _, d := range bound {
			if within(path, d) {
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
	if !visible(p.ExeResolved) {
		a = append(a, "--ro-bind", p.ExeResolved, p.ExeResolved)
	}
	if p.Exe != p.ExeResolved && !visible(p.Exe) {
		a = append(a, "--ro-bind", p.ExeResolved, p.Exe)
	}
	chdir := p.Dir
	if chdir == "" {
		chdir = "/"
	}
	a = append(a, "--ro-bind", p.Shim, ShimPath, "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", chdir)
	if p.Seccomp {
		a = append(a, "--seccomp", strconv.Itoa(SeccompFD))
	}
	if p.Service {
		svc := rt.ShimSpec{Mode: rt.ShimService, Rlimits: p.Rlimits, UID: -1, GID: -1, Path: p.Exe, Argv: p.Argv}
		a = append(a, "--", ShimPath)
		return append(a, svc.Args()...)
	}
	a = append(a, "--clearenv")
	for _, kv := range rt.Env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	a = append(a, "--", ShimPath)
	init := rt.ShimSpec{Mode: rt.ShimInit, Rlimits: p.Rlimits, UID: -1, GID: -1, KeepStderr: p.KeepStderr, Path: p.Exe, Argv: p.Argv}
	return append(a, init.Args()...)
}

// visible reports whether path is inside a tree the sandbox binds from the
// host (/usr, an unmerged root dir).
func (h Host) visible(path string) bool {
	if within(path, "/usr") {
		return true
	}
	for _, d := range h.RootDirs {
		if within(path, d) {
			return true
		}
	}
	return false
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// usrMergeNames are the top-level names a usr-merged host links into /usr.
var usrMergeNames = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// DetectHost looks at this host's / and /etc once.
func DetectHost(lstat func(string) (isLink, isDir bool, err error), readlink func(string) (string, error)) Host {
	var h Host
	for _, n := range usrMergeNames {
		p := "/" + n
		isLink, isDir, err := lstat(p)
		switch {
		case err != nil:
			continue
		case isLink:
			if t, err := readlink(p); err == nil && filepath.Clean(strings.TrimPrefix(t, "/")) == "usr/"+n {
				h.UsrLinks = append(h.UsrLinks, n)
			}
		case isDir:
			h.RootDirs = append(h.RootDirs, p)
		}
	}
	for _, e := range EtcAllowList {
		if _, _, err := lstat(e); err == nil {
			h.Etc = append(h.Etc, e)
		}
	}
	for _, e := range NetEtcAllowList {
		if _, _, err := lstat(e); err == nil {
			h.NetEtc = append(h.NetEtc, e)
		}
	}
	return h
}
