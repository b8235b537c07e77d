package oci

import (
	"context"
	"strings"
	"testing"
	"time"

	rt "github.com/toolgate/toolgate/runtime"
)

func template(args ...string) rt.Template {
	return rt.Template{Name: "helper", Path: helper, Argv: append([]string{helper}, args...), Dir: toolDir}
}

// prepared prepares a container for tpl and waits until it is created and
// waiting for its start.
func prepared(t *testing.T, r *Runner, tpl rt.Template) *rt.Standby {
	t.Helper()
	sb, err := r.Prepare(tpl)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := sb.WaitReady(ctx); err != nil {
		sb.Discard()
		sb.Cleanup()
		t.Fatalf("WaitReady: %v", err)
	}
	return sb
}

// TestPreparedContainer creates a container ahead of its call and starts
// it on the release: the tool's output, in order on one stream, its exit
// status, and a clock that starts at the release; afterwards neither the
// container nor its bundle is left.
func TestPreparedContainer(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		for _, tc := range []struct {
			args []string
			exit int
			out  string
		}{
			{[]string{"out"}, 0, "out0\nerr0\nout1\nerr1\nout2\nerr2\n"},
			{[]string{"exit", "3"}, 3, ""},
		} {
			sb := prepared(t, r, template(tc.args...))
			time.Sleep(100 * time.Millisecond)
			res, err := sb.Release(context.Background(), rt.Call{Timeout: 20 * time.Second, MaxBytes: 1 << 16})
			sb.Cleanup()
			if err != nil {
				t.Fatalf("Release(%v): %v", tc.args, err)
			}
			if res.ExitCode != tc.exit || string(res.Output) != tc.out {
				t.Errorf("released %v = exit %d, %q; want exit %d, %q", tc.args, res.ExitCode, res.Output, tc.exit, tc.out)
			}
			t.Logf("%v: %s", tc.args, res.Elapsed)
		}
		if c := listContainers(t, r); len(c) != 0 {
			t.Errorf("containers left: %v", c)
		}
		if b := bundlesLeft(t, r); len(b) != 0 {
			t.Errorf("bundles left: %v", b)
		}
	})
}

// TestPreparedContainerTimeout: a released container that outlives its
// timeout is killed through the runtime, and nothing is left.
func TestPreparedContainerTimeout(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		sb := prepared(t, r, template("sleep", "60s"))
		start := time.Now()
		res, err := sb.Release(context.Background(), rt.Call{Timeout: time.Second, MaxBytes: 4096})
		sb.Cleanup()
		if err != nil {
			t.Fatal(err)
		}
		if !res.TimedOut || time.Since(start) > 10*time.Second {
			t.Errorf("timed out %v after %s (exit %d: %s)", res.TimedOut, time.Since(start), res.ExitCode, res.Output)
		}
		if c := listContainers(t, r); len(c) != 0 {
			t.Errorf("containers left: %v", c)
		}
	})
}

// TestPreparedContainerDiscarded: a container discarded unused never runs
// its tool, and is deleted with its bundle.
func TestPreparedContainerDiscarded(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, r *Runner) {
		sb := prepared(t, r, template("out"))
		sb.Discard()
		sb.Cleanup()
		if c := listContainers(t, r); len(c) != 0 {
			t.Errorf("containers left: %v", c)
		}
		if b := bundlesLeft(t, r); len(b) != 0 {
			t.Errorf("bundles left: %v", b)
		}
		if _, err := sb.Release(context.Background(), rt.Call{Timeout: time.Second, MaxBytes: 1}); err == nil || !strings.Contains(err.Error(), "already used") {
			t.Errorf("Release after Discard = %v, want ErrStandbyUsed", err)
		}
	})
}
