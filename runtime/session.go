package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/runtime/shim"
)

// Session runs a built-in's helper commands (git's rev-parse, then its
// diff) over the workspace, one after another, each with its own argv,
// streams and limits, as one call of the built-in needs them. It is made
// for a Template with Session set (OpenSession): every command is the
// template's Argv (its fixed prefix) and further words, the first of them
// one of its Verbs. A Session is used by one goroutine at a time and
// closed once (Close, off the call's path).
type Session interface {
	// Run runs argv, a command of the session's shape, and returns its
	// Result; the error says it could not run (the argv's shape, a
	// sandbox that ended). A command that failed is a Result.
	Run(ctx context.Context, argv []string, c Call) (Result, error)
	// Close ends the session; what it holds is given back off the
	// caller's path.
	Close()
}

// SessionOpener is a backend (or a pool of one) that can open a helper
// session in one sandbox of its own.
type SessionOpener interface {
	OpenSession(ctx context.Context, t Template) (Session, error)
}

// OpenSession opens a session for t with r: one sandbox for all of its
// commands when r opens sessions (the bwrap backend, its pool, a Sandbox
// of them), else a sandbox of its own for each command, made by r.Run
// (the OCI backends). Either way every command runs sandboxed.
func OpenSession(ctx context.Context, r Runner, t Template) (Session, error) {
	if err := t.sessionShape(); err != nil {
		return nil, err
	}
	if o, ok := r.(SessionOpener); ok {
		return o.OpenSession(ctx, t)
	}
	return &runEach{r: r, t: t}, nil
}

// sessionShape says why t cannot be a session's template.
func (t Template) sessionShape() error {
	if !t.Session {
		return fmt.Errorf("session %s: the template is not a session's", t.Name)
	}
	if len(t.Argv) == 0 || t.Path == "" {
		return fmt.Errorf("session %s: no helper", t.Name)
	}
	return nil
}

// sessionRuns numbers the commands of the sessions that run each in a
// sandbox of its own, for their invocations' ids.
var sessionRuns atomic.Uint64

// runEach is the session of a backend that cannot keep one sandbox for a
// session's commands: each runs in a sandbox of its own.
type runEach struct {
	r Runner
	t Template
}

func (s *runEach) Run(ctx context.Context, argv []string, c Call) (Result, error) {
	if err := shim.CheckCommand(s.t.Argv, s.t.Verbs, argv); err != nil {
		return Result{}, fmt.Errorf("session %s: %w", s.t.Name, err)
	}
	t := s.t
	t.Argv, t.Session, t.Verbs = argv, false, nil
	t.SplitStderr, t.Stdin = c.StderrMax > 0, c.Input != nil
	return s.r.Run(ctx, Invocation{ID: s.t.Name + "-s" + strconv.FormatUint(sessionRuns.Add(1), 10), Template: t, Call: c})
}

func (s *runEach) Close() {}

// ErrSessionEnded is what a session's Run returns once its sandbox can run
// nothing more: a command timed out, was cancelled or reached a limit of
// the sandbox, the sandbox ended, or the session was closed.
var ErrSessionEnded = errors.New("the helper session's sandbox has ended")

// sandboxSession is a session in one prepared sandbox, whose session shim
// (runtime/shim, session.go) runs each command it is sent on the release
// channel and answers its status.
type sandboxSession struct {
	sb    *Standby
	t     Template
	after func(func()) // runs the teardown off the caller's path
	mu    sync.Mutex
	ended bool
}

// Session claims the prepared sandbox s, made for the session template t,
// for a session. after runs the session's teardown once it is closed
// (nil: a goroutine of its own). The error is ErrStandbyStale or
// ErrStandbyUsed when it cannot serve.
func (s *Standby) Session(t Template, after func(func())) (Session, error) {
	if err := t.sessionShape(); err != nil {
		return nil, err
	}
	if !s.take() {
		return nil, ErrStandbyUsed
	}
	if err := s.Stale(); err != nil {
		go s.kill() // off the call's path; Cleanup waits for it
		return nil, err
	}
	if after == nil {
		after = func(f func()) { go f() }
	}
	return &sandboxSession{sb: s, t: t, after: after}, nil
}

func (s *sandboxSession) Run(ctx context.Context, argv []string, c Call) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return Result{}, fmt.Errorf("session %s: %w", s.t.Name, ErrSessionEnded)
	}
	if err := shim.CheckCommand(s.t.Argv, s.t.Verbs, argv); err != nil {
		return Result{}, fmt.Errorf("session %s: %w", s.t.Name, err)
	}
	if c.MaxBytes <= 0 || c.Timeout <= 0 {
		return Result{}, fmt.Errorf("session %s: limits not set (max-bytes %d, timeout %s)", s.t.Name, c.MaxBytes, c.Timeout)
	}
	if err := ctx.Err(); err != nil {
		return Result{Limit: LimitCancelled, ExitCode: -1}, nil
	}
	p, err := newCallPipes(c.StderrMax > 0, c.Input != nil)
	if err != nil {
		return Result{}, fmt.Errorf("session %s: %w", s.t.Name, err)
	}
	in := p.inR
	if in == nil {
		if in, err = os.Open(os.DevNull); err != nil {
			p.close()
			return Result{}, fmt.Errorf("session %s: %w", s.t.Name, err)
		}
		defer in.Close()
	}
	start := time.Now()
	err = sendCommand(s.sb.ctl, argv, []*os.File{in, p.outW, p.errW})
	p.closeChild()
	if err != nil {
		p.closeParent()
		s.ended = true
		return Result{}, fmt.Errorf("session %s: %w: %w", s.t.Name, ErrSessionEnded, err)
	}
	res, ended := s.sb.superviseAnswered(ctx, supervised{
		start: start, out: p.outR, errOut: p.errR, stdin: p.inW, input: c.Input,
		timeout: c.Timeout, maxBytes: c.MaxBytes, stderrMax: c.StderrMax, seen: c.Seen,
	})
	// Nothing more runs in a sandbox that ended or reached a limit.
	s.ended = ended
	return res, nil
}

// superviseAnswered supervises a command that the shim of s runs and
// answers (a session's command, or the tool of an answering prepared
// sandbox): it has ended when its status comes back on the release
// channel, or when the sandbox ends first. A timeout or a cancellation
// kills the whole sandbox. The shim has ended everything the command
// left before it answered. ended reports that the sandbox can run
// nothing more: it ended, or the command reached a limit.
func (s *Standby) superviseAnswered(ctx context.Context, sv supervised) (res Result, ended bool) {
	status := make(chan int, 1)
	go func() {
		code, ok := readStatus(s.ctl)
		if !ok {
			code = -1
		}
		status <- code
	}()
	exited := make(chan struct{})
	code, killed := -1, false
	go func() {
		select {
		case code = <-status:
		case <-s.exited:
			// The channel ends with the sandbox: a status sent before
			// that is still there to read.
			select {
			case code = <-status:
			case <-time.After(100 * time.Millisecond):
			}
		}
		close(exited)
	}()
	sv.exited, sv.group = exited, s.group
	sv.kill = func() {
		killed = true
		killGroup(s.pid, s.group)
	}
	sv.end = func() int {
		if code < 0 && killed {
			return 128 + 9
		}
		return code
	}
	res = supervise(ctx, sv)
	return res, code < 0 || res.Limit != LimitNone || s.group.Exceeded() != ""
}

func (s *sandboxSession) Close() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	s.after(func() {
		s.sb.kill()
		s.sb.Cleanup()
	})
}

// openPrepared opens a session for t in a sandbox prepared for it: the
// backend's Prepare, on the caller's path, waited for within ctx.
func openPrepared(ctx context.Context, p Preparer, t Template, after func(func())) (Session, error) {
	if err := t.sessionShape(); err != nil {
		return nil, err
	}
	sb, err := p.Prepare(t)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, prepareTimeout)
	err = sb.WaitReady(ctx)
	cancel()
	if err == nil {
		var sess Session
		if sess, err = sb.Session(t, after); err == nil {
			return sess, nil
		}
	}
	go func() {
		sb.Discard()
		sb.Cleanup()
	}()
	return nil, fmt.Errorf("session %s: %w", t.Name, err)
}

// OpenPrepared is OpenSession for a backend that prepares sandboxes
// (Preparer): its sandbox made on the caller's path, a session in it.
func OpenPrepared(ctx context.Context, p Preparer, t Template) (Session, error) {
	return openPrepared(ctx, p, t, nil)
}
