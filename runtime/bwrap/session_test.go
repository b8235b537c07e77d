package bwrap

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
)

// sessionTemplate is a helper session of the probe: its commands are the
// probe's argv with the given prefix words, then one of verbs.
func sessionTemplate(t *testing.T, dir string, verbs []string, prefix ...string) rt.Template {
	tpl := probeTemplate(t, dir, prefix...)
	tpl.Session, tpl.Verbs = true, verbs
	return tpl
}

func helperCall() rt.Call {
	return rt.Call{Timeout: 10 * time.Second, MaxBytes: 4096, StderrMax: 4096}
}

// TestSessionRunsEachCommand: one sandbox runs every command it is sent,
// each with its own argv and streams, in order; a command's processes are
// gone before the next; the sandbox is the same throughout (a file one
// command leaves in /tmp is there for the next).
func TestSessionRunsEachCommand(t *testing.T) {
	r := newRunner(t)
	dir := testbin.Dir(t)
	tpl := sessionTemplate(t, dir, nil)
	sess, err := r.OpenSession(context.Background(), tpl)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	run := func(args ...string) rt.Result {
		t.Helper()
		res, err := sess.Run(context.Background(), append(append([]string(nil), tpl.Argv...), args...), helperCall())
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return res
	}
	if res := run("echo", "one"); res.ExitCode != 0 || string(res.Output) != "one\n" {
		t.Fatalf("echo one: exit %d, %q %q", res.ExitCode, res.Output, res.Stderr)
	}
	if res := run("stderr"); string(res.Output) != "to stdout\n" || string(res.Stderr) != "to stderr\n" {
		t.Errorf("stderr: stdout %q, stderr %q: want the two apart", res.Output, res.Stderr)
	}
	if res := run("exit", "3"); res.ExitCode != 3 {
		t.Errorf("exit 3: got exit %d", res.ExitCode)
	}
	if res := run("write", "/tmp/mark"); !strings.Contains(string(res.Output), "write /tmp/mark: ok") {
		t.Fatalf("write: %q", res.Output)
	}
	if res := run("exists", "/tmp/mark"); !strings.Contains(string(res.Output), "exists /tmp/mark: true") {
		t.Errorf("a later command of the session does not see the sandbox of the earlier one: %q", res.Output)
	}
	// A daemon left by one command is gone at the next, and did not hold
	// its call.
	t0 := time.Now()
	run("detached")
	if el := time.Since(t0); el > 2*time.Second {
		t.Errorf("a detached child held its command for %s", el)
	}
	if res := run("processes"); string(res.Output) != "processes: 1\n" {
		t.Errorf("the next command sees more than itself (and the shim):\n%s", res.Output)
	}
	res, err := sess.Run(context.Background(), append(append([]string(nil), tpl.Argv...), "stdin"), rt.Call{
		Timeout: 10 * time.Second, MaxBytes: 4096, StderrMax: 4096, Input: []byte("twelve bytes"),
	})
	if err != nil || string(res.Output) != "stdin bytes=12\n" {
		t.Errorf("stdin: %q, %v", res.Output, err)
	}
}

// TestSessionShape: a command that does not begin with the session's fixed
// argv, or whose next word is not one of its verbs, is refused before it
// is sent; the session goes on.
func TestSessionShape(t *testing.T) {
	r := newRunner(t)
	dir := testbin.Dir(t)
	tpl := sessionTemplate(t, dir, []string{"echo", "argv"})
	sess, err := r.OpenSession(context.Background(), tpl)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	probe := tpl.Argv[0]
	for _, argv := range [][]string{
		{"/bin/sh", "-c", "echo hi"},
		{probe, "exit", "0"},
		{probe},
		{probe + " ", "echo", "x"},
		{probe, "echo", "nul\x00byte"},
	} {
		if _, err := sess.Run(context.Background(), argv, helperCall()); err == nil {
			t.Errorf("%q: ran, want refused", argv)
		}
	}
	res, err := sess.Run(context.Background(), []string{probe, "argv", "a b", "--c"}, helperCall())
	if err != nil {
		t.Fatal(err)
	}
	if want := "\"" + probe + "\"\n\"argv\"\n\"a b\"\n\"--c\"\n"; string(res.Output) != want {
		t.Errorf("argv: %q, want %q", res.Output, want)
	}
}

// TestSessionTimeoutEndsIt: a command past its timeout is killed with the
// sandbox, answers TimedOut, and the session runs nothing more.
func TestSessionTimeoutEndsIt(t *testing.T) {
	r := newRunner(t)
	sess, err := r.OpenSession(context.Background(), sessionTemplate(t, testbin.Dir(t), nil))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	probe := testbin.Probe(t)
	t0 := time.Now()
	res, err := sess.Run(context.Background(), []string{probe, "sleep", "30"}, rt.Call{Timeout: 300 * time.Millisecond, MaxBytes: 4096, StderrMax: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || !res.Failed() || time.Since(t0) > 5*time.Second {
		t.Errorf("sleep 30 with a 300 ms timeout: %+v after %s", res, time.Since(t0))
	}
	if _, err := sess.Run(context.Background(), []string{probe, "echo", "x"}, helperCall()); !errors.Is(err, rt.ErrSessionEnded) {
		t.Errorf("after a timeout: %v, want ErrSessionEnded", err)
	}
}
