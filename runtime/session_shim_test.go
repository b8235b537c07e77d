package runtime_test

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
	"github.com/toolgate/toolgate/runtime/cgroup"
)

// bwrapBackend is the real bwrap backend, or a loud skip.
func bwrapBackend(t *testing.T) *bwrap.Runner {
	t.Helper()
	if _, err := bwrap.Find(); err != nil {
		testbin.Missing(t, "%v", err)
	}
	cg := cgroup.Setup()
	t.Cleanup(cg.Close)
	r, err := bwrap.New(context.Background(), bwrap.Config{Shim: testbin.Shim(t), Cgroups: cg, Limits: rt.DefaultSandboxLimits()})
	if errors.Is(err, bundle.ErrNoSeccomp) {
		testbin.Missing(t, "this test binary was built without -tags seccomp (go test -tags seccomp): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rawCommand prepares a sandbox for tpl, sends it argv as a session
// command past the server's checks, and returns what came back: the
// status (ok false: none), stdout and stderr, and whether the sandbox
// ended.
func rawCommand(t *testing.T, r *bwrap.Runner, tpl rt.Template, argv []string) (status int, ok bool, stdout, stderr string, ended bool) {
	t.Helper()
	sb, err := r.Prepare(tpl)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sb.Discard()
		sb.Cleanup()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	err = rt.SendCommand(sb, argv, []*os.File{in, outW, errW})
	outW.Close()
	errW.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan [2]string, 1)
	go func() {
		o, _ := io.ReadAll(outR)
		e, _ := io.ReadAll(errR)
		got <- [2]string{string(o), string(e)}
	}()
	status, ok = rt.ReadStatus(sb)
	select {
	case <-rt.Exited(sb):
		ended = true
	case <-time.After(2 * time.Second):
	}
	if ended || ok {
		streams := <-got
		stdout, stderr = streams[0], streams[1]
	}
	return status, ok, stdout, stderr, ended
}

// TestSessionShimChecksCommands: the session shim itself refuses a command
// of another shape than it was prepared with, even one that reached it
// past the server's check: nothing runs, and the sandbox ends. The same
// raw message of the right shape runs.
func TestSessionShimChecksCommands(t *testing.T) {
	r := bwrapBackend(t)
	probe := testbin.Probe(t)
	tpl := rt.Template{Name: "probe", Path: probe, Argv: []string{probe}, Dir: testbin.Dir(t), Session: true, Verbs: []string{"argv"}}

	code, ok, out, _, ended := rawCommand(t, r, tpl, []string{probe, "argv", "x"})
	if !ok || code != 0 || !strings.Contains(out, "\"x\"\n") || ended {
		t.Fatalf("a command of the session's shape: status %d (%v), stdout %q, ended %v; want it run", code, ok, out, ended)
	}
	for _, argv := range [][]string{
		{probe, "echo", "ran"},
		{"/bin/sh", "-c", "echo ran"},
		{probe},
	} {
		code, ok, out, errOut, ended := rawCommand(t, r, tpl, argv)
		if ok || strings.Contains(out, "ran") || !ended {
			t.Errorf("%q past the server: status %d (%v), stdout %q, ended %v; want it refused by the shim, the sandbox ended", argv, code, ok, out, ended)
		}
		if !strings.Contains(errOut, "toolgate: session: command") {
			t.Errorf("%q: the refusal says %q", argv, errOut)
		}
	}
}

// TestToolSandboxTakesNoArgv: a tool's prepared sandbox (the standby shim)
// never takes an argv: a session command sent to it runs nothing, not
// even its own tool, and the sandbox ends.
func TestToolSandboxTakesNoArgv(t *testing.T) {
	r := bwrapBackend(t)
	probe := testbin.Probe(t)
	tpl := rt.Template{Name: "probe", Path: probe, Argv: []string{probe, "echo", "own tool"}, Dir: testbin.Dir(t)}
	code, ok, out, _, ended := rawCommand(t, r, tpl, []string{probe, "echo", "other"})
	if ok || strings.Contains(out, "other") || strings.Contains(out, "own tool") || !ended {
		t.Errorf("a command sent to a tool's sandbox: status %d (%v), stdout %q, ended %v; want nothing run, the sandbox ended", code, ok, out, ended)
	}
}
