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
)

// standbyExec is the first process of a prepared bwrap sandbox. It sets
// the rlimits, says it is ready and waits on the release channel: no tool
// code runs in the sandbox until the release. The release carries the
// call's stdin, stdout and stderr, which become the tool's 0, 1 and 2
// (stderr is stdout unless KeepStderr: a tool's two streams are one,
// whatever the release says), with nothing else open and exactly
// bundle.Env plus the tool's own variables.
//
// A tool's sandbox (Answer) does not exec the tool: the shim stays its
// PID 1, runs the tool as its child, and once it exits kills and reaps
// whatever it left (kill(-1)) and answers its exit status on the release
// channel, then waits for the channel to close. The server has the
// call's end from that answer, without waiting for the sandbox's own
// teardown (the shim's exit, bwrap's, the namespaces'), which happens
// after the answer, off the call's path; and an exec from a Go process
// (its threads ended, its address space torn down) costs more than a
// child's. As in a helper session (session.go), the shim is not
// dumpable and deaf to the signals a tool could end it with (harden), so
// that nothing in the sandbox reaches the channel.
//
// A service's sandbox (KeepEnv) execs the service with the service's
// environment: its process is the sandbox's for the service's life.
//
// Prepared for a tool with an egress allowlist (Egress EgressAtRelease),
// the release carries a fourth descriptor, the call's egress proxy socket
// (opened O_PATH: an egress proxy is a call's own, started at the
// release), which the shim bridges the proxy port onto, as the init shim
// of a sandbox made with its proxy does.
func standbyExec(s Spec) {
	if s.ReleaseFD < 3 {
		die(125, "standby: no release channel")
	}
	want := Streams
	switch s.Egress {
	case "":
	case EgressAtRelease:
		want++
	default:
		die(125, "standby: a prepared sandbox takes its egress proxy at its release")
	}
	if s.Answer && (s.KeepEnv || os.Getpid() != 1) {
		die(125, "standby: a shim that answers is a tool sandbox's PID 1")
	}
	setRlimits(s.Rlimits)
	if s.Answer {
		harden()
	}
	if err := signalReady(s.ReleaseFD, 0); err != nil {
		die(125, "standby: ready: %v", err)
	}
	fds, err := awaitRelease(s.ReleaseFD, want)
	if errors.Is(err, errDiscarded) {
		os.Exit(125)
	}
	if err != nil {
		die(125, "standby: %v", err)
	}
	in, out, errOut := fds[0], fds[1], fds[2]
	if !s.KeepStderr {
		errOut = out
	}
	for i, fd := range []int{in, out, errOut} {
		if err := unix.Dup2(fd, i); err != nil {
			die(126, "standby: dup2: %v", err)
		}
	}
	keep := 3 // the first descriptor closed below
	if want > Streams {
		// The proxy socket, as 3, closed at the tool's exec.
		if err := unix.Dup3(fds[Streams], 3, unix.O_CLOEXEC); err != nil && fds[Streams] != 3 {
			die(126, "standby: dup3: %v", err)
		}
		keep = 4
	}
	env := toolEnv(s.Env)
	if s.KeepEnv {
		env = withoutPWD(os.Environ())
	}
	if !s.Answer {
		execPrepared(s, env, keep)
	}
	// The descriptors as received go (the streams are 0, 1 and 2 now);
	// whatever else the sandbox was started with, the release channel
	// included, is closed at the tool's exec.
	for _, fd := range fds {
		if fd >= keep && fd != s.ReleaseFD {
			_ = unix.Close(fd)
		}
	}
	closeOnExec(keep)
	var code int
	if want > Streams {
		s.Egress = "/proc/self/fd/3"
		code = superviseEgress(s, env, s.KeepStderr)
	} else {
		code = reapUntil(startTool(s.Path, s.Argv, env, os.Stderr))
	}
	endAll()
	if err := sendStatus(s.ReleaseFD, code); err != nil {
		die(125, "standby: status: %v", err)
	}
	awaitClose(s.ReleaseFD)
	os.Exit(0)
}

// execPrepared execs the tool (or service) of s with env, every
// descriptor from keep up closed: a service's sandbox, whose process is
// the service's.
func execPrepared(s Spec, env []string, keep int) {
	if err := unix.CloseRange(uint(keep), ^uint(0), 0); err != nil {
		for fd := keep; fd < 1024; fd++ {
			_ = unix.Close(fd)
		}
	}
	if keep > 3 {
		// A service with an egress allowlist is never prepared (rt.Pool
		// starts it with its proxy), nor released with a socket.
		die(125, "standby: a service takes no egress socket at its release")
	}
	onMainThread("standby")
	err := syscall.Exec(s.Path, s.Argv, env) //nolint:gosec // the standby shim's job: exec the path and argv it was prepared with
	if errors.Is(err, syscall.E2BIG) {
		die(126, "start %s: argument list too long", s.Path)
	}
	die(127, "start %s: %v", s.Path, err)
}

// harden keeps a shim that stays its sandbox's PID 1 out of the reach of
// what runs in the sandbox as the same uid: not dumpable (no ptrace, no
// /proc/1/fd, /proc/1/environ or /proc/1/mem), deaf to every signal that
// would end it (deafSignals), and every descriptor it was started with
// closed at an exec.
func harden() {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		die(125, "sandbox: not dumpable: %v", err)
	}
	// Relayed to a channel nobody reads, not ignored: an ignored signal
	// stays ignored across exec, so every tool and helper the shim starts
	// would begin with SIGTERM or SIGPIPE ignored, and a handled one is
	// back to its default in the child. The kernel delivers to a pid
	// namespace's init, from inside it, only the signals it handles; Go's
	// handler then drops a relayed signal a full channel cannot take.
	signal.Notify(make(chan os.Signal, 1), deafSignals...)
	closeOnExec(3)
}

// deafSignals are the signals that end a Go program when another process
// sends them (the runtime's kill, throw and panic signals, and SIGPIPE).
// A fault of the shim's own still crashes it: the runtime relays a fault
// signal only when a process sent it. SIGCHLD is not among them: the shim
// reaps its children with wait4.
var deafSignals = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP,
	syscall.SIGABRT, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGUSR1, syscall.SIGSEGV,
	syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGTERM, syscall.SIGSTKFLT, syscall.SIGSYS,
}

// closeOnExec marks every descriptor from fd up close-on-exec.
func closeOnExec(fd int) {
	if err := unix.CloseRange(uint(fd), ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		for ; fd < 1024; fd++ {
			unix.CloseOnExec(fd)
		}
	}
}

// startTool starts path with argv and env as a child whose stdin, stdout
// and stderr are the shim's 0, 1 and stderr, then lets go of the three
// (so that the call's output ends when the tool and what it left end),
// and returns its pid. A tool that cannot start ends the shim as the
// init shim's exec failure would: 127 (126: argument list too long),
// the reason on the call's stderr.
func startTool(path string, argv, env []string, stderr *os.File) int {
	// The parent-death signal is the main thread's (shim.go's init holds
	// the shim there), which ends only with the shim: a tool outlives
	// its PID 1 in no case (the pid namespace ends with it), and has one
	// as a tool exec'd by the shim has.
	onMainThread("start")
	pid, err := forkExec(path, argv, env, []uintptr{0, 1, stderr.Fd()})
	if err != nil {
		if errors.Is(err, syscall.E2BIG) {
			die(126, "start %s: argument list too long", path)
		}
		die(127, "start %s: %v", path, err)
	}
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		for fd := range 3 {
			_ = unix.Dup2(int(null.Fd()), fd)
		}
		null.Close()
	}
	return pid
}

// forkExec starts path as a child with files as its descriptors 0, 1, 2
// (nothing else: every other descriptor of the shim is close-on-exec),
// SIGKILLed when this thread ends. syscall.ForkExec, not
// os.StartProcess: the first os.StartProcess of a process forks a child
// of its own to learn whether the kernel has pidfds, half a millisecond
// on every prepared call.
func forkExec(path string, argv, env []string, files []uintptr) (int, error) {
	return syscall.ForkExec(path, argv, &syscall.ProcAttr{ //nolint:gosec // the shim's job: start the path and argv it was prepared with (or a session's command, checked)
		Env: env, Files: files,
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
}

// awaitClose waits until the server closes the release channel (or says
// anything more on it).
func awaitClose(fd int) {
	buf := make([]byte, 8)
	for {
		_, _, _, _, err := unix.Recvmsg(fd, buf, nil, 0)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// hold keeps an OCI container prepared: it runs the runtime's create
// (Path, Argv) with this process's stdin, stdout and stderr, which the
// container's process inherits (the call's pipes, made at preparation),
// then lets go of them, says it is ready, and waits for the release. On
// release it runs the runtime's start (Start), waits for the container's
// init, which the runtime's create left behind and which is reparented
// here (this process is a child subreaper), kills and reaps whatever else
// is left of its children, and exits with the init's status (128+N when
// signal N killed it). A channel closed without a release, a container
// that ends before it, or a failed create or start exit 125 without
// starting the container: the server kills and deletes it.
//
// With Answer, the shim answers the status on the release channel
// instead (125 for a failed start), and exits once the server closes
// it: the call ends at the answer, the shim after it.
func hold(s Spec) int {
	// Children inherit this thread's mount namespace (the crun mask), and
	// their parent-death signal is tied to it: the thread stays.
	runtime.LockOSThread()
	if s.ReleaseFD < 3 || s.PidFile == "" || len(s.Start) == 0 {
		die(125, "hold: want --release-fd, --pid-file and --start")
	}
	// The release channel is this shim's alone: not the runtime's create
	// nor the container's init waiting in it (a copy there would keep the
	// server from seeing the channel close when this shim ends).
	unix.CloseOnExec(s.ReleaseFD)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		die(125, "hold: subreaper: %v", err)
	}
	if s.Mask != "" {
		if err := maskFile(s.Mask); err != nil {
			die(125, "hold: %v", err)
		}
	}
	if code, err := runChild(s.Path, s.Argv, []*os.File{os.Stdin, os.Stdout, os.Stderr}); err != nil || code != 0 {
		die(125, "hold: %s create: exit %d %v", s.Path, code, errOrEmpty(err))
	}
	b, err := os.ReadFile(s.PidFile)
	pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil || pid <= 1 {
		die(125, "hold: container pid file %s: %q %v", s.PidFile, b, errOrEmpty(err))
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		die(125, "hold: container init %d: %v", pid, err)
	}
	// Keep a copy of stderr for the start's errors, and hold none of the
	// call's streams from here on: only the container does.
	errCopy, err := unix.FcntlInt(2, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		die(125, "hold: %v", err)
	}
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		for i := range 3 {
			_ = unix.Dup2(int(null.Fd()), i)
		}
		null.Close()
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.NewFile(uintptr(errCopy), "stderr"), "toolgate: "+format+"\n", a...)
		_ = unix.Kill(pid, unix.SIGKILL)
		killChildren()
		if s.Answer {
			_ = sendStatus(s.ReleaseFD, 125)
		}
		return 125
	}
	if err := signalReady(s.ReleaseFD, pid); err != nil {
		return fail("hold: ready: %v", err)
	}
	if err := awaitChannel(s.ReleaseFD, pidfd); err != nil {
		return fail("hold: %v", err)
	}
	if _, err := awaitRelease(s.ReleaseFD, 0); err != nil {
		if errors.Is(err, errDiscarded) {
			_ = unix.Kill(pid, unix.SIGKILL)
			killChildren()
			return 125
		}
		return fail("hold: %v", err)
	}
	if !s.Answer {
		_ = unix.Close(s.ReleaseFD)
	}
	out, code, err := runCaptured(s.Start)
	if err != nil || code != 0 {
		return fail("hold: %s start: exit %d %v: %s", s.Start[0], code, errOrEmpty(err), strings.TrimSpace(out))
	}
	_ = unix.Close(errCopy)
	status := waitInit(pid, pidfd)
	killChildren()
	if !s.Answer {
		return status
	}
	if err := sendStatus(s.ReleaseFD, status); err != nil {
		return 125
	}
	awaitClose(s.ReleaseFD)
	return 0
}

// awaitChannel waits until the release channel fd says something (or
// closes), or fails if the container whose pidfd is given ends first.
func awaitChannel(fd, pidfd int) error {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		break
	}
	if fds[0].Revents == 0 && fds[1].Revents != 0 {
		return errors.New("the container ended before its release")
	}
	return nil
}

// waitInit waits for the container's init and returns its exit code, or
// 128+N when signal N killed it. The init is a child here once the
// runtime's create has exited (a subreaper inherits orphans); if it is
// not, the pidfd says when it ended, but not how.
func waitInit(pid, pidfd int) int {
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err == nil {
			if ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ws.ExitStatus()
		}
		break
	}
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	fmt.Fprintln(os.Stderr, "toolgate: hold: the container's init is not a child: exit status unknown")
	return 125
}

// maskExec execs s.Path in a private mount namespace in which s.Mask's
// FILE is bound over its TARGET.
func maskExec(s Spec) {
	runtime.LockOSThread() // the namespace is this thread's, and exec keeps it
	if s.Mask == "" {
		die(125, "mask: no --mask")
	}
	if err := maskFile(s.Mask); err != nil {
		die(125, "%v", err)
	}
	onMainThread("mask")
	err := syscall.Exec(s.Path, s.Argv, os.Environ()) //nolint:gosec // the mask shim's job: exec the runtime command the oci backend built
	die(126, "mask: exec %s: %v", s.Path, err)
}

// maskFile binds FILE over TARGET ("FILE=TARGET") in a private mount
// namespace of this thread.
func maskFile(spec string) error {
	src, dst, _ := strings.Cut(spec, "=")
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("mask %s: unshare mount namespace: %w", dst, err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("mask %s: make mounts private: %w", dst, err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mask %s: %w", dst, err)
	}
	return nil
}

// runChild runs path with files as its stdio, SIGKILLed if this process
// dies, and returns its exit code.
func runChild(path string, argv []string, files []*os.File) (int, error) {
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: files,
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return -1, err
	}
	st, err := p.Wait()
	if err != nil {
		return -1, err
	}
	return st.ExitCode(), nil
}

// runCaptured runs argv with stdin /dev/null and returns what it wrote
// (the first 4 KiB) and its exit code.
func runCaptured(argv []string) (string, int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", -1, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		r.Close()
		w.Close()
		return "", -1, err
	}
	defer null.Close()
	type got struct {
		s string
	}
	done := make(chan got, 1)
	go func() {
		buf := make([]byte, 4096)
		n := 0
		for {
			dst := buf[n:]
			if len(dst) == 0 {
				var scratch [512]byte
				dst = scratch[:] // read on: the writer must never block
			}
			k, err := r.Read(dst)
			if n < len(buf) {
				n += k
			}
			if err != nil {
				break
			}
		}
		r.Close()
		done <- got{string(buf[:n])}
	}()
	code, err := runChild(argv[0], argv, []*os.File{null, w, w})
	w.Close()
	out := <-done
	return out.s, code, err
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
