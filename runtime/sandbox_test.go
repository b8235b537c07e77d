package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

type recordRunner struct{ inv []Invocation }

func (r *recordRunner) Run(_ context.Context, inv Invocation) (Result, error) {
	r.inv = append(r.inv, inv)
	return Result{Output: []byte("ok")}, nil
}

func TestSandboxStates(t *testing.T) {
	r := &recordRunner{}
	if st, err := ReadySandbox("bwrap", r).State(); st != SandboxReady || err != nil {
		t.Errorf("ReadySandbox: %s %v", st, err)
	}
	failed := FailedSandbox("bwrap", errors.New("no bwrap"))
	if st, err := failed.State(); st != SandboxUnavailable || err == nil || err.Error() != "no bwrap" {
		t.Errorf("FailedSandbox: %s %v", st, err)
	}
	_, err := failed.Run(context.Background(), Invocation{Call: Call{Timeout: time.Second}})
	if !errors.Is(err, ErrSandboxUnavailable) || err.Error() != "no bwrap" {
		t.Errorf("Run on a failed sandbox = %v, want ErrSandboxUnavailable reading as its reason", err)
	}
	if _, err := ReadySandbox("oci", r).StartService(context.Background(), Service{}); !errors.Is(err, ErrNoServices) {
		t.Errorf("StartService on a backend that runs no services = %v, want ErrNoServices", err)
	}
	if _, err := NewSandbox("bwrap", func(context.Context) (Runner, error) { return nil, nil }).Backend(context.Background()); !errors.Is(err, ErrSandboxUnavailable) {
		t.Errorf("a setup that returned nothing = %v, want unavailable", err)
	}
}

// TestSandboxWaits: a run that arrives during the setup waits for it and
// runs with what is left of its timeout; one whose timeout passes first
// answers unavailable and runs nothing.
func TestSandboxWaits(t *testing.T) {
	r := &recordRunner{}
	release := make(chan struct{})
	sb := NewSandbox("bwrap", func(context.Context) (Runner, error) {
		<-release
		return r, nil
	})
	if st, _ := sb.State(); st != SandboxPending {
		t.Fatalf("state %s, want pending", st)
	}
	_, err := sb.Run(context.Background(), Invocation{Call: Call{Timeout: 50 * time.Millisecond}})
	if !errors.Is(err, ErrSandboxUnavailable) || !strings.Contains(err.Error(), "had not finished") || len(r.inv) != 0 {
		t.Errorf("Run past its timeout = %v (%d runs), want unavailable, nothing run", err, len(r.inv))
	}
	time.AfterFunc(100*time.Millisecond, func() { close(release) })
	if _, err := sb.Run(context.Background(), Invocation{Call: Call{Timeout: 5 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	if len(r.inv) != 1 || r.inv[0].Timeout > 5*time.Second-90*time.Millisecond {
		t.Errorf("runs %+v, want one with the wait taken off its 5 s", r.inv)
	}
}

// TestSandboxCloseCancelsSetup: Close ends a setup still under way.
func TestSandboxCloseCancelsSetup(t *testing.T) {
	sb := NewSandbox("bwrap", func(ctx context.Context) (Runner, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	done := make(chan struct{})
	go func() {
		_ = sb.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not cancel the setup")
	}
	if st, _ := sb.State(); st != SandboxUnavailable {
		t.Errorf("state after Close: %s", st)
	}
}
