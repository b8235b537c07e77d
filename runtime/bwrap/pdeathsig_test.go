package bwrap

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
)

// TestSandboxedKeepsParentDeathSignal: what a sandbox runs (a call's tool
// or a service, started on its path or released from a prepared sandbox)
// has SIGKILL as its parent-death signal: it is PID 1 of the sandbox, and
// so it and everything in the sandbox die with bwrap, which dies with
// toolgate, even a SIGKILLed one. The signal belongs to the thread that
// set it (bwrap sets it on the only thread of the process it execs, the
// shim), so a shim that execs from another of its threads (its goroutine
// moved there while it waited on the release channel) would give none.
// That happened to about one prepared sandbox in forty, more often under
// load: many releases, four at a time, each checked.
func TestSandboxedKeepsParentDeathSignal(t *testing.T) {
	r := newRunner(t)
	want := fmt.Sprintf("pdeathsig=%d ok", syscall.SIGKILL)
	var mu sync.Mutex
	got := map[string]map[string]int{}
	record := func(path, out string) {
		mu.Lock()
		defer mu.Unlock()
		if got[path] == nil {
			got[path] = map[string]int{}
		}
		got[path][strings.TrimSpace(out)]++
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 12 {
				if err := pdeathsigRuns(t, r, fmt.Sprintf("pdeath-%d-%d-%d", os.Getpid(), w, i), i == 0, record); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, path := range []string{"prepared service", "prepared call", "service", "call"} {
		n := 0
		for out, k := range got[path] {
			n += k
			if out != want {
				t.Errorf("%s: %d of its runs said %q, want %q", path, k, out, want)
			}
		}
		if n == 0 {
			t.Errorf("%s: no run", path)
		}
	}
	t.Logf("%v", got)
}

// pdeathsigRuns runs the probe's pdeathsig mode as a prepared service and
// a prepared call, and, when direct is set, as a service and a call
// started on their path, and records what each said.
func pdeathsigRuns(t *testing.T, r *Runner, id string, direct bool, record func(path, out string)) error {
	probe := testbin.Probe(t)
	tpl := probeTemplate(t, testbin.Dir(t), "pdeathsig")
	call := rt.Call{Timeout: 10 * time.Second, MaxBytes: 4096}
	svc := rt.Service{ID: id, Name: "probe", Path: probe, Argv: []string{probe, "pdeathsig"}}
	sb, err := r.PrepareService(svc)
	if err != nil {
		return err
	}
	defer sb.Cleanup()
	if err := sb.WaitReady(context.Background()); err != nil {
		sb.Discard()
		return err
	}
	p, err := r.ReleaseService(sb, svc)
	if err != nil {
		return err
	}
	record("prepared service", output(t, p))
	p.Close()

	sbc, err := r.Prepare(tpl)
	if err != nil {
		return err
	}
	defer sbc.Cleanup()
	if err := sbc.WaitReady(context.Background()); err != nil {
		sbc.Discard()
		return err
	}
	res, err := sbc.Release(context.Background(), call)
	if err != nil {
		return err
	}
	record("prepared call", string(res.Output))
	if !direct {
		return nil
	}

	svc.ID += "-direct"
	if p, err = r.StartService(context.Background(), svc); err != nil {
		return err
	}
	record("service", output(t, p))
	p.Close()
	if res, err = r.Run(context.Background(), rt.Invocation{ID: svc.ID, Template: tpl, Call: call}); err != nil {
		return err
	}
	record("call", string(res.Output))
	return nil
}
