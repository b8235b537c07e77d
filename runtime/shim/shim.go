package shim

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/internal/proc"
)

// Main runs the shim os.Args name and never returns: a binary whose only
// job is the shim (cmd/toolgate-shim) calls it, and exits 2 when it was
// run without Arg.
func Main() {
	MaybeShim()
	fmt.Fprintln(os.Stderr, "toolgate-shim: an internal helper of toolgate; not meant to be run by hand")
	os.Exit(2)
}

// init keeps the main goroutine on the main thread (the thread the process
// started with) until MaybeShim knows whether this process is a shim. The
// parent-death signal is a thread's, not the process's (prctl(2)): the one
// a shim was started with (toolgate's, or bwrap's --die-with-parent inside
// a sandbox) is on the main thread alone, and Go threads the runtime makes
// later have none. An execve keeps only the thread that calls it, so a
// shim whose goroutine had moved to another thread (the standby shim
// after its wait on the release channel, about one release in twenty)
// would exec the tool without one, and the tool would outlive toolgate's
// SIGKILL. Locked from an init function, main runs on the main thread
// (runtime.LockOSThread), and a shim execs from it.
func init() {
	runtime.LockOSThread()
}

// MaybeShim runs a shim and never returns when os.Args name one; otherwise
// it returns at once. The toolgate binary's main (and TestMain of packages
// that run tools, through rt.MaybeShim) calls it first.
func MaybeShim() {
	if len(os.Args) < 2 || os.Args[1] != Arg {
		// Not a shim: the main goroutine may move as any other.
		runtime.UnlockOSThread()
		return
	}
	spec, err := parse(os.Args[2:])
	if err != nil {
		die(127, "bad shim arguments: %v", err)
	}
	switch spec.Mode {
	case Reap:
		os.Exit(reap(spec))
	case Enter:
		enter(spec)
	case Init:
		initExec(spec)
	case Service:
		serviceExec(spec)
	case Standby:
		standbyExec(spec)
	case Hold:
		os.Exit(hold(spec))
	case Mask:
		maskExec(spec)
	case Guard:
		os.Exit(guard(spec))
	case Session:
		os.Exit(session(spec))
	}
	die(127, "unknown shim mode %q", spec.Mode)
}

// onMainThread ends the shim (exit 126) unless it runs on the main
// thread, which holds the parent-death signal it was started with (init
// says why): a process it execs from another thread would have none.
func onMainThread(what string) {
	if tid := unix.Gettid(); tid != os.Getpid() {
		die(126, "%s: on thread %d, not the main thread %d: it would exec without the parent-death signal", what, tid, os.Getpid())
	}
}

func die(code int, format string, a ...any) {
	fmt.Fprintf(os.Stderr, "toolgate: "+format+"\n", a...)
	os.Exit(code)
}

// enter joins the v1 cgroups, lowers the rlimits, drops privileges, joins
// a new session keyring and execs. Every step is required: a failure ends
// the call, it never runs with less than asked.
func enter(s Spec) {
	// The keyring, the parent-death signal and no_new_privs belong to
	// the thread that sets them, and execve keeps the credentials of the
	// thread that calls it: every step below and the exec run on this
	// one.
	runtime.LockOSThread()
	parent := os.Getppid()
	self := []byte(strconv.Itoa(os.Getpid()))
	for _, j := range s.Joins {
		if err := os.WriteFile(j, self, 0); err != nil {
			die(126, "sandbox: join cgroup %s: %v", j, err)
		}
	}
	setRlimits(s.Rlimits)
	if id := s.Drop; id != nil {
		if err := syscall.Setgroups(nil); err != nil {
			die(126, "sandbox: setgroups: %v", err)
		}
		if err := syscall.Setresgid(id.GID, id.GID, id.GID); err != nil {
			die(126, "sandbox: setresgid %d: %v", id.GID, err)
		}
		if err := syscall.Setresuid(id.UID, id.UID, id.UID); err != nil {
			die(126, "sandbox: setresuid %d: %v", id.UID, err)
		}
		// A change of credentials clears the parent-death signal
		// toolgate started this process with (prctl(2)); bwrap's
		// --die-with-parent comes only once bwrap runs. Arm it again,
		// and give up if toolgate died in between: a sandbox is never
		// left running without its server.
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
			die(126, "sandbox: parent-death signal: %v", err)
		}
		if os.Getppid() != parent {
			os.Exit(126)
		}
	}
	if err := joinNewSessionKeyring(); err != nil {
		die(126, "sandbox: new session keyring: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		die(126, "sandbox: no_new_privs: %v", err)
	}
	onMainThread("sandbox")
	err := syscall.Exec(s.Path, s.Argv, os.Environ()) //nolint:gosec // the enter shim's job: exec bwrap as its caller built it
	die(126, "sandbox: exec %s: %v", s.Path, err)
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
// (unless KeepStderr), the environment becomes exactly bundle.Env (bwrap adds PWD,
// OCI runtimes inject HOME), then exec.
func initExec(s Spec) {
	setRlimits(s.Rlimits)
	env := toolEnv(s.Env)
	if s.Egress != "" {
		os.Exit(superviseEgress(s, env, s.KeepStderr))
	}
	if !s.KeepStderr {
		if err := unix.Dup2(1, 2); err != nil {
			die(126, "init: dup2: %v", err)
		}
	}
	onMainThread("init")
	err := syscall.Exec(s.Path, s.Argv, env) //nolint:gosec // the init shim's job: exec the tool's configured path and fixed argv
	if errors.Is(err, syscall.E2BIG) {
		die(126, "start %s: argument list too long", s.Path)
	}
	die(127, "start %s: %v", s.Path, err)
}

// serviceExec is the first process of a sandboxed service: it execs the
// service with the environment it was started with, less PWD (bwrap sets
// it, and the service must see exactly what the caller gave bwrap), and
// leaves the standard streams alone: stdout is the service's protocol
// channel and stderr its log, kept apart.
func serviceExec(s Spec) {
	setRlimits(s.Rlimits)
	if s.Egress != "" {
		os.Exit(superviseEgress(s, withoutPWD(os.Environ()), true))
	}
	onMainThread("service")
	err := syscall.Exec(s.Path, s.Argv, withoutPWD(os.Environ())) //nolint:gosec // the service shim's job: exec the registry's configured server
	if errors.Is(err, syscall.E2BIG) {
		die(126, "start %s: argument list too long", s.Path)
	}
	die(127, "start %s: %v", s.Path, err)
}

// setRlimits lowers the rlimits (soft = hard) or ends the call: a sandbox
// never runs with less than asked.
func setRlimits(rl []Rlimit) {
	for _, r := range rl {
		lim := &syscall.Rlimit{Cur: r.Value, Max: r.Value}
		// syscall.Setrlimit (not unix) so that Go does not restore its
		// saved RLIMIT_NOFILE at exec.
		if err := syscall.Setrlimit(rlimitNames[r.Name], lim); err != nil {
			die(126, "sandbox: set rlimit %s=%d: %v", r.Name, r.Value, err)
		}
	}
}

// toolEnv is a tool's environment: exactly bundle.Env, then its own variables.
func toolEnv(own []string) []string {
	return append(append(make([]string, 0, len(bundle.Env)+len(own)), bundle.Env...), own...)
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
func reap(s Spec) int {
	runtime.LockOSThread() // Pdeathsig is tied to the thread that forks
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		die(126, "reap: subreaper: %v", err)
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
			die(126, "start %s: argument list too long", s.Path)
		}
		die(127, "start %s: %v", s.Path, err)
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
		// No child at all, the usual end: no /proc scan (a dozen files
		// read on the call's path).
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); errors.Is(err, unix.ECHILD) {
			return
		}
		for _, pid := range proc.ChildPids() {
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
