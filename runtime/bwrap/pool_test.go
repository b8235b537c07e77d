package bwrap

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
)

func probeTemplate(t *testing.T, dir string, args ...string) rt.Template {
	probe := testbin.Probe(t)
	return rt.Template{Name: "probe", Path: probe, Argv: append([]string{probe}, args...), Dir: dir}
}

// TestPreparedRelease prepares one sandbox, waits until it is ready, and
// releases it: the tool runs with its fixed argv and the call's streams,
// and the call's clock starts at the release.
func TestPreparedRelease(t *testing.T) {
	r := newRunner(t)
	dir := testbin.Dir(t)
	sb, err := r.Prepare(probeTemplate(t, dir, "echo", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Cleanup()
	t0 := time.Now()
	if err := sb.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("ready after %s", time.Since(t0))
	time.Sleep(200 * time.Millisecond)
	res, err := sb.Release(context.Background(), rt.Call{Timeout: 10 * time.Second, MaxBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Output)) != "hello" {
		t.Errorf("released call = exit %d, %q", res.ExitCode, res.Output)
	}
	if res.Elapsed > 150*time.Millisecond {
		t.Errorf("Elapsed %s counts the wait before the release", res.Elapsed)
	}
	t.Logf("released call: %s", res.Elapsed)
}
