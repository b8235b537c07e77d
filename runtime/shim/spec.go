package shim

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Arg is the first argument that turns a binary into one of toolgate's
// exec shims: toolgate-shim (cmd/toolgate-shim), which toolgate runs; the
// toolgate binary itself; a test binary whose TestMain calls MaybeShim.
// The shims are small, single-purpose modes:
//
//   - reap: run the tool as a child subreaper, and when it exits kill and
//     reap everything it left behind (the direct backend, where no cgroup2
//     hierarchy is writable).
//   - enter: join the call's v1 cgroups, drop to the sandbox's host ids,
//     join a new anonymous session keyring, set no_new_privs, then exec
//     bwrap (the bwrap backend: every sandbox starts through it). The
//     rlimits are not set here but inside, by the init, service or
//     standby shim, so that bwrap itself runs with the server's.
//   - init: inside a sandbox (bwrap or an OCI container), set the rlimits
//     (bwrap; an OCI runtime sets them from the spec), make stderr the
//     same pipe as stdout (unless --stderr keep: a built-in's helper,
//     whose stdout is parsed), set the environment to exactly bundle.Env
//     plus the tool's own variables, then exec the tool (no shell).
//   - service: inside a sandbox, set the rlimits and exec a long-lived
//     service (a stdio MCP
//     server) with stdin, stdout and stderr untouched and the environment
//     the sandbox was given minus the PWD bwrap adds: the caller sets that
//     environment (bundle.Env plus the service's variables) on bwrap's own
//     process, so that no value ever appears on a command line.
//   - standby: inside a prepared bwrap sandbox (a Standby), set the
//     rlimits, say ReadyByte on the release channel and wait there; on
//     release, make the three descriptors the release carries stdin,
//     stdout and stderr (stderr is stdout unless --stderr keep), close
//     every other descriptor, and exec the tool with exactly bundle.Env (with
//     --env keep: the service's environment, as the service mode). A
//     channel closed without a release ends it without running anything.
//   - session: inside a prepared helper sandbox (rt.Session), set the
//     rlimits, say ReadyByte and run, one after another, the commands the
//     release channel brings (each checked against the prefix in argv and
//     the --verb words, CheckCommand), ending all a command left before
//     answering its status; never exec (session.go).
//   - mask: bind --mask FILE over TARGET in a private mount namespace,
//     then exec (crun 1.8 on a hybrid-cgroup host, oci's host.go).
//   - hold: beside a prepared OCI container, as a child subreaper: run
//     the runtime's create (the container waits in the runtime's own init,
//     with this shim's stdio as its streams), say ReadyByte, and on
//     release run the runtime's start, wait for the container's init
//     (reparented here) and exit with its status (release.go).
//
// With --egress SOCKET (a tool or service with an egress allowlist), the
// init and service shims do not exec: they stay the sandbox's first
// process, bridge the sandbox's loopback proxy port onto the egress
// proxy's socket, and run the tool as their child (egress.go).
//
// Shim options come before "--"; after it: the path to execve, then argv.
const Arg = "__toolgate_shim"

// Mode is what a shim does: the first word after Arg.
type Mode string

// The shim modes.
const (
	Reap    Mode = "reap"
	Enter   Mode = "enter"
	Init    Mode = "init"
	Service Mode = "service"
	Standby Mode = "standby"
	Hold    Mode = "hold"
	Mask    Mode = "mask"
	Guard   Mode = "guard"
	Session Mode = "session"
)

// KnownModes lists the shim modes.
func KnownModes() []Mode {
	return []Mode{Reap, Enter, Init, Service, Standby, Hold, Mask, Guard, Session}
}

// Rlimit is one resource limit a shim sets (soft = hard) before it execs.
type Rlimit struct {
	Name  string // "nofile", "nproc", "core", "fsize"
	Value uint64
}

var rlimitNames = map[string]int{
	"nofile": unix.RLIMIT_NOFILE,
	"nproc":  unix.RLIMIT_NPROC,
	"core":   unix.RLIMIT_CORE,
	"fsize":  unix.RLIMIT_FSIZE,
	"as":     unix.RLIMIT_AS,
}

// Spec is what a shim does, turned into arguments by Args and read back
// by the shim.
type Spec struct {
	Mode  Mode
	Joins []string // cgroup.procs files to join (enter)
	// Rlimits are set before the exec (init, service, standby inside a
	// bwrap sandbox; enter takes them too, but no backend gives it any).
	Rlimits []Rlimit
	// Drop (enter), when set, is the uid and gid to drop to; nil keeps
	// the caller's.
	Drop *IDs
	// KeepStderr (init, standby) leaves stderr apart from stdout.
	KeepStderr bool
	// Egress (init, service, standby), when set, is the egress proxy's
	// socket inside the sandbox: the shim stays as the sandbox's first
	// process, bridges 127.0.0.1:bundle.EgressPort onto the socket, and
	// runs the tool as its child with the proxy variables
	// (egress.go).
	Egress string
	// Answer (standby) keeps the shim PID 1 of a tool's sandbox: it runs
	// the tool as its child and answers its exit status on the release
	// channel instead of exec'ing it (standby.go).
	Answer bool
	// KeepEnv (standby) execs with the shim's own environment minus PWD,
	// as the service mode does, instead of exactly bundle.Env.
	KeepEnv bool
	// Env (init, standby) are the tool's own variables (its env line:
	// non-secret, on the command line), added to bundle.Env.
	Env []string
	// ReleaseFD (standby, hold, session) is the shim's end of the release
	// channel.
	ReleaseFD int
	// Verbs (session) are the words one of which must follow Argv in
	// every command the session runs (CheckCommand); none: any.
	Verbs []string
	// Start (hold) is the runtime's start command; PidFile is where its
	// create writes the container's init pid; Mask (hold), "FILE=TARGET",
	// binds FILE over TARGET in a private mount namespace first (crun on a
	// hybrid-cgroup host).
	Start   []string
	PidFile string
	Mask    string
	// Cgroups (guard) are the server's cgroup directories
	// (cgroup.Manager.ServerDirs); Parent is the server's pid, and
	// ParentFD the guard's end of a pipe the server holds the other end
	// of: its end of file is the server's death.
	Cgroups  []string
	Parent   int
	ParentFD int
	Path     string   // what to execve (hold: the runtime's create; guard: none)
	Argv     []string // its argv
}

// IDs is a uid and gid to drop to, both set.
type IDs struct {
	UID, GID int
}

// Args returns the argv (after the binary) that runs s.
func (s Spec) Args() []string {
	a := []string{Arg, string(s.Mode)}
	for _, j := range s.Joins {
		a = append(a, "--join", j)
	}
	for _, r := range s.Rlimits {
		a = append(a, "--rlimit", r.Name+"="+strconv.FormatUint(r.Value, 10))
	}
	if s.Drop != nil {
		a = append(a, "--uid", strconv.Itoa(s.Drop.UID), "--gid", strconv.Itoa(s.Drop.GID))
	}
	if s.KeepStderr {
		a = append(a, "--stderr", "keep")
	}
	if s.Egress != "" {
		a = append(a, "--egress", s.Egress)
	}
	if s.KeepEnv {
		a = append(a, "--env", "keep")
	}
	if s.Answer {
		a = append(a, "--answer", "status")
	}
	for _, kv := range s.Env {
		a = append(a, "--setenv", kv)
	}
	if s.ReleaseFD > 0 {
		a = append(a, "--release-fd", strconv.Itoa(s.ReleaseFD))
	}
	for _, v := range s.Verbs {
		a = append(a, "--verb", v)
	}
	if s.PidFile != "" {
		a = append(a, "--pid-file", s.PidFile)
	}
	if s.Mask != "" {
		a = append(a, "--mask", s.Mask)
	}
	for _, x := range s.Start {
		a = append(a, "--start", x)
	}
	for _, d := range s.Cgroups {
		a = append(a, "--cgroup", d)
	}
	if s.Parent > 0 {
		a = append(a, "--parent", strconv.Itoa(s.Parent))
	}
	if s.ParentFD > 0 {
		a = append(a, "--parent-fd", strconv.Itoa(s.ParentFD))
	}
	if s.Mode == Guard {
		return a // it runs nothing
	}
	a = append(a, "--", s.Path)
	return append(a, s.Argv...)
}

func parse(args []string) (Spec, error) {
	var s Spec
	uid, gid := -1, -1
	if len(args) < 1 {
		return s, errors.New("no mode")
	}
	s.Mode, args = Mode(args[0]), args[1:]
	if !slices.Contains(KnownModes(), s.Mode) {
		return s, fmt.Errorf("unknown mode %q", s.Mode)
	}
	for len(args) > 0 && args[0] != "--" {
		if len(args) < 2 {
			return s, fmt.Errorf("option %q needs a value", args[0])
		}
		opt, val := args[0], args[1]
		args = args[2:]
		switch opt {
		case "--join":
			s.Joins = append(s.Joins, val)
		case "--rlimit":
			name, n, ok := strings.Cut(val, "=")
			v, err := strconv.ParseUint(n, 10, 64)
			if _, known := rlimitNames[name]; !ok || !known || err != nil {
				return s, fmt.Errorf("bad rlimit %q", val)
			}
			s.Rlimits = append(s.Rlimits, Rlimit{Name: name, Value: v})
		case "--stderr":
			if val != "keep" {
				return s, fmt.Errorf("bad --stderr %q: want keep", val)
			}
			s.KeepStderr = true
		case "--egress":
			s.Egress = val
		case "--env":
			if val != "keep" {
				return s, fmt.Errorf("bad --env %q: want keep", val)
			}
			s.KeepEnv = true
		case "--answer":
			if val != "status" {
				return s, fmt.Errorf("bad --answer %q: want status", val)
			}
			s.Answer = true
		case "--setenv":
			if k, _, ok := strings.Cut(val, "="); !ok || k == "" {
				return s, fmt.Errorf("bad --setenv %q: want KEY=VALUE", val)
			}
			s.Env = append(s.Env, val)
		case "--release-fd":
			n, err := strconv.Atoi(val)
			if err != nil || n < 3 {
				return s, fmt.Errorf("bad --release-fd %q", val)
			}
			s.ReleaseFD = n
		case "--verb":
			if val == "" || strings.IndexByte(val, 0) >= 0 {
				return s, fmt.Errorf("bad --verb %q", val)
			}
			s.Verbs = append(s.Verbs, val)
		case "--pid-file":
			s.PidFile = val
		case "--mask":
			if src, dst, ok := strings.Cut(val, "="); !ok || !filepath.IsAbs(src) || !filepath.IsAbs(dst) {
				return s, fmt.Errorf("bad --mask %q: want FILE=TARGET, both absolute", val)
			}
			s.Mask = val
		case "--start":
			s.Start = append(s.Start, val)
		case "--cgroup":
			if !filepath.IsAbs(val) || filepath.Clean(val) != val {
				return s, fmt.Errorf("bad --cgroup %q: want an absolute, clean path", val)
			}
			s.Cgroups = append(s.Cgroups, val)
		case "--parent":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 {
				return s, fmt.Errorf("bad --parent %q", val)
			}
			s.Parent = n
		case "--parent-fd":
			n, err := strconv.Atoi(val)
			if err != nil || n < 3 {
				return s, fmt.Errorf("bad --parent-fd %q", val)
			}
			s.ParentFD = n
		case "--uid", "--gid":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return s, fmt.Errorf("bad %s %q", opt, val)
			}
			if opt == "--uid" {
				uid = n
			} else {
				gid = n
			}
		default:
			return s, fmt.Errorf("unknown option %q", opt)
		}
	}
	switch {
	case uid >= 0 && gid >= 0:
		s.Drop = &IDs{UID: uid, GID: gid}
	case uid >= 0 || gid >= 0:
		return s, errors.New("--uid and --gid go together")
	}
	if s.Mode == Guard {
		switch {
		case len(args) > 0:
			return s, errors.New("guard runs nothing: want no -- PATH")
		case s.Parent == 0 || s.ParentFD == 0:
			return s, errors.New("guard needs --parent and --parent-fd")
		}
		return s, nil
	}
	if len(args) < 3 {
		return s, errors.New("want -- PATH ARGV0 [ARGS...]")
	}
	s.Path, s.Argv = args[1], args[2:]
	return s, nil
}
