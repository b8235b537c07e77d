package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ErrSandboxUnavailable wraps every reason a sandboxed run could not
// happen because the sandbox backend is not there: its setup failed, or it
// had not finished within the call's time. Nothing is ever run unsandboxed
// instead.
var ErrSandboxUnavailable = errors.New("sandbox backend unavailable")

// Sandbox is the sandbox backend of a server, set up beside serving: the
// backend's self-test (a trivial sandbox with the full policy, or a probe
// container) takes milliseconds on an idle host and seconds on a loaded
// one, and a client that gives a server a second to answer initialize must
// not wait for it. Until the setup has finished, a sandboxed run waits for
// it within the run's own timeout; when the setup failed, it answers the
// reason. A Sandbox is safe for concurrent use.
type Sandbox struct {
	name   string
	ready  chan struct{}
	once   sync.Once
	cancel context.CancelFunc
	r      Runner
	err    error

	keepMu sync.Mutex
	keep   []Template
	kept   bool
}

// NewSandbox runs setup in the background and returns at once. setup must
// return a nil Runner with an error, or a Runner with none; its context is
// cancelled by Close.
func NewSandbox(name string, setup func(context.Context) (Runner, error)) *Sandbox {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sandbox{name: name, ready: make(chan struct{}), cancel: cancel}
	go func() {
		r, err := setup(ctx)
		s.finish(r, err)
	}()
	return s
}

// ReadySandbox is a Sandbox whose backend is r, already set up.
func ReadySandbox(name string, r Runner) *Sandbox {
	s := &Sandbox{name: name, ready: make(chan struct{})}
	s.finish(r, nil)
	return s
}

// FailedSandbox is a Sandbox whose setup failed with err.
func FailedSandbox(name string, err error) *Sandbox {
	s := &Sandbox{name: name, ready: make(chan struct{})}
	s.finish(nil, err)
	return s
}

func (s *Sandbox) finish(r Runner, err error) {
	s.once.Do(func() {
		if r == nil && err == nil {
			err = errors.New("set up returned no backend")
		}
		if err != nil {
			r = nil
		}
		s.r, s.err = r, err
		close(s.ready)
		s.applyKeep()
	})
}

// Keep tells the backend's pool, when it has one (a *Pool), which
// templates to keep sandboxes prepared for; before the setup has finished
// it is remembered and applied then.
func (s *Sandbox) Keep(ts []Template) {
	s.keepMu.Lock()
	s.keep, s.kept = slices.Clone(ts), true
	s.keepMu.Unlock()
	select {
	case <-s.ready:
		s.applyKeep()
	default:
	}
}

func (s *Sandbox) applyKeep() {
	s.keepMu.Lock()
	defer s.keepMu.Unlock()
	if p, ok := s.r.(*Pool); ok && s.kept {
		p.Keep(s.keep)
	}
}

// Pool reports the backend's pool of prepared sandboxes; false when the
// backend has none (--sandbox-pool 0, or its setup has not finished or
// failed).
func (s *Sandbox) Pool() (PoolStatus, bool) {
	select {
	case <-s.ready:
	default:
		return PoolStatus{}, false
	}
	if p, ok := s.r.(*Pool); ok {
		return p.Status(), true
	}
	return PoolStatus{}, false
}

// Name is the backend's name as the operator chose it: bwrap or oci.
func (s *Sandbox) Name() string { return s.name }

// SandboxState is where a Sandbox's setup stands.
type SandboxState string

// The states of a Sandbox.
const (
	SandboxPending     SandboxState = "pending"
	SandboxReady       SandboxState = "ready"
	SandboxUnavailable SandboxState = "unavailable"
)

// State reports where the setup stands, with the reason when it failed.
func (s *Sandbox) State() (SandboxState, error) {
	select {
	case <-s.ready:
	default:
		return SandboxPending, nil
	}
	if s.err != nil {
		return SandboxUnavailable, s.err
	}
	return SandboxReady, nil
}

// unavailable is an error that is ErrSandboxUnavailable and reads as its
// reason alone.
type unavailable struct{ err error }

func (u unavailable) Error() string        { return u.err.Error() }
func (u unavailable) Unwrap() error        { return u.err }
func (u unavailable) Is(target error) bool { return target == ErrSandboxUnavailable }

// Backend waits for the setup (bounded by ctx) and returns the backend, or
// an error that is ErrSandboxUnavailable.
func (s *Sandbox) Backend(ctx context.Context) (Runner, error) {
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, unavailable{fmt.Errorf("its self-test had not finished when the call ended (%w)", context.Cause(ctx))}
	}
	if s.err != nil {
		return nil, unavailable{s.err}
	}
	return s.r, nil
}

// Run runs inv in the backend. A call that arrives before the setup has
// finished waits for it within its own timeout, and runs with what is
// left of that timeout.
func (s *Sandbox) Run(ctx context.Context, inv Invocation) (Result, error) {
	if err := inv.streams(inv.Template); err != nil {
		return Result{}, fmt.Errorf("%s: %w", inv.Name, err)
	}
	start := time.Now()
	wctx, cancel := context.WithTimeoutCause(ctx, inv.Timeout, errors.New("its timeout passed"))
	r, err := s.Backend(wctx)
	cancel()
	if err != nil {
		return Result{}, err
	}
	if waited := time.Since(start); waited > time.Millisecond {
		inv.Timeout -= waited
		if inv.Timeout <= 0 {
			return Result{}, unavailable{errors.New("its self-test took the call's whole timeout")}
		}
	}
	return r.Run(ctx, inv)
}

// OpenSession opens a helper session in the backend (OpenSession),
// waiting for the setup within ctx.
func (s *Sandbox) OpenSession(ctx context.Context, t Template) (Session, error) {
	r, err := s.Backend(ctx)
	if err != nil {
		return nil, err
	}
	return OpenSession(ctx, r, t)
}

// StartService starts svc in the backend, waiting for the setup within
// ctx. A backend that cannot run services (oci) answers an error that wraps
// ErrNoServices.
func (s *Sandbox) StartService(ctx context.Context, svc Service) (*Process, error) {
	r, err := s.Backend(ctx)
	if err != nil {
		return nil, err
	}
	st, ok := r.(ServiceStarter)
	if !ok {
		return nil, fmt.Errorf("%w: the %s backend runs tools, not long-lived servers", ErrNoServices, s.name)
	}
	return st.StartService(ctx, svc)
}

// ErrNoServices says that a sandbox backend cannot run long-lived servers.
var ErrNoServices = errors.New("the sandbox backend cannot run stdio servers")

// Close cancels a setup still under way, waits for it, and releases what
// the backend holds on the host (the oci backend's containers and
// directories).
func (s *Sandbox) Close() error {
	if s.cancel != nil {
		s.cancel()
	}
	<-s.ready
	if c, ok := s.r.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
