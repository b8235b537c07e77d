// Package probes is the test tool of toolgate's runner and sandbox tests and
// of `toolgate selftest`: a mode per behaviour under test (environment,
// network, writes, floods, daemons, fork and memory bombs, ptrace). Tests
// run it as the static program internal/probe; the toolgate binary runs it
// when its first argument is ShimArg, which is how selftest probes a
// deployed sandbox without installing anything.
//
// Nothing here changes the host, even when a sandbox is broken: the
// destructive modes (forkbomb, membomb, ptrace, killall) and real writes
// refuse to run unless the probe is PID 1 of a pid namespace, which it is
// only as the tool of a sandbox; outside one, writability is asked with
// access(2), which writes nothing.
package probes

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// ShimArg is the first argument that makes the toolgate binary run the
// probe.
const ShimArg = "__toolgate_probe"

// prefix is what re-executions of this program need before the mode: empty
// for the probe program, ShimArg inside toolgate.
var prefix []string

// tag, when the last argument is "tag=...", is passed on to every process
// the probe starts, so that a host-side check can find them all by their
// command line.
var tag string

// self returns a command that runs this program in another mode.
func self(args ...string) *exec.Cmd {
	argv := append(append([]string(nil), prefix...), args...)
	if tag != "" {
		argv = append(argv, tag)
	}
	return exec.Command("/proc/self/exe", argv...) //nolint:gosec // re-executes this very program in another mode
}

// Main runs the probe mode args[0] and exits. pre is what must precede a
// mode to re-execute the same program (nil for the probe program).
// Destructive modes exit 99 outside a sandbox.
func Main(pre, args []string) {
	prefix = pre
	if len(args) < 1 {
		fail("usage: probe MODE [ARGS...]")
	}
	if last := args[len(args)-1]; strings.HasPrefix(last, "tag=") {
		tag, args = last, args[:len(args)-1]
	}
	if len(args) < 1 {
		fail("usage: probe MODE [ARGS...] [tag=...]")
	}
	mode, args := args[0], args[1:]
	switch mode {
	case "echo":
		fmt.Println(strings.Join(args, " "))
	case "argv":
		for _, a := range os.Args {
			fmt.Printf("%q\n", a)
		}
	case "env":
		env := os.Environ()
		sort.Strings(env)
		for _, e := range env {
			fmt.Println(e)
		}
	case "cwd":
		wd, err := os.Getwd()
		check(err)
		fmt.Println(wd)
	case "stdin":
		b, err := io.ReadAll(os.Stdin)
		check(err)
		fmt.Printf("stdin bytes=%d\n", len(b))
	case "id":
		fmt.Printf("uid=%d gid=%d euid=%d groups=%v\n", os.Getuid(), os.Getgid(), os.Geteuid(), groups())
	case "exit":
		fmt.Println("bye")
		os.Exit(atoi(arg(args, 0)))
	case "stderr":
		fmt.Fprintln(os.Stdout, "to stdout")
		fmt.Fprintln(os.Stderr, "to stderr")
	case "flood":
		flood(int64(atoi(arg(args, 0))))
	case "sleep":
		time.Sleep(time.Duration(atoi(arg(args, 0))) * time.Second)
		fmt.Println("woke")
	case "ignoreterm":
		ignoreTerm(args)
	case "daemon":
		daemon()
	case "daemon-child":
		daemonChild()
	case "daemon-grandchild":
		fmt.Printf("grandchild pid=%d\n", os.Getpid())
		os.Stdout.Sync()
		// Said: the daemon child waits for this (fd 3) before it exits.
		if said := os.NewFile(3, "said"); said != nil {
			_, _ = said.Write([]byte{1})
			said.Close()
		}
		time.Sleep(60 * time.Second)
	case "detached":
		detached()
	case "detached-child":
		// Closed stdio, own session: a true daemon. It sleeps.
		time.Sleep(60 * time.Second)
	case "net":
		netProbe(args)
	case "egress":
		egressProbe(args)
	case "write":
		for _, p := range args {
			fmt.Printf("write %s: %s\n", p, result(tryWrite(p)))
		}
	case "writable":
		// access(2) only: asks without writing.
		for _, p := range args {
			fmt.Printf("writable %s: %s\n", p, result(accessWrite(p)))
		}
	case "read":
		for _, p := range args {
			_, err := os.ReadFile(p)
			fmt.Printf("read %s: %s\n", p, result(err))
		}
	case "exists":
		for _, p := range args {
			_, err := os.Lstat(p)
			fmt.Printf("exists %s: %v\n", p, err == nil)
		}
	case "status":
		status()
	case "environ-all":
		environAll(arg(args, 0))
	case "userns":
		err := syscall.Unshare(syscall.CLONE_NEWUSER)
		fmt.Printf("unshare user: %s\n", result(err))
	case "forkbomb":
		requireSandbox()
		forkbomb(atoi(arg(args, 0)))
	case "forkbomb-child":
		time.Sleep(30 * time.Second)
	case "membomb":
		requireSandbox()
		membomb(atoi(arg(args, 0)))
	case "ptrace":
		requireSandbox()
		ptraceAll()
	case "killall":
		requireSandbox()
		fmt.Println("kill -1:", result(syscall.Kill(-1, syscall.SIGKILL)))
	case "signal-shim":
		requireSandbox()
		signalShim()
	case "pid":
		fmt.Printf("pid=%d ppid=%d\n", os.Getpid(), os.Getppid())
		if os.Getpid() != 1 && os.Getppid() == 1 && shimIsInit() {
			fmt.Println("parent: toolgate's shim")
		}
	case "processes":
		fmt.Printf("processes: %d\n", len(pids()))
	case "pdeathsig":
		// The signal this process gets when its parent dies (0: none).
		// It is a thread's: the main thread's is the one the process
		// was started with (the probe program keeps main there), and
		// another thread's says nothing of it.
		runtime.LockOSThread()
		if tid := syscall.Gettid(); tid != os.Getpid() {
			fmt.Printf("pdeathsig=? read on thread %d, not the main thread\n", tid)
			break
		}
		var sig int32
		const prGetPdeathsig = 2
		_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prGetPdeathsig, uintptr(unsafe.Pointer(&sig)), 0)
		var err error
		if errno != 0 {
			err = errno
		}
		fmt.Printf("pdeathsig=%d %s\n", sig, result(err))
	case "fill":
		requireSandbox()
		fill(arg(args, 0), atoi(arg(args, 1)))
	case "fds":
		fds()
	case "mcp":
		mcpServer(args)
	case "escapes":
		fmt.Print(Escapes)
	case "leftovers":
		requireSandbox()
		leftovers()
	case "alone":
		alone(atoi(arg(args, 0)))
	case "intrude":
		requireSandbox()
		intrude()
	case "session-intrude":
		requireSandbox()
		sessionIntrude()
	case "reach":
		reach(atoi(arg(args, 0)))
	case "add_key":
		// A syscall the seccomp profile refuses and an unprivileged user
		// may otherwise make: it adds a key to the process's keyring.
		typ, desc := []byte("user\x00"), []byte("toolgate-probe\x00")
		_, _, e := syscall.Syscall6(syscall.SYS_ADD_KEY, uintptr(unsafe.Pointer(&typ[0])), uintptr(unsafe.Pointer(&desc[0])),
			uintptr(unsafe.Pointer(&desc[0])), uintptr(len(desc)), 0xfffffffd /* KEY_SPEC_PROCESS_KEYRING */, 0)
		if e == 0 {
			fmt.Println("add_key: ok")
		} else {
			fmt.Printf("add_key: %s\n", result(e))
		}
	case "session-keyring":
		sessionKeyring(args)
	case "keyring":
		keyring(args)
	case "keyring-child":
		time.Sleep(time.Duration(atoi(arg(args, 0))) * time.Millisecond)
	default:
		fail("unknown mode " + mode)
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "probe:", msg)
	os.Exit(2)
}

func check(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func arg(args []string, i int) string {
	if i >= len(args) {
		fail("missing argument")
	}
	return args[i]
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	check(err)
	return n
}

func result(err error) string {
	if err == nil {
		return "ok"
	}
	if errno, ok := errors.AsType[syscall.Errno](err); ok {
		return "denied " + errnoName(errno)
	}
	return "denied " + err.Error()
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EROFS:
		return "EROFS"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPERM:
		return "EPERM"
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.ECONNREFUSED:
		return "ECONNREFUSED"
	case syscall.ENETUNREACH:
		return "ENETUNREACH"
	case syscall.EHOSTUNREACH:
		return "EHOSTUNREACH"
	case syscall.ENOSPC:
		return "ENOSPC"
	case syscall.ENOSYS:
		return "ENOSYS"
	case syscall.EAGAIN:
		return "EAGAIN"
	case syscall.ESRCH:
		return "ESRCH"
	case syscall.ENOKEY:
		return "ENOKEY"
	}
	return fmt.Sprintf("errno %d (%s)", int(e), e.Error())
}

func groups() []int {
	g, _ := os.Getgroups()
	return g
}

// tryWrite appends a byte to p, creating it, when this probe runs as PID 1
// of a pid namespace (a sandbox); elsewhere it only asks access(2).
func tryWrite(p string) error {
	if !sandboxed() {
		return accessWrite(p)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString("x")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// flood writes n bytes, alternating stdout and stderr in 64 KiB chunks.
func flood(n int64) {
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	outs := []*os.File{os.Stdout, os.Stderr}
	var written int64
	for i := 0; written < n; i++ {
		c := chunk
		if rest := n - written; rest < int64(len(c)) {
			c = c[:rest]
		}
		m, err := outs[i%2].Write(c)
		written += int64(m)
		if err != nil {
			fmt.Fprintf(os.Stderr, "flood: write error after %d: %v\n", written, err)
			os.Exit(3)
		}
	}
}

// ignoreTerm ignores TERM, INT and HUP, starts a child in its own session
// that does too, and sleeps.
func ignoreTerm(args []string) {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if len(args) == 0 || args[0] != "child" {
		c := self("ignoreterm", "child")
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		c.Stdout = os.Stdout
		check(c.Start())
		fmt.Printf("child pid=%d\n", c.Process.Pid)
	}
	fmt.Printf("ignoring pid=%d\n", os.Getpid())
	os.Stdout.Sync()
	time.Sleep(120 * time.Second)
}

// daemon: the direct child starts a setsid child, which starts a
// grandchild that keeps stdout (the output pipe) open, and both parents
// exit at once.
func daemon() {
	c := self("daemon-child")
	c.Stdout = os.Stdout
	c.Stderr = os.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	check(c.Start())
	check(c.Wait())
	fmt.Println("parent exiting")
}

func daemonChild() {
	r, w, err := os.Pipe()
	check(err)
	c := self("daemon-grandchild")
	c.Stdout = os.Stdout
	c.Stderr = os.Stderr
	c.ExtraFiles = []*os.File{w}
	check(c.Start())
	w.Close()
	// Wait until the grandchild has printed its pid (it says so on the
	// pipe; EOF if it died first), however long a loaded machine takes
	// to start it: bounded, so that the call never hangs on it.
	_ = r.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _ = r.Read(make([]byte, 1))
}

// detached starts a child with its own session and no stdio at all (the
// pipe is not held), prints its pid and exits.
func detached() {
	c := self("detached-child")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	check(c.Start())
	fmt.Printf("detached pid=%d\n", c.Process.Pid)
}

// netProbe lists interfaces and tries a TCP connect to each address given.
func netProbe(addrs []string) {
	ifs, err := net.Interfaces()
	check(err)
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	fmt.Printf("interfaces: %s\n", strings.Join(names, ","))
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, 2*time.Second)
		if err == nil {
			c.Close()
		}
		fmt.Printf("connect %s: %s\n", a, result(err))
	}
	// Own loopback still works inside a sandbox.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Printf("loopback listen: %s\n", result(err))
		return
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err == nil {
		c.Close()
	}
	fmt.Printf("loopback: %s\n", result(err))
}

// status prints the security-relevant lines of /proc/self/status.
func status() {
	f, err := os.Open("/proc/self/status")
	check(err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		for _, k := range []string{"Cap", "NoNewPrivs", "Seccomp:", "Uid", "Gid"} {
			if strings.HasPrefix(l, k) {
				fmt.Println(strings.Join(strings.Fields(l), " "))
			}
		}
	}
	host, _ := os.Hostname()
	fmt.Printf("hostname: %s\n", host)
	// Asked of the kernel directly: gVisor does not report NoNewPrivs in
	// /proc/self/status.
	nnp, _, e := syscall.Syscall6(syscall.SYS_PRCTL, 39 /* PR_GET_NO_NEW_PRIVS */, 0, 0, 0, 0, 0)
	if e != 0 {
		fmt.Printf("prctl no_new_privs: %s\n", result(e))
	} else {
		fmt.Printf("prctl no_new_privs: %d\n", nnp)
	}
}

// environAll prints every visible process environment that contains
// marker, or "none".
func environAll(marker string) {
	found := 0
	dirs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte(marker)) {
			fmt.Printf("found in %s\n", p)
			found++
		}
	}
	fmt.Printf("environ: %d processes visible, %d with the marker\n", len(dirs), found)
}

// requireSandbox refuses to run a destructive probe unless this process is
// PID 1 of its pid namespace (the tool of a sandbox).
// leftoverFiles are the files leftovers leaves, for the next call to find.
var leftoverFiles = []string{"/tmp/toolgate-leftover", "/dev/shm/toolgate-leftover"}

// leftovers reports what an earlier call could have left for this one
// (its files in /tmp and /dev/shm, its processes), then leaves the same
// for the next: the files, and a detached child in a session of its own.
func leftovers() {
	for _, f := range leftoverFiles {
		_, err := os.Lstat(f)
		fmt.Printf("leftover %s: %v\n", f, err == nil)
	}
	fmt.Printf("processes: %d\n", len(pids()))
	env := os.Environ()
	sort.Strings(env)
	fmt.Printf("env: %s\n", strings.Join(env, " "))
	fmt.Printf("signals ignored: %s\n", SignalsIgnored())
	for _, f := range leftoverFiles {
		fmt.Printf("leave %s: %s\n", f, result(os.WriteFile(f, []byte("left by an earlier call\n"), 0o644)))
	}
	c := self("detached-child")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	fmt.Printf("leave a process: %s\n", result(c.Start()))
}

// pids lists the processes visible in /proc, but toolgate's shim when it
// is PID 1 of the sandbox and runs this process as its child (a prepared
// sandbox's, a helper session's, an egress sandbox's): it is not the
// tool's, and it is there in every such sandbox.
func pids() []int {
	shim := os.Getpid() != 1 && shimIsInit()
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && (n != 1 || !shim) {
			out = append(out, n)
		}
	}
	return out
}

// alone leaves a file of its own in /tmp, stays ms milliseconds (so that
// calls made at once are alive at once), then reports how many such files
// and processes it sees: a sandbox two calls shared would show two.
func alone(ms int) {
	f, err := os.CreateTemp("/tmp", "toolgate-alone-")
	if err != nil {
		fmt.Printf("alone: %s\n", result(err))
		return
	}
	f.Close()
	time.Sleep(time.Duration(ms) * time.Millisecond)
	mine, _ := filepath.Glob("/tmp/toolgate-alone-*")
	fmt.Printf("alone: %d files, %d processes\n", len(mine), len(pids()))
}

// intrude tries to reach anything outside its own sandbox that a prepared
// sandbox (waiting for another tool's call) would offer: the processes it
// can see and signal, the descriptors it holds, the unix sockets it can
// find, and writes where the other sandbox would look (/tmp, /dev/shm).
func intrude() {
	fmt.Printf("processes: %d\n", len(pids()))
	fds()
	socks, _ := os.ReadFile("/proc/net/unix")
	fmt.Printf("unix sockets: %d\n", max(0, len(strings.Split(strings.TrimSpace(string(socks)), "\n"))-1))
	for _, f := range []string{"/tmp/toolgate-intruder", "/dev/shm/toolgate-intruder"} {
		fmt.Printf("write %s: %s\n", f, result(os.WriteFile(f, []byte("intruder\n"), 0o644)))
	}
	fmt.Println("kill -1:", result(syscall.Kill(-1, syscall.SIGKILL)))
}

// sessionIntrude is a helper session's command (a child of the session
// shim, PID 1) trying to reach the shim and its release channel: its own
// descriptors, PID 1's (/proc/1/fd), its environment and memory, ptrace,
// signals that would stop or end it; then it leaves a process and a file
// behind for the next command to find.
func sessionIntrude() {
	fds()
	_, err := os.ReadDir("/proc/1/fd")
	fmt.Printf("list /proc/1/fd: %s\n", result(err))
	for _, fd := range []string{"3", "4", "5"} {
		f, err := os.Open("/proc/1/fd/" + fd)
		if err == nil {
			f.Close()
		}
		fmt.Printf("open /proc/1/fd/%s: %s\n", fd, result(err))
	}
	for _, f := range []string{"/proc/1/environ", "/proc/1/mem"} {
		_, err := os.ReadFile(f)
		fmt.Printf("read %s: %s\n", f, result(err))
	}
	runtime.LockOSThread()
	_, _, e := syscall.Syscall6(syscall.SYS_PTRACE, 0x4206 /* PTRACE_SEIZE */, 1, 0, 0, 0, 0)
	if e == 0 {
		fmt.Println("ptrace 1: attached")
		syscall.Syscall6(syscall.SYS_PTRACE, syscall.PTRACE_DETACH, 1, 0, 0, 0, 0)
	} else {
		fmt.Printf("ptrace 1: %s\n", result(e))
	}
	for sig := syscall.Signal(1); sig <= 64; sig++ {
		fmt.Printf("kill 1 %d: sent %s\n", int(sig), result(syscall.Kill(1, sig)))
	}
	fmt.Printf("leave /tmp/toolgate-session-left: %s\n", result(os.WriteFile("/tmp/toolgate-session-left", []byte("x"), 0o644)))
	c := self("detached-child")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	fmt.Printf("leave a process: %s\n", result(c.Start()))
}

// reach reports what this process can do to process pid: signal it, read
// its environment, open its namespaces (the first step of entering them).
// The battery runs it on the host as an unprivileged uid (never root: it
// refuses), to show that another sandbox's uid reaches nothing; even where
// it succeeds it changes nothing (signal 0, reads, descriptors closed).
func reach(pid int) {
	if os.Geteuid() == 0 || pid <= 1 {
		fmt.Fprintln(os.Stderr, "probe: reach: refusing as root or without a pid")
		os.Exit(99)
	}
	fmt.Println("signal:", result(syscall.Kill(pid, 0)))
	_, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	fmt.Println("environ:", result(err))
	for _, ns := range []string{"mnt", "user", "pid"} {
		fd, err := syscall.Open(fmt.Sprintf("/proc/%d/ns/%s", pid, ns), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err == nil {
			syscall.Close(fd)
		}
		fmt.Printf("ns/%s: %s\n", ns, result(err))
	}
}

// signalShim sends every signal, 1 to 64, to PID 1 when that is
// toolgate's shim (a prepared sandbox's, an egress sandbox's), not this
// process: none may end it, so the call still answers this tool's own
// status.
func signalShim() {
	if os.Getpid() == 1 || !shimIsInit() {
		fmt.Println("signals to the shim: no shim is PID 1")
		return
	}
	var refused []string
	for sig := syscall.Signal(1); sig <= 64; sig++ {
		if err := syscall.Kill(1, sig); err != nil {
			refused = append(refused, fmt.Sprintf("%d %s", int(sig), result(err)))
		}
	}
	fmt.Printf("signals to the shim: sent 1-64 (refused: %v)\n", refused)
}

// SignalsIgnored names the signals this process started with ignored, as
// the Go runtime saw them at its start ("none" for none). An ignored
// signal stays ignored across exec; a Go program keeps an inherited
// SIG_IGN of SIGHUP and SIGINT (the others it replaces with its own
// handler), so this sees those two, on every backend, gVisor's too.
func SignalsIgnored() string {
	var names []string
	for sig := syscall.Signal(1); sig <= 64; sig++ {
		if signal.Ignored(sig) {
			names = append(names, strconv.Itoa(int(sig)))
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, " ")
}

// sandboxed reports whether this process is the tool of a sandbox: PID 1
// of its pid namespace, or a child of toolgate's shim when the shim is PID
// 1 there (the egress init shim, a helper session's shim), which only a
// sandbox has.
func sandboxed() bool {
	return os.Getpid() == 1 || os.Getppid() == 1 && shimIsInit()
}

// shimIsInit reports whether PID 1 (of this process's pid namespace) is
// toolgate's shim, which only a sandbox has at /.toolgate/shim.
func shimIsInit() bool {
	cmd, _ := os.ReadFile("/proc/1/cmdline")
	return strings.HasPrefix(string(cmd), "/.toolgate/shim\x00")
}

func requireSandbox() {
	if !sandboxed() {
		fmt.Fprintf(os.Stderr, "probe: refusing: not the tool of a sandbox (pid %d): this probe would damage the host\n", os.Getpid())
		os.Exit(99)
	}
}

// fill writes up to mib MiB into a new file at p and reports how much went
// in and why it stopped.
func fill(p string, mib int) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		fmt.Printf("fill %s: 0 MiB: %s\n", p, result(err))
		return
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	var n int64
	for range mib {
		m, err := f.Write(chunk)
		n += int64(m)
		if err != nil {
			fmt.Printf("fill %s: %d bytes: %s\n", p, n, result(err))
			return
		}
	}
	fmt.Printf("fill %s: %d bytes: all %d MiB\n", p, n, mib)
}

// fds lists the process's open descriptors (less the one reading the
// list, and the Go runtime's own poller, an eventpoll and an eventfd: it
// opens them when a standard stream is non-blocking, as gVisor's can be)
// with what each is. Raw system calls only: an os.File would make the Go
// runtime open its poller descriptors here.
func fds() {
	dir, err := syscall.Open("/proc/self/fd", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	check(err)
	buf := make([]byte, 64<<10)
	var names []string
	for {
		n, err := syscall.ReadDirent(dir, buf)
		check(err)
		if n == 0 {
			break
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
	syscall.Close(dir)
	var nums []int
	for _, n := range names {
		i, err := strconv.Atoi(n)
		check(err)
		if i != dir {
			nums = append(nums, i)
		}
	}
	sort.Ints(nums)
	var list, poller []string
	var lines []string
	for _, i := range nums {
		target := make([]byte, 256)
		n, _ := syscall.Readlink("/proc/self/fd/"+strconv.Itoa(i), target)
		what := string(target[:max(n, 0)])
		if i > 2 && (what == "anon_inode:[eventpoll]" || what == "anon_inode:[eventfd]") {
			poller = append(poller, strconv.Itoa(i))
			continue
		}
		list = append(list, strconv.Itoa(i))
		lines = append(lines, fmt.Sprintf("fd %d: %s", i, what))
	}
	fmt.Printf("fds: %s\n", strings.Join(list, " "))
	for _, l := range lines {
		fmt.Println(l)
	}
	if len(poller) > 0 {
		fmt.Printf("the Go runtime's poller: %s\n", strings.Join(poller, " "))
	}
}

// forkbomb starts up to n sleeping children and reports how many started.
func forkbomb(n int) {
	started := 0
	var lastErr error
	for started < n {
		c := self("forkbomb-child")
		if err := c.Start(); err != nil {
			lastErr = err
			break
		}
		started++
	}
	fmt.Printf("forkbomb: started %d of %d: %s\n", started, n, result(lastErr))
}

// membomb allocates and touches mib MiB, reporting progress.
func membomb(mib int) {
	var keep [][]byte
	for i := 1; i <= mib; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		keep = append(keep, b)
		if i%64 == 0 {
			fmt.Printf("membomb: %d MiB\n", i)
			os.Stdout.Sync()
		}
	}
	runtime.KeepAlive(keep)
	fmt.Printf("membomb: all %d MiB allocated\n", mib)
}

// ptraceAll tries to attach to every visible process that is not this one.
func ptraceAll() {
	runtime.LockOSThread()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	attached := 0
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		if pid == os.Getpid() {
			continue
		}
		_, _, e := syscall.Syscall6(syscall.SYS_PTRACE, 0x4206 /* PTRACE_SEIZE */, uintptr(pid), 0, 0, 0, 0)
		if e == 0 {
			attached++
			fmt.Printf("ptrace %d: attached\n", pid)
			syscall.Syscall6(syscall.SYS_PTRACE, syscall.PTRACE_DETACH, uintptr(pid), 0, 0, 0, 0)
		}
		if f, err := os.Open(d + "/mem"); err == nil {
			attached++
			fmt.Printf("open %s/mem: ok\n", d)
			f.Close()
		}
	}
	fmt.Printf("ptrace: %d visible, %d attachable\n", len(dirs)-1, attached)
}

// accessWrite asks the kernel whether p (or, when p does not exist, its
// directory) could be written, without writing: a read-only mount answers
// EROFS.
func accessWrite(p string) error {
	const wOK = 2
	target := p
	if _, err := os.Lstat(p); err != nil {
		target = filepath.Dir(p)
	}
	return syscall.Faccessat(atFDCWD, target, wOK, atEACCESS)
}

const (
	atFDCWD   = -100
	atEACCESS = 0x200
)
