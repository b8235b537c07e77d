package runtime

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	procfs "github.com/toolgate/toolgate/internal/proc"
)

// ShimArg is the first argument that turns the toolgate binary into one of
// its exec shims. The shims are small, single-purpose modes of the same
// binary, so that a deployment has one file to trust:
//
//   - reap: run the tool as a child subreaper, and when it exits kill and
//     reap everything it left behind (the direct backend, where no cgroup2
//     hierarchy is writable).
//   - enter: join the call's v1 cgroups, lower rlimits, drop to the sandbox
//     uid/gid, join a new anonymous session keyring, set no_new_privs,
//     then exec (the bwrap backend: every sandbox starts through it).
//   - init: inside a sandbox (bwrap or an OCI container), make stderr the
//     same pipe as stdout (unless --stderr keep: a built-in's helper, whose
//     stdout is parsed), set the environment to exactly Env, then exec the
//     tool (no shell).
//   - service: inside a sandbox, exec a long-lived service (a stdio MCP
//     server) with stdin, stdout and stderr untouched and the environment
//     the sandbox was given minus the PWD bwrap adds: the caller sets that
//     environment (Env plus the service's variables) on bwrap's own
//     process, so that no value ever appears on a command line.
//   - standby: inside a prepared bwrap sandbox (a Standby), set the
//     rlimits, say ReadyByte on the release channel and wait there; on
//     release, make the three descriptors the release carries stdin,
//     stdout and stderr (stderr is stdout unless --stderr keep), close
//     every other descriptor, and exec the tool with exactly Env (with
//     --env keep: the service's environment, as the service mode). A
//     channel closed without a release ends it without running anything.
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
// proxy's socket, and run the tool as their child (shim_egress.go).
//
// Shim options come before "--"; after it: the path to execve, then argv.
const ShimArg = "__toolgate_shim"

// Shim modes.
const (
	ShimReap    = "reap"
	ShimEnter   = "enter"
	ShimInit    = "init"
	ShimService = "service"
	ShimStandby = "standby"
	ShimHold    = "hold"
	ShimMask    = "mask"
)

// Rlimit is one resource limit set by the enter shim (soft = hard).
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

// ShimSpec is what a shim does, turned into arguments by Args.
type ShimSpec struct {
	Mode    string
	Joins   []string // cgroup.procs files to join (enter)
	Rlimits []Rlimit // enter
	UID     int      // enter: drop to this uid/gid when >= 0
	GID     int
	// KeepStderr (init, standby) leaves stderr apart from stdout.
	KeepStderr bool
	// Egress (init, service, standby), when set, is the egress proxy's
	// socket inside the sandbox: the shim stays as the sandbox's first
	// process, bridges 127.0.0.1:bundle.EgressPort onto the socket, and
	// runs the tool as its child with the proxy variables
	// (shim_egress.go).
	Egress string
	// KeepEnv (standby) execs with the shim's own environment minus PWD,
	// as the service mode does, instead of exactly Env.
	KeepEnv bool
	// Env (init, standby) are the tool's own variables (its env line:
	// non-secret, on the command line), added to Env.
	Env []string
	// ReleaseFD (standby, hold) is the shim's end of the release channel.
	ReleaseFD int
	// Start (hold) is the runtime's start command; PidFile is where its
	// create writes the container's init pid; Mask (hold), "FILE=TARGET",
	// binds FILE over TARGET in a private mount namespace first (crun on a
	// hybrid-cgroup host).
	Start   []string
	PidFile string
	Mask    string
	Path    string   // what to execve (hold: the runtime's create)
	Argv    []string // its argv
}

// Args returns the argv (after the binary) that runs spec.
func (s ShimSpec) Args() []string {
	a := []string{ShimArg, s.Mode}
	for _, j := range s.Joins {
		a = append(a, "--join", j)
	}
	for _, r := range s.Rlimits {
		a = append(a, "--rlimit", r.Name+"="+strconv.FormatUint(r.Value, 10))
	}
	if s.UID >= 0 {
		a = append(a, "--uid", strconv.Itoa(s.UID), "--gid", strconv.Itoa(s.GID))
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
	for _, kv := range s.Env {
		a = append(a, "--setenv", kv)
	}
	if s.ReleaseFD > 0 {
		a = append(a, "--release-fd", strconv.Itoa(s.ReleaseFD))
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
	a = append(a, "--", s.Path)
	return append(a, s.Argv...)
}

func parseShim(args []string) (ShimSpec, error) {
	s := ShimSpec{UID: -1, GID: -1}
	if len(args) < 1 {
		return s, errors.New("no mode")
	}
	s.Mode, args = args[0], args[1:]
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
		case "--pid-file":
			s.PidFile = val
		case "--mask":
			if src, dst, ok := strings.Cut(val, "="); !ok || !filepath.IsAbs(src) || !filepath.IsAbs(dst) {
				return s, fmt.Errorf("bad --mask %q: want FILE=TARGET, both absolute", val)
			}
			s.Mask = val
		case "--start":
			s.Start = append(s.Start, val)
		case "--uid", "--gid":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return s, fmt.Errorf("bad %s %q", opt, val)
			}
			if opt == "--uid" {
				s.UID = n
			} else {
				s.GID = n
			}
		default:
			return s, fmt.Errorf("unknown option %q", opt)
		}
	}
	if len(args) < 3 {
		return s, errors.New("want -- PATH ARGV0 [ARGS...]")
	}
	s.Path, s.Argv = args[1], args[2:]
	return s, nil
}

// MaybeShim runs a shim and never returns when os.Args name one; otherwise
// it returns at once. main (and TestMain of packages that run tools) calls
// it first.
func MaybeShim() {
	if len(os.Args) < 2 || os.Args[1] != ShimArg {
		return
	}
	spec, err := parseShim(os.Args[2:])
	if err != nil {
		shimFail(127, "bad shim arguments: %v", err)
	}
	switch spec.Mode {
	case ShimReap:
		os.Exit(reap(spec))
	case ShimEnter:
		enter(spec)
	case ShimInit:
		initExec(spec)
	case ShimService:
		serviceExec(spec)
	case ShimStandby:
		standbyExec(spec)
	case ShimHold:
		os.Exit(hold(spec))
	case ShimMask:
		maskExec(spec)
	}
	shimFail(127, "unknown shim mode %q", spec.Mode)
}

func shimFail(code int, format string, a ...any) {
	fmt.Fprintf(os.Stderr, "toolgate: "+format+"\n", a...)
	os.Exit(code)
}

// enter joins the v1 cgroups, lowers the rlimits, drops privileges, joins
// a new session keyring and execs. Every step is required: a failure ends
// the call, it never runs with less than asked.
func enter(s ShimSpec) {
	// The keyring, the parent-death signal and no_new_privs belong to
	// the thread that sets them, and execve keeps the credentials of the
	// thread that calls it: every step below and the exec run on this
	// one.
	runtime.LockOSThread()
	parent := os.Getppid()
	self := []byte(strconv.Itoa(os.Getpid()))
	for _, j := range s.Joins {
		if err := os.WriteFile(j, self, 0); err != nil {
			shimFail(126, "sandbox: join cgroup %s: %v", j, err)
		}
	}
	setRlimits(s.Rlimits)
	if s.UID >= 0 {
		if err := syscall.Setgroups(nil); err != nil {
			shimFail(126, "sandbox: setgroups: %v", err)
		}
		if err := syscall.Setresgid(s.GID, s.GID, s.GID); err != nil {
			shimFail(126, "sandbox: setresgid %d: %v", s.GID, err)
		}
		if err := syscall.Setresuid(s.UID, s.UID, s.UID); err != nil {
			shimFail(126, "sandbox: setresuid %d: %v", s.UID, err)
		}
		// A change of credentials clears the parent-death signal
		// toolgate started this process with (prctl(2)); bwrap's
		// --die-with-parent comes only once bwrap runs. Arm it again,
		// and give up if toolgate died in between: a sandbox is never
		// left running without its server.
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
			shimFail(126, "sandbox: parent-death signal: %v", err)
		}
		if os.Getppid() != parent {
			os.Exit(126)
		}
	}
	if err := joinNewSessionKeyring(); err != nil {
		shimFail(126, "sandbox: new session keyring: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		shimFail(126, "sandbox: no_new_privs: %v", err)
	}
	err := syscall.Exec(s.Path, s.Argv, os.Environ()) //nolint:gosec // the enter shim's job: exec bwrap as its caller built it
	shimFail(126, "sandbox: exec %s: %v", s.Path, err)
}

// joinNewSessionKeyring makes the calling thread's session keyring a new,
// empty, anonymous one (KEYCTL_JOIN_SESSION_KEYRING with a NULL name; runc
// and crun give every container a new one too), so that bwrap and
// everything in the sandbox inherit it instead of toolgate's: keyrings
// are not namespaced, and a shared session keyring would carry keys and
// linked keyrings from one call to the next (issue 21). It runs after the
// uid drop, so that the keyring is the sandbox uid's (toolgate's own when
// it is not root) and counts against that uid's key quota; inside, the
// sandbox's seccomp filter refuses every keyring syscall. unix.KeyctlJoinSessionKeyring("") would not do: it passes an
// empty name, not NULL, which the kernel refuses (EINVAL; a name joins
// the keyring of that name when the caller may search it). A kernel
// without keys (ENOSYS) has no keyring to share; any other failure ends
// the call.
func joinNewSessionKeyring() error {
	_, _, e := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0)
	switch e {
	case 0, unix.ENOSYS:
		return nil
	case unix.EDQUOT:
		return fmt.Errorf("%w: the sandbox uid's key quota is used up (sysctl kernel.keys.maxkeys, kernel.keys.maxbytes)", e)
	}
	return e
}

// initExec is the first process inside a sandbox: stderr becomes stdout
// (unless KeepStderr), the environment becomes exactly Env (bwrap adds PWD,
// OCI runtimes inject HOME), then exec.
func initExec(s ShimSpec) {
	setRlimits(s.Rlimits)
	env := toolEnv(s.Env)
	if s.Egress != "" {
		os.Exit(superviseEgress(s, env, s.KeepStderr))
	}
	if !s.KeepStderr {
		if err := unix.Dup2(1, 2); err != nil {
			shimFail(126, "init: dup2: %v", err)
		}
	}
	err := syscall.Exec(s.Path, s.Argv, env) //nolint:gosec // the init shim's job: exec the tool's configured path and fixed argv
	if errors.Is(err, syscall.E2BIG) {
		shimFail(126, "start %s: argument list too long", s.Path)
	}
	shimFail(127, "start %s: %v", s.Path, err)
}

// serviceExec is the first process of a sandboxed service: it execs the
// service with the environment it was started with, less PWD (bwrap sets
// it, and the service must see exactly what the caller gave bwrap), and
// leaves the standard streams alone: stdout is the service's protocol
// channel and stderr its log, kept apart.
func serviceExec(s ShimSpec) {
	setRlimits(s.Rlimits)
	if s.Egress != "" {
		os.Exit(superviseEgress(s, withoutPWD(os.Environ()), true))
	}
	err := syscall.Exec(s.Path, s.Argv, withoutPWD(os.Environ())) //nolint:gosec // the service shim's job: exec the registry's configured server
	if errors.Is(err, syscall.E2BIG) {
		shimFail(126, "start %s: argument list too long", s.Path)
	}
	shimFail(127, "start %s: %v", s.Path, err)
}

// setRlimits lowers the rlimits (soft = hard) or ends the call: a sandbox
// never runs with less than asked.
func setRlimits(rl []Rlimit) {
	for _, r := range rl {
		lim := &syscall.Rlimit{Cur: r.Value, Max: r.Value}
		// syscall.Setrlimit (not unix) so that Go does not restore its
		// saved RLIMIT_NOFILE at exec.
		if err := syscall.Setrlimit(rlimitNames[r.Name], lim); err != nil {
			shimFail(126, "sandbox: set rlimit %s=%d: %v", r.Name, r.Value, err)
		}
	}
}

// toolEnv is a tool's environment: exactly Env, then its own variables.
func toolEnv(own []string) []string {
	return append(append(make([]string, 0, len(Env)+len(own)), Env...), own...)
}

// withoutPWD returns env less every PWD entry.
func withoutPWD(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PWD=") {
			out = append(out, kv)
		}
	}
	return out
}

// reap runs the tool as a child of a subreaper and, once it exits, kills and
// reaps every process it left. SIGTERM (sent by Exec on timeout or
// cancellation) kills the whole tree at once. It returns the tool's exit
// code, or 128+N when signal N killed it.
func reap(s ShimSpec) int {
	runtime.LockOSThread() // Pdeathsig is tied to the thread that forks
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		shimFail(126, "reap: subreaper: %v", err)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	// Exit with the parent: SIGTERM is handled below like a timeout.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0)

	p, err := os.StartProcess(s.Path, s.Argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		if errors.Is(err, syscall.E2BIG) {
			shimFail(126, "start %s: argument list too long", s.Path)
		}
		shimFail(127, "start %s: %v", s.Path, err)
	}
	// The shim must not hold the output pipe open itself.
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		_ = unix.Dup2(int(null.Fd()), 1)
		_ = unix.Dup2(int(null.Fd()), 2)
		null.Close()
	}

	exited := make(chan int, 1)
	go func() {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(p.Pid, &ws, 0, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		if ws.Signaled() {
			exited <- 128 + int(ws.Signal())
			return
		}
		exited <- ws.ExitStatus()
	}()
	var code int
	select {
	case code = <-exited:
	case <-term:
		_ = unix.Kill(-p.Pid, unix.SIGKILL)
		code = <-exited
	}
	_ = unix.Kill(-p.Pid, unix.SIGKILL)
	killChildren()
	return code
}

// killChildren SIGKILLs and reaps every child (and its process group) until
// none is left. Orphans of the tool are reparented here because this
// process is a child subreaper.
func killChildren() {
	for {
		for _, pid := range procfs.ChildPids() {
			_ = unix.Kill(-pid, unix.SIGKILL)
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		var ws unix.WaitStatus
		_, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.ECHILD) {
			return
		}
	}
}

// ShimName is the file name of the shim binary, installed next to toolgate.
const ShimName = "toolgate-shim"

// FindShim returns the shim binary next to the running executable: the
// toolgate-shim that was built and installed with it.
func FindShim() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate the toolgate binary: %w", err)
	}
	self, err = filepath.EvalSymlinks(self)
	if err != nil {
		return "", fmt.Errorf("locate the toolgate binary: %w", err)
	}
	p := filepath.Join(filepath.Dir(self), ShimName)
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%s must be installed next to %s (build both: go build ./cmd/toolgate ./cmd/toolgate-shim): %w", ShimName, self, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", p)
	}
	return p, nil
}
