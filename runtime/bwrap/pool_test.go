package bwrap

import (
	"context"
	"fmt"
	"os"
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

// TestPreparedHelperStreams: a template shaped like a built-in's helper
// (stderr apart, input on stdin) gets the call's input and keeps the two
// streams apart, through a prepared sandbox.
func TestPreparedHelperStreams(t *testing.T) {
	r := newRunner(t)
	dir := testbin.Dir(t)
	for _, tc := range []struct {
		args   []string
		stdin  []byte
		stdout string
		stderr string
	}{
		{[]string{"stdin"}, []byte("twelve bytes"), "stdin bytes=12\n", ""},
		{[]string{"stderr"}, []byte{}, "to stdout\n", "to stderr\n"},
	} {
		tpl := probeTemplate(t, dir, tc.args...)
		tpl.SplitStderr, tpl.Stdin = true, true
		sb, err := r.Prepare(tpl)
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.WaitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		res, err := sb.Release(context.Background(), rt.Call{Timeout: 10 * time.Second, MaxBytes: 4096, StderrMax: 4096, Input: tc.stdin})
		sb.Cleanup()
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Output) != tc.stdout || string(res.Stderr) != tc.stderr {
			t.Errorf("%v: stdout %q, stderr %q; want %q, %q", tc.args, res.Output, res.Stderr, tc.stdout, tc.stderr)
		}
	}
}

// TestPooledService: a sandboxed service's next start takes a sandbox
// prepared for it: the environment is exactly the four variables and the
// service's own (no PWD, no value on a command line), the pipes are the
// service's channel, and Close leaves nothing.
func TestPooledService(t *testing.T) {
	r := newRunner(t)
	p := rt.NewPool(r, rt.PoolConfig{Depth: 1})
	t.Cleanup(func() { p.Close() })
	probe := testbin.Probe(t)
	secret := fmt.Sprintf("svc-pool-%d-%d", os.Getpid(), time.Now().UnixNano())
	svc := rt.Service{ID: "svc-pool", Name: "probe", Path: probe, Argv: []string{probe, "env"}, Env: []string{"SVC_TOKEN=" + secret}}
	want := "GIT_CONFIG_NOSYSTEM=1\nGIT_PAGER=cat\nPAGER=cat\nPATH=" + rt.DefaultPath + "\nSVC_TOKEN=" + secret
	for i := range 3 {
		if i > 0 {
			waitReady(t, p, 1)
			if pid, ok := argvContaining(secret); ok {
				t.Errorf("process %d of the prepared service has the variable's value on its command line", pid)
			}
		}
		proc, err := p.StartService(context.Background(), svc)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(output(t, proc)); got != want {
			t.Errorf("start %d: environment\n%s\nwant exactly\n%s", i, got, want)
		}
		<-proc.Done()
		proc.Close()
	}
	st := p.Status()
	if st.Hits != 2 || st.Misses != 1 {
		t.Errorf("status %+v: want the first start on its path, the next two prepared", st)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if pid, ok := argvContaining(probe); ok {
		t.Errorf("process %d of the probe outlived the pool", pid)
	}
}

// TestPooledServiceNewEnvironment: a server started again with another
// environment (a rotated token) leaves no sandbox prepared with the old
// one: the pool holds one prepared sandbox for the server, with the new
// value.
func TestPooledServiceNewEnvironment(t *testing.T) {
	r := newRunner(t)
	p := rt.NewPool(r, rt.PoolConfig{Depth: 1})
	t.Cleanup(func() { p.Close() })
	probe := testbin.Probe(t)
	base := fmt.Sprintf("svc-rotate-%d-%d", os.Getpid(), time.Now().UnixNano())
	for i := range 3 {
		svc := rt.Service{ID: "svc-rotate", Name: "probe", Path: probe, Argv: []string{probe, "env"}, Env: []string{fmt.Sprintf("SVC_TOKEN=%s-%d", base, i)}}
		proc, err := p.StartService(context.Background(), svc)
		if err != nil {
			t.Fatal(err)
		}
		output(t, proc)
		<-proc.Done()
		proc.Close()
		waitReady(t, p, 1)
	}
	time.Sleep(500 * time.Millisecond) // what was dropped is being ended
	st := p.Status()
	if st.Ready != 1 || len(st.Entries) != 1 {
		t.Errorf("after three starts with three tokens: %d ready in %d entries, want one, for the last token: %+v", st.Ready, len(st.Entries), st)
	}
}

// waitReady waits until p holds n ready sandboxes.
func waitReady(t *testing.T, p *rt.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for p.Status().Ready < n {
		if time.Now().After(deadline) {
			t.Fatalf("pool not ready: %+v", p.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
