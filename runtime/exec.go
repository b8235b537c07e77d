package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/runtime/cgroup"
)

// DrainGrace is how long Exec waits for the output pipe to reach EOF after
// the direct child exited and the call's process tree was killed. A process
// that escaped every kill and still holds the pipe is cut off after it.
const DrainGrace = 200 * time.Millisecond

// stopEscalation is how long a Stop hook gets before Exec SIGKILLs the
// process group itself.
const stopEscalation = 2 * time.Second

// Cmd is one process to run with the call's limits. It is the common
// ground of every backend: the backend decides what to run (the tool, the
// reap shim, bwrap, runc), Exec owns how it runs.
type Cmd struct {
	// Proc is the process to start. Exec extends its SysProcAttr with
	// Setpgid, Pdeathsig and, when Group is set, the cgroup to start in.
	Proc
	// Call holds the call's limits, its input and its progress counter:
	// StderrMax, when set, keeps stderr apart from stdout, and MaxBytes
	// then caps stdout alone.
	Call
	// Stop, when set, asks the process tree to end early (timeout or
	// cancellation) instead of the default SIGKILL of the process group.
	// Exec still SIGKILLs the group if the direct child has not exited
	// stopEscalation later.
	Stop func(pid int)
	// Finish, when set, runs after the direct child has exited and before
	// the group is killed and the pipe drained: the OCI backend kills and
	// deletes its container there.
	Finish func()
}

// Exec runs c and returns its Result. The error return means it could not
// be started at all.
func Exec(ctx context.Context, c Cmd) (Result, error) {
	if c.Env == nil {
		return Result{}, errors.New("exec: nil environment would inherit the server's")
	}
	if c.MaxBytes <= 0 || c.Timeout <= 0 {
		return Result{}, fmt.Errorf("exec: limits not set (max-bytes %d, timeout %s)", c.MaxBytes, c.Timeout)
	}
	if err := ctx.Err(); err != nil {
		return Result{Limit: LimitCancelled, ExitCode: -1}, nil
	}
	p, err := newCallPipes(c.StderrMax > 0, c.Input != nil)
	if err != nil {
		return Result{}, fmt.Errorf("exec: %w", err)
	}
	start := time.Now()
	cmd, err := c.start(p.inR, p.outW, p.errW)
	p.closeChild()
	if err != nil {
		p.closeParent()
		return Result{}, err
	}
	pid := cmd.Process.Pid
	defer untrack(pid)
	exited := make(chan struct{})
	go func() {
		// Learn of the exit without reaping: while the zombie exists its
		// pid, and so its process group id, cannot be reused, and the
		// group kill below cannot hit an unrelated process.
		waitNoReap(pid)
		close(exited)
	}()
	return supervise(ctx, supervised{
		cmd: cmd, exited: exited, start: start,
		out: p.outR, errOut: p.errR, stdin: p.inW, input: c.Input,
		timeout: c.Timeout, maxBytes: c.MaxBytes, stderrMax: c.StderrMax, seen: c.Seen,
		group: c.Group, stop: c.Stop, finish: c.Finish,
	}), nil
}

// supervised is a started process and what its call needs: the read ends
// of its output, the write end of its stdin, the limits and the hooks.
// Exec fills it for a process it starts; Standby.Release for a sandbox
// started ahead of its call; a helper session (session.go) for one of its
// commands, with its own kill and end.
type supervised struct {
	cmd *exec.Cmd
	// exited is closed when the process has exited (still unreaped).
	exited <-chan struct{}
	// kill, when set, is what a timeout or a cancellation does without a
	// Stop hook, instead of a SIGKILL of cmd's group and cgroup; end,
	// when set, is what follows the exit, instead of that kill and the
	// reap of cmd: it returns the exit code.
	kill func()
	end  func() int
	// start is when the call began: the timeout and Elapsed count from
	// it.
	start time.Time
	// out and errOut are the read ends of stdout and stderr (the same
	// file when they are one stream); stdin, when set, receives input.
	out, errOut *os.File
	stdin       *os.File
	input       []byte
	timeout     time.Duration
	maxBytes    int
	stderrMax   int
	seen        *atomic.Int64
	group       *cgroup.Group
	stop        func(pid int)
	finish      func()
}

// supervise owns a started process until its call ends: the stdin write,
// the capped reads, the timeout and cancellation, the kill of everything
// it started once the direct child exited, the reap and the drain.
func supervise(ctx context.Context, sv supervised) Result {
	sv.defaults()
	r, errR := sv.out, sv.errOut
	defer r.Close()
	if errR != r {
		defer errR.Close()
	}
	if sv.stdin != nil {
		// The write ends with EPIPE once every reader is gone, so this
		// never outlives the call's processes.
		go func() {
			_, _ = sv.stdin.Write(sv.input)
			sv.stdin.Close()
		}()
	}

	out := newCapture(sv.maxBytes, sv.seen)
	var stderr *capture
	var readers sync.WaitGroup
	readers.Go(func() { out.readFrom(r) })
	if errR != r {
		stderr = newCapture(sv.stderrMax, nil)
		readers.Go(func() { stderr.readFrom(errR) })
	}
	readDone := make(chan struct{})
	go func() {
		readers.Wait()
		close(readDone)
	}()

	var res Result
	_, span := telemetry.Start(ctx, "process run", trace.WithTimestamp(sv.start))
	timer := time.NewTimer(sv.timeout - time.Since(sv.start))
	defer timer.Stop()
	var escalate <-chan time.Time
	stop := func(limit Limit) {
		if res.Limit != LimitNone {
			return
		}
		res.Limit = limit
		res.TimedOut = limit == LimitTimeout
		if sv.stop != nil {
			sv.stop(sv.cmd.Process.Pid)
			escalate = time.After(stopEscalation)
		} else {
			sv.kill()
		}
	}
	done := ctx.Done()
wait:
	for {
		select {
		case <-sv.exited:
			break wait
		case <-timer.C:
			stop(LimitTimeout)
		case <-done:
			done = nil
			stop(LimitCancelled)
		case <-escalate:
			escalate = nil
			sv.kill()
		}
	}
	if sv.finish != nil {
		sv.finish()
	}
	res.ExitCode = sv.end()
	endRunSpan(span, res)
	_, capture := telemetry.Start(ctx, "output capture")
	defer func() { endCaptureSpan(capture, res) }()

	select {
	case <-readDone:
	case <-time.After(DrainGrace):
		// Something outside the call's reach still holds a pipe: cut it
		// off. What was written before stays: the readers take what the
		// pipes hold (a loaded host may not have run them for a while),
		// then stop.
		_ = r.SetReadDeadline(time.Now())
		_ = errR.SetReadDeadline(time.Now())
		<-readDone
	}
	res.Elapsed = time.Since(sv.start)
	res.Output, res.OutputBytes, res.Dropped = out.result()
	res.Truncated = res.Dropped > 0
	if stderr != nil {
		res.Stderr, res.StderrBytes, _ = stderr.result()
	}
	if sv.group != nil {
		if l := cgroupLimit(sv.group.Exceeded()); l != LimitNone && res.Limit == LimitNone {
			res.Limit = l
		}
	}
	return res
}

// defaults sets the kill and the end of a process sv started itself,
// where the caller gave none.
func (sv *supervised) defaults() {
	if sv.kill == nil {
		pid := sv.cmd.Process.Pid
		sv.kill = func() { killGroup(pid, sv.group) }
	}
	if sv.end == nil {
		// The direct child has exited: nothing the call started may
		// outlive it. Kill the group (or the cgroup) while the zombie
		// still pins the pgid, then reap.
		sv.end = func() int {
			sv.kill()
			werr := sv.cmd.Wait()
			return exitCode(sv.cmd.ProcessState, werr)
		}
	}
}

// Proc is what every process toolgate starts is made of, whatever it
// serves: a call (Cmd), a service (ServiceCmd), a prepared sandbox
// (StandbyCmd) embed it. start is the one place where one becomes a
// process.
type Proc struct {
	// Path is the absolute executable; Args is the full argv.
	Path string
	Args []string
	// Env is the exact environment. It must not be nil: a nil Env would
	// make os/exec inherit the server's environment.
	Env []string
	// Dir is the working directory of the started process.
	Dir string
	// SysProcAttr is extended with a process group of its own, the
	// parent-death signal and, when Group is set, the cgroup to start in
	// (processAttr).
	SysProcAttr *syscall.SysProcAttr
	// ExtraFiles become fds 3 and up.
	ExtraFiles []*os.File
	// Group is the cgroup the process starts in (its cgroup2 part at
	// clone time), when the host offers one: everything it starts is in
	// it and is killed with it.
	Group *cgroup.Group
}

// start starts p with the given streams (a nil stdin is /dev/null) and
// extra as fds 3 and up: exactly p's environment, the attributes of
// processAttr, tracked for the PID 1 reaper. The caller closes the child's
// ends once it returns.
func (p Proc) start(stdin, stdout, stderr *os.File) (*exec.Cmd, error) {
	if p.Env == nil {
		return nil, errors.New("nil environment would inherit the server's")
	}
	cmd := &exec.Cmd{
		Path:       p.Path,
		Args:       p.Args,
		Env:        p.Env,
		Dir:        p.Dir,
		Stdout:     stdout,
		Stderr:     stderr,
		ExtraFiles: p.ExtraFiles,
	}
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.SysProcAttr = processAttr(p.SysProcAttr, p.Group)
	if err := startTracked(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.Path, err)
	}
	return cmd, nil
}

// processAttr is how every process toolgate starts begins: the given
// attributes, in a process group of its own, SIGKILLed when the server's
// thread that started it dies (unless asked otherwise), and in g's
// cgroup2 group when there is one.
func processAttr(base *syscall.SysProcAttr, g *cgroup.Group) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if base != nil {
		*attr = *base
	}
	attr.Setpgid = true
	attr.Pgid = 0
	if attr.Pdeathsig == 0 {
		attr.Pdeathsig = syscall.SIGKILL
	}
	if fd := g.FD(); fd >= 0 {
		attr.UseCgroupFD = true
		attr.CgroupFD = fd
	}
	return attr
}

// cgroupLimit is the Limit of a cgroup controller whose limit a call's
// group reached (cgroup.Group.Exceeded).
func cgroupLimit(controller string) Limit {
	switch controller {
	case cgroup.Memory:
		return LimitMemory
	case cgroup.Pids:
		return LimitPids
	}
	return LimitNone
}

// callPipes are the pipes of one call: stdout, stderr (the same pipe when
// they are one stream) and stdin (nil ends: /dev/null).
type callPipes struct {
	outR, outW, errR, errW, inR, inW *os.File
}

// newCallPipes makes the pipes of a call: one for stdout and stderr, or
// two when stderr is kept apart, and one for stdin when there is input.
func newCallPipes(splitStderr, stdin bool) (*callPipes, error) {
	p := &callPipes{}
	var err error
	if p.outR, p.outW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("output pipe: %w", err)
	}
	p.errR, p.errW = p.outR, p.outW
	if splitStderr {
		if p.errR, p.errW, err = os.Pipe(); err != nil {
			p.close()
			return nil, fmt.Errorf("stderr pipe: %w", err)
		}
	}
	if stdin {
		if p.inR, p.inW, err = os.Pipe(); err != nil {
			p.close()
			return nil, fmt.Errorf("stdin pipe: %w", err)
		}
	}
	return p, nil
}

// closeChild closes the ends the child holds (once it has them).
func (p *callPipes) closeChild() {
	for _, f := range []*os.File{p.outW, p.errW, p.inR} {
		if f != nil {
			f.Close()
		}
	}
}

// closeParent closes the server's ends.
func (p *callPipes) closeParent() {
	for _, f := range []*os.File{p.outR, p.errR, p.inW} {
		if f != nil {
			f.Close()
		}
	}
}

func (p *callPipes) close() {
	p.closeChild()
	p.closeParent()
}

// killGroup SIGKILLs the process group led by pid and, when set, every
// process of the call's cgroup.
func killGroup(pid int, g *cgroup.Group) {
	_ = unix.Kill(-pid, unix.SIGKILL)
	if g != nil {
		g.Kill()
	}
}

// waitNoReap blocks until pid has exited, leaving it a zombie.
func waitNoReap(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// exitCode maps a finished process to the footer's exit code: its status,
// or 128+N when signal N killed it.
func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if code := ps.ExitCode(); code >= 0 {
		return code
	}
	_ = err
	return -1
}

// capture keeps the first max bytes of a stream and counts the rest. It
// keeps reading after the cap so that the writer never blocks on a full
// pipe; memory stays bounded by max plus one read buffer.
type capture struct {
	mu    sync.Mutex
	max   int
	buf   []byte
	total int64
	seen  *atomic.Int64
}

func newCapture(max int, seen *atomic.Int64) *capture {
	return &capture{max: max, buf: make([]byte, 0, min(max, 4<<10)), seen: seen}
}

// readChunks are the read buffers of captures, reused across calls: a
// call that prints a line would otherwise allocate (and zero) 64 KiB.
var readChunks = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func (c *capture) readFrom(r *os.File) {
	chunk := readChunks.Get().(*[]byte)
	defer readChunks.Put(chunk)
	for {
		n, err := r.Read(*chunk)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Cut off (supervise's drain grace): what the pipe holds
			// was written before, and is the call's.
			c.takeBuffered(r, *chunk)
			return
		}
		full := false
		if n > 0 {
			full = c.add((*chunk)[:n])
		}
		if err != nil {
			return
		}
		if full {
			c.discard(r)
			return
		}
	}
}

// takeBuffered reads what pipe r holds now, without waiting (and at most
// drainPipeSize bytes: a writer that goes on is not followed), past its
// read deadline.
func (c *capture) takeBuffered(r *os.File, chunk []byte) {
	rc, err := r.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		for read := 0; read < drainPipeSize; {
			n, err := unix.Read(int(fd), chunk)
			if n <= 0 || err != nil {
				return
			}
			read += n
			c.add(chunk[:n])
		}
	})
}

// add keeps what of b fits under the cap and counts all of it; full
// reports that the cap is reached.
func (c *capture) add(b []byte) (full bool) {
	c.mu.Lock()
	c.total += int64(len(b))
	if room := c.max - len(c.buf); room > 0 {
		c.buf = append(c.buf, b[:min(len(b), room)]...)
	}
	full = len(c.buf) >= c.max
	c.mu.Unlock()
	if c.seen != nil {
		c.seen.Add(int64(len(b)))
	}
	return full
}

// discard counts and drops the rest of the stream once the cap is reached.
// It moves the pipe's pages to /dev/null with splice(2) instead of copying
// them through a buffer, from a pipe enlarged to 1 MiB: a tool flooding a
// gigabyte costs the server a fraction of the CPU. Where splice is refused
// it reads as before.
func (c *capture) discard(r *os.File) {
	count := func(n int) {
		c.mu.Lock()
		c.total += int64(n)
		c.mu.Unlock()
		if c.seen != nil {
			c.seen.Add(int64(n))
		}
	}
	rc, err := r.SyscallConn()
	if err == nil && devNull() >= 0 {
		// A larger pipe wakes the drain 16 times less often. Best effort:
		// the kernel caps it (fs.pipe-max-size, the per-user pipe quota).
		_ = rc.Control(func(fd uintptr) {
			_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, drainPipeSize)
		})
		fallback := false
		err = rc.Read(func(fd uintptr) bool {
			for {
				n, err := unix.Splice(int(fd), nil, devNull(), nil, 1<<20, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				if n > 0 {
					count(int(n))
					continue
				}
				switch {
				case errors.Is(err, unix.EINTR):
					continue
				case errors.Is(err, unix.EAGAIN):
					return false // wait until the pipe is readable
				case err != nil:
					fallback = true
				}
				return true // EOF, or splice refused
			}
		})
		if err != nil || !fallback {
			return
		}
	}
	chunk := readChunks.Get().(*[]byte)
	defer readChunks.Put(chunk)
	for {
		n, err := r.Read(*chunk)
		if n > 0 {
			count(n)
		}
		if err != nil {
			return
		}
	}
}

// drainPipeSize is the pipe capacity asked for while discarding.
const drainPipeSize = 1 << 20

// devNull is a write descriptor of /dev/null shared by every discard, or
// -1 when it cannot be opened.
var devNull = sync.OnceValue(func() int {
	fd, err := unix.Open(os.DevNull, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
})

func (c *capture) result() (out []byte, total, dropped int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf, c.total, c.total - int64(len(c.buf))
}

// endRunSpan ends the span of a process's run (its start to its exit:
// for a sandbox made on the call's path, bwrap's or the OCI runtime's own
// setup is in it) with its exit code, failed with the limit that ended
// it.
func endRunSpan(span trace.Span, res Result) {
	if span.IsRecording() {
		span.SetAttributes(semconv.ProcessExitCode(res.ExitCode))
		if res.Limit != LimitNone {
			telemetry.Fail(span, string(res.Limit), "ended by its "+string(res.Limit))
		}
	}
	span.End()
}

// endCaptureSpan ends the span of the output's capture after the exit
// (the group killed, the process reaped, the pipes drained): the bytes
// written, kept or dropped, and whether the cap cut them.
func endCaptureSpan(span trace.Span, res Result) {
	if span.IsRecording() {
		span.SetAttributes(
			attribute.Int64("toolgate.output.bytes", res.OutputBytes),
			attribute.Int64("toolgate.output.dropped", res.Dropped),
			attribute.Bool("toolgate.output.truncated", res.Truncated),
		)
	}
	span.End()
}
