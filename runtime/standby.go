package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/runtime/cgroup"
)

// StandbyCmd is how a backend starts a prepared sandbox: the common ground
// of the backends' Prepare, as Cmd is for Exec. The process it starts is
// the whole sandbox up to the last step (namespaces, mounts, limits,
// cgroups), ending in a shim that waits on the release channel
// (release.go); the channel's sandbox end becomes descriptor
// ReleaseFD(len(ExtraFiles)) of the process.
type StandbyCmd struct {
	// Proc is the process to start, extended as Exec extends a call's;
	// its ExtraFiles become fds 3 and up, then the release channel. The
	// Standby owns its Group.
	Proc
	// Streams says how the call's stdout, stderr and stdin reach the
	// sandbox.
	Streams StreamsAt
	// SplitStderr and Stdin shape the streams made at preparation
	// (StreamsAtPrepare): a separate stderr pipe, a stdin pipe.
	SplitStderr, Stdin bool
	// Stop, when set, asks the sandbox to end early (timeout,
	// cancellation) instead of a SIGKILL of its process group, as Cmd.Stop.
	Stop func(pid int)
	// Finish runs after the direct child exited, before the call's
	// result, as Cmd.Finish.
	Finish func()
	// Cleanup runs once the sandbox is done with, used or discarded, off
	// the call's path: removing the cgroup, deleting a container.
	Cleanup func()
	// IDs are the sandbox's host ids: given back after Cleanup, or by
	// the Process of a released service when it is done.
	IDs SandboxID
	// Answers says that the sandbox's shim answers the call's exit
	// status on the release channel and waits for the channel's close
	// (shim.Spec.Answer): the call ends at the answer, and the sandbox
	// itself ends at Cleanup.
	Answers bool
	// Fixed are host paths the sandbox bound when it was prepared (the
	// tool's dir, its executable): a release checks each is still the
	// same file, and a sandbox whose paths changed is stale.
	Fixed []string
}

// StreamsAt says when the call's streams reach a prepared sandbox.
type StreamsAt int

const (
	// StreamsAtRelease: the sandbox starts with stdin /dev/null and
	// stdout and stderr on a diagnostics pipe; the release passes it the
	// call's own pipes (the bwrap backend's standby shim takes them).
	StreamsAtRelease StreamsAt = iota
	// StreamsAtPrepare: the call's pipes are made when the sandbox is
	// prepared and are its stdio from the start (an OCI runtime's create
	// fixes the container's stdio); a release checks that nothing was
	// written to them before it.
	StreamsAtPrepare
)

// discardGrace is how long a discarded sandbox gets to end on its own.
const discardGrace = time.Second

// settleBeforeKill bounds the wait for a sandbox's setup to finish before
// it is killed unused (a create takes milliseconds; one stuck longer is
// killed anyway).
const settleBeforeKill = 10 * time.Second

// ReleaseFD is the descriptor number of the release channel in a process
// started with extra ExtraFiles.
func ReleaseFD(extra int) int { return 3 + extra }

// Standby is a sandbox prepared ahead of its call: started, fully set up,
// its shim waiting on the release channel with no tool code running. It is
// used once (Release) or discarded (Discard), never both, never twice.
type Standby struct {
	cmd     *exec.Cmd
	pid     int
	ctl     *os.File
	group   *cgroup.Group
	streams StreamsAt
	pipes   *callPipes // StreamsAtPrepare
	split   bool
	stdin   bool
	diag    *capture // StreamsAtRelease: what the sandbox wrote before release
	// diagDone is closed when diag has read its pipe to the end.
	diagDone chan struct{}
	stop     func(pid int)
	finish   func()
	cleanup  func()
	ids      SandboxID
	fixed    []fixedFile
	born     time.Time
	answers  bool
	// answered is set once a release's status has been waited for: the
	// sandbox still runs (its shim waits for the channel's close) until
	// Cleanup.
	answered bool
	// ns holds the sandbox's mount namespace from its ready message
	// until Cleanup (release.go says why).
	ns *os.File

	exited   chan struct{}
	ready    chan struct{}
	notReady chan struct{} // closed when it ended before it was ready
	claim    sync.Once
	claimed  bool
	clean    sync.Once
}

// fixedFile is a path and the file it named at preparation.
type fixedFile struct {
	path     string
	dev, ino uint64
}

// Errors a release can end with before the call runs: the caller (the
// pool) discards the sandbox and prepares another.
var (
	// ErrStandbyStale: the sandbox can no longer serve its call (it ended,
	// a path it bound changed, something was written to its streams).
	ErrStandbyStale = errors.New("prepared sandbox is stale")
	// ErrStandbyUsed: the sandbox was released or discarded already.
	ErrStandbyUsed = errors.New("prepared sandbox already used")
)

// StartStandby starts c and returns the Standby, not yet ready (Ready,
// WaitReady). On error nothing of it is left running.
func StartStandby(c StandbyCmd) (*Standby, error) {
	if c.Env == nil {
		return nil, errors.New("standby: nil environment would inherit the server's")
	}
	s := &Standby{
		group: c.Group, streams: c.Streams, split: c.SplitStderr, stdin: c.Stdin,
		stop: c.Stop, finish: c.Finish, cleanup: c.Cleanup, ids: c.IDs, born: time.Now(), answers: c.Answers,
		exited: make(chan struct{}), ready: make(chan struct{}), notReady: make(chan struct{}),
	}
	for _, p := range c.Fixed {
		f, err := identify(p)
		if err != nil {
			return nil, fmt.Errorf("standby: %w", err)
		}
		s.fixed = append(s.fixed, f)
	}
	ctl, peer, err := releasePair()
	if err != nil {
		return nil, err
	}
	var stdin, stdout, stderr *os.File
	var childEnds []*os.File
	var diagR *os.File
	switch c.Streams {
	case StreamsAtPrepare:
		p, err := newCallPipes(c.SplitStderr, c.Stdin)
		if err != nil {
			ctl.Close()
			peer.Close()
			return nil, fmt.Errorf("standby: %w", err)
		}
		s.pipes = p
		stdin, stdout, stderr = p.inR, p.outW, p.errW
	default:
		r, w, err := os.Pipe()
		if err != nil {
			ctl.Close()
			peer.Close()
			return nil, fmt.Errorf("standby: diagnostics pipe: %w", err)
		}
		diagR = r
		stdout, stderr = w, w
		childEnds = append(childEnds, w)
	}
	extra := append(append([]*os.File(nil), c.ExtraFiles...), peer)
	pr := c.Proc
	pr.ExtraFiles = extra
	cmd, err := pr.start(stdin, stdout, stderr)
	peer.Close()
	for _, f := range childEnds {
		f.Close()
	}
	if s.pipes != nil {
		s.pipes.closeChild()
	}
	if err != nil {
		ctl.Close()
		if diagR != nil {
			diagR.Close()
		}
		if s.pipes != nil {
			s.pipes.closeParent()
		}
		return nil, err
	}
	s.cmd, s.pid, s.ctl = cmd, cmd.Process.Pid, ctl
	if diagR != nil {
		s.diag, s.diagDone = newCapture(4<<10, nil), make(chan struct{})
		go func() {
			defer close(s.diagDone)
			s.diag.readFrom(diagR)
			diagR.Close()
		}()
	}
	go watchExit(s.pid, s.exited)
	go s.awaitReady()
	return s, nil
}

// identify returns the file p names now.
func identify(p string) (fixedFile, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return fixedFile{}, fmt.Errorf("stat %s: %w", p, err)
	}
	return fixedFile{path: p, dev: st.Dev, ino: st.Ino}, nil
}

// awaitReady reads the sandbox's ready message.
func (s *Standby) awaitReady() {
	ok, ns := readReady(s.ctl)
	if ok {
		s.ns = ns
		close(s.ready)
		return
	}
	close(s.notReady)
}

// Pid is the pid of the sandbox's direct child (the enter shim or bwrap,
// the hold shim).
func (s *Standby) Pid() int { return s.pid }

// Born is when the sandbox was started.
func (s *Standby) Born() time.Time { return s.born }

// Ready is closed once the sandbox waits for its release.
func (s *Standby) Ready() <-chan struct{} { return s.ready }

// IsReady reports whether the sandbox waits for its release now: it said
// it was ready and has not ended since.
func (s *Standby) IsReady() bool {
	select {
	case <-s.exited:
		return false
	default:
	}
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// WaitReady waits until the sandbox is ready, has ended, or ctx is done.
func (s *Standby) WaitReady(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-s.notReady:
		return fmt.Errorf("%w: it ended while it was prepared%s", ErrStandbyStale, s.said())
	case <-ctx.Done():
		return fmt.Errorf("prepared sandbox not ready: %w", context.Cause(ctx))
	}
}

// said is what the sandbox wrote before its release, for an error.
func (s *Standby) said() string {
	var b []byte
	switch {
	case s.diag != nil:
		// A sandbox that ended has said all it will once its pipe is
		// read to the end (bounded: something else may hold the pipe).
		select {
		case <-s.diagDone:
		case <-time.After(200 * time.Millisecond):
		}
		b, _, _ = s.diag.result()
	case s.pipes != nil:
		// The call's own pipes, made at preparation: what is there now,
		// without waiting.
		for _, f := range []*os.File{s.pipes.outR, s.pipes.errR} {
			if n, err := pending(f); err == nil && n > 0 {
				buf := make([]byte, min(n, 4<<10))
				_ = f.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
				k, _ := f.Read(buf)
				b = append(b, buf[:k]...)
			}
			if s.pipes.errR == s.pipes.outR {
				break
			}
		}
	}
	if t := strings.TrimSpace(string(b)); t != "" {
		return ": " + t
	}
	return ""
}

// Stale says why the sandbox cannot serve its call now (nil: it can): it
// is not ready or has ended, or a path it bound names another file.
func (s *Standby) Stale() error {
	if !s.IsReady() {
		return fmt.Errorf("%w: not waiting%s", ErrStandbyStale, s.said())
	}
	for _, f := range s.fixed {
		now, err := identify(f.path)
		if err != nil || now.dev != f.dev || now.ino != f.ino {
			return fmt.Errorf("%w: %s changed since it was prepared", ErrStandbyStale, f.path)
		}
	}
	return nil
}

// take claims the sandbox for one use.
func (s *Standby) take() bool {
	ok := false
	s.claim.Do(func() { ok, s.claimed = true, true })
	return ok
}

// Release runs the call in the sandbox: it hands over the call's streams
// (or checks the ones made at preparation are untouched), lets the shim go
// and supervises the sandbox as Exec does a process it started; the
// timeout and Elapsed count from here. The error is ErrStandbyStale or
// ErrStandbyUsed when the call did not run (the sandbox is then killed, off
// the call's path), or another error when it could not start; a call that
// ran is a Result.
// The caller runs Cleanup afterwards, off the call's path.
func (s *Standby) Release(ctx context.Context, c Call) (Result, error) {
	return s.releaseWith(ctx, c, nil)
}

// IDs are the sandbox's host ids.
func (s *Standby) IDs() SandboxID { return s.ids }

// releaseWith is Release with, for a sandbox prepared for a proxied
// template, the call's egress proxy: its socket goes with the streams, as
// a fourth descriptor (opened O_PATH: the sandbox's shim connects to it
// through /proc/self/fd, and can do nothing else with it).
func (s *Standby) releaseWith(ctx context.Context, c Call, eg *Egress) (Result, error) {
	if c.MaxBytes <= 0 || c.Timeout <= 0 {
		// Taken from the pool all the same: it is ended, never left
		// waiting with nobody to end it.
		if s.take() {
			go s.kill() // off the call's path; Cleanup waits for it
		}
		return Result{}, fmt.Errorf("release: limits not set (max-bytes %d, timeout %s)", c.MaxBytes, c.Timeout)
	}
	if !s.take() {
		return Result{}, ErrStandbyUsed
	}
	sv, streams, err := s.releaseStreams(ctx, c, eg)
	if err != nil || sv == nil {
		go s.kill() // off the call's path; Cleanup waits for it
		if sv == nil && err == nil {
			return Result{Limit: LimitCancelled, ExitCode: -1}, nil
		}
		return Result{}, err
	}
	sv.start = time.Now()
	err = sendRelease(s.ctl, streams.send)
	streams.closeSent()
	if !s.answers {
		s.ctl.Close()
	}
	if err != nil {
		sv.closeStreams()
		go s.kill() // off the call's path; Cleanup waits for it
		return Result{}, fmt.Errorf("%w: %w", ErrStandbyStale, err)
	}
	if s.answers {
		// The call ends at the answer; the sandbox at Cleanup, off the
		// call's path.
		res, _ := s.superviseAnswered(ctx, *sv)
		s.answered = true
		return res, nil
	}
	res := supervise(ctx, *sv)
	untrack(s.pid)
	return res, nil
}

// sentStreams are what a release sends (send) and the server's copies of
// them to close once sent (closeAfter).
type sentStreams struct {
	send, closeAfter []*os.File
}

func (st sentStreams) closeSent() {
	for _, f := range st.closeAfter {
		if f != nil {
			f.Close()
		}
	}
}

// releaseStreams checks that s can serve the call c now and returns its
// supervision, without a start yet, and the streams its release sends:
// new pipes (the call's, and eg's socket when it has an egress proxy), or
// those made at preparation, unwritten. A nil supervision without an
// error is a call cancelled before its release; either way the caller
// kills the sandbox.
func (s *Standby) releaseStreams(ctx context.Context, c Call, eg *Egress) (*supervised, sentStreams, error) {
	var st sentStreams
	if err := s.Stale(); err != nil {
		return nil, st, err
	}
	if s.pipes != nil && (s.split != (c.StderrMax > 0) || s.stdin != (c.Input != nil)) {
		return nil, st, fmt.Errorf("release: the call's streams (split stderr %v, stdin %v) are not those the sandbox was prepared with (%v, %v)",
			c.StderrMax > 0, c.Input != nil, s.split, s.stdin)
	}
	if ctx.Err() != nil {
		return nil, st, nil
	}
	sv := &supervised{
		cmd: s.cmd, exited: s.exited, input: c.Input,
		timeout: c.Timeout, maxBytes: c.MaxBytes, stderrMax: c.StderrMax, seen: c.Seen,
		group: s.group, stop: s.stop, finish: s.finish,
	}
	if s.pipes != nil {
		for _, f := range []*os.File{s.pipes.outR, s.pipes.errR} {
			if n, err := pending(f); err != nil || n != 0 {
				return nil, st, fmt.Errorf("%w: %d bytes were written to its streams before its release", ErrStandbyStale, n)
			}
		}
		sv.out, sv.errOut, sv.stdin = s.pipes.outR, s.pipes.errR, s.pipes.inW
		return sv, st, nil
	}
	p, err := newCallPipes(c.StderrMax > 0, c.Input != nil)
	if err != nil {
		return nil, st, fmt.Errorf("release: %w", err)
	}
	st.closeAfter = []*os.File{p.outW, p.inR}
	if p.errW != p.outW {
		st.closeAfter = append(st.closeAfter, p.errW)
	}
	in := p.inR
	if in == nil {
		in, err = os.Open(os.DevNull)
		st.closeAfter = append(st.closeAfter, in)
	}
	st.send = []*os.File{in, p.outW, p.errW}
	if err == nil && eg != nil {
		var sock *os.File
		sock, err = eg.open()
		st.send = append(st.send, sock)
		st.closeAfter = append(st.closeAfter, sock)
	}
	if err != nil {
		st.closeSent()
		p.closeParent()
		return nil, st, fmt.Errorf("release: %w", err)
	}
	sv.out, sv.errOut, sv.stdin = p.outR, p.errR, p.inW
	return sv, st, nil
}

// closeStreams closes the server's ends of a supervision that did not
// start.
func (sv *supervised) closeStreams() {
	sv.out.Close()
	if sv.errOut != sv.out {
		sv.errOut.Close()
	}
	if sv.stdin != nil {
		sv.stdin.Close()
	}
}

// Discard ends an unused sandbox: its shim sees the release channel close
// and exits without running anything, and everything it holds is killed
// and reaped. Cleanup still follows. A used sandbox is left alone.
func (s *Standby) Discard() {
	if s.take() {
		s.kill()
	}
}

// kill ends the sandbox without running its call. A sandbox still being
// set up is left to finish first (bounded by settleBeforeKill): killing an
// OCI runtime's create half way leaves state that its delete cannot be
// trusted with.
func (s *Standby) kill() {
	select {
	case <-s.ready:
	case <-s.notReady:
	case <-time.After(settleBeforeKill):
	}
	// The shim sees its release channel close and exits without running
	// anything (a bwrap sandbox's init then exits through bwrap, which
	// reaps it; the hold shim kills and reaps the container's init): no
	// process is left for the host's init to reap. What does not end
	// within discardGrace is killed.
	s.ctl.Close()
	if s.pipes != nil {
		s.pipes.closeParent()
	}
	select {
	case <-s.exited:
	case <-time.After(discardGrace):
		if s.stop != nil {
			s.stop(s.pid)
		}
	}
	killGroup(s.pid, s.group)
	select {
	case <-s.exited:
	case <-time.After(stopEscalation):
		killGroup(s.pid, s.group)
		<-s.exited
	}
	if s.finish != nil {
		s.finish()
	}
	killGroup(s.pid, s.group)
	_ = s.cmd.Wait()
	untrack(s.pid)
}

// Cleanup releases what the sandbox holds on the host once it is done
// with (its cgroup, a container's state), after Release or Discard. It is
// safe to call more than once.
func (s *Standby) Cleanup() {
	s.clean.Do(func() {
		if s.answered {
			// Its shim waits for the channel's close, and exits at it.
			s.kill()
		}
		<-s.exited
		select {
		case <-s.ready:
			if s.ns != nil {
				s.ns.Close()
			}
		default:
		}
		if s.cleanup != nil {
			s.cleanup()
		}
		if s.group != nil {
			_ = s.group.Close()
		}
		s.ids.Release()
	})
}

// pending returns the bytes waiting in pipe f. (Through SyscallConn: Fd
// would put f in blocking mode, and a blocked read is not ended by Close.)
func pending(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		// TIOCINQ is FIONREAD.
		n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ)
	}); err != nil {
		return 0, err
	}
	return n, ierr
}

// watchExit closes exited when pid has exited, leaving it unreaped. It
// waits on a pidfd through the runtime's poller, so that an idle prepared
// sandbox holds no thread; without pidfds it blocks a thread in waitid.
func watchExit(pid int, exited chan<- struct{}) {
	defer close(exited)
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		waitNoReap(pid)
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		waitNoReap(pid)
		return
	}
	err = rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
		if err != nil {
			return !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN)
		}
		// WNOHANG with no exit yet leaves the pid zero.
		return info.Signo != 0
	})
	if err != nil {
		waitNoReap(pid)
	}
}

// ReleaseService starts the service the sandbox was prepared for: it hands
// over new pipes for its stdin, stdout and stderr and returns the running
// Process, which owns the sandbox from then on (as StartProcess's does).
// The error is ErrStandbyStale or ErrStandbyUsed when it did not start.
func (s *Standby) ReleaseService(stderr func(line string)) (*Process, error) {
	if !s.take() {
		return nil, ErrStandbyUsed
	}
	if err := s.Stale(); err != nil {
		s.kill()
		return nil, err
	}
	if s.pipes != nil {
		s.kill()
		return nil, errors.New("release service: a service's streams are passed at release")
	}
	var opened []*os.File
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			opened = append(opened, r, w)
		}
		return r, w, err
	}
	fail := func(err error) (*Process, error) {
		for _, f := range opened {
			f.Close()
		}
		s.kill()
		return nil, fmt.Errorf("release service: %w", err)
	}
	inR, inW, err := pipe()
	if err != nil {
		return fail(err)
	}
	outR, outW, err := pipe()
	if err != nil {
		return fail(err)
	}
	errR, errW, err := pipe()
	if err != nil {
		return fail(err)
	}
	err = sendRelease(s.ctl, []*os.File{inR, outW, errW})
	s.ctl.Close()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		s.kill()
		return nil, fmt.Errorf("%w: %w", ErrStandbyStale, err)
	}
	p := &Process{
		stdin:  inW,
		stdout: outR,
		pid:    s.pid,
		group:  s.group,
		ids:    s.ids,
		stop:   s.stop,
		cmd:    s.cmd,
		done:   make(chan struct{}),
	}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		forwardLines(errR, stderr)
	}()
	go p.watch(errR, stderrDone)
	return p, nil
}
