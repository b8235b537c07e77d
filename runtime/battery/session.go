package battery

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	rt "github.com/toolgate/toolgate/runtime"
)

// The helper sessions' cases: a built-in's helper (git over the workspace)
// runs in a sandbox that takes each command's argv from toolgate
// (rt.Session). The probe stands in for the helper: a session's template
// is the probe and its prefix, its verbs the probe modes a case uses.

// sessionVerbs are the probe modes a session of the battery may run.
var sessionVerbs = []string{"argv", "processes", "session-intrude", "leftovers", "env"}

// sessionTemplate is the battery's helper session over the tool dir.
func (e *Env) sessionTemplate() rt.Template {
	return rt.Template{
		Name: "probe-session", Path: e.Probe.Path, Argv: append([]string{e.Probe.Path}, e.Probe.Prefix...), Dir: e.Dir,
		Session: true, Verbs: sessionVerbs,
	}
}

// command is a session command of the probe: mode, args, the run's tag.
func (e *Env) command(mode string, args ...string) []string {
	argv := append(e.sessionTemplate().Argv, mode)
	return append(append(argv, args...), e.tag)
}

// openSession opens a helper session through the backend, as a built-in
// does (rt.OpenSession). Through a pool, the session must take a sandbox
// prepared for it ahead of the call.
func (e *Env) openSession(ctx context.Context) (rt.Session, error) {
	t := e.sessionTemplate()
	p, ok := e.Runner.(*rt.Pool)
	if !ok || !e.sessions() {
		return rt.OpenSession(ctx, e.Runner, t)
	}
	p.Keep([]rt.Template{t})
	defer p.Keep(nil) // the next one prepared is discarded: nothing waits after the case
	deadline := time.Now().Add(60 * time.Second)
	for p.Status().Ready == 0 {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no session sandbox was prepared within 60 s: %s", p.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := p.Status().Hits
	s, err := p.OpenSession(ctx, t)
	if err == nil && p.Status().Hits != before+1 {
		s.Close()
		return nil, fmt.Errorf("the session did not take the sandbox prepared for it: %+v", p.Status())
	}
	return s, err
}

// sessions reports whether the backend keeps one sandbox for a session's
// commands; the OCI backends run each in a container of its own, which
// the tool cases cover.
func (e *Env) sessions() bool {
	r := e.Runner
	if p, ok := r.(*rt.Pool); ok {
		r = p.Backend()
	}
	_, ok := r.(rt.SessionOpener)
	return ok
}

// runCommand runs argv in s with the battery's limits.
func runCommand(ctx context.Context, s rt.Session, argv []string) (rt.Result, error) {
	res, err := s.Run(ctx, argv, rt.Call{Timeout: 20 * time.Second, MaxBytes: 64 << 10, StderrMax: 4096})
	if err != nil {
		return res, fmt.Errorf("session command %q: %w", argv[len(argv)-2], err)
	}
	return res, nil
}

func caseSessionShape(ctx context.Context, e *Env) error {
	s, err := e.openSession(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	// What runs is the helper, with exactly the argv sent.
	sent := e.command("argv", "a b", "--c=d", "")
	res, err := runCommand(ctx, s, sent)
	if err != nil {
		return err
	}
	var want strings.Builder
	for _, a := range sent {
		fmt.Fprintf(&want, "%q\n", a)
	}
	if string(res.Output) != want.String() {
		return fmt.Errorf("the command ran with another argv:\n%s\nwant:\n%s", clip(res.Output), want.String())
	}
	// Another exe, a prefix word changed or missing, a verb not listed, a
	// NUL byte: refused before anything runs, and the session goes on.
	prefix := e.sessionTemplate().Argv
	for _, argv := range [][]string{
		{"/bin/sh", "-c", "echo ran"},
		append([]string{"/bin/sh"}, append(prefix[1:], "argv", e.tag)...),
		append(append([]string{prefix[0]}, "killall"), e.tag),
		append(append([]string(nil), prefix...), "killall", e.tag),
		append(append([]string(nil), prefix...), "argv", "x\x00y", e.tag),
	} {
		if res, err := s.Run(ctx, argv, rt.Call{Timeout: 20 * time.Second, MaxBytes: 4096, StderrMax: 4096}); err == nil {
			return fmt.Errorf("command %q of another shape ran: exit %d, %q", argv, res.ExitCode, clip(res.Output))
		}
	}
	if res, err = runCommand(ctx, s, sent); err != nil || string(res.Output) != want.String() {
		return fmt.Errorf("after the refusals the session no longer runs what is sent: %q, %w", clip(res.Output), err)
	}
	return e.survivors()
}

func caseSessionUnreachable(ctx context.Context, e *Env) error {
	s, err := e.openSession(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	if !e.sessions() {
		// The OCI backends run each command in a container of its own,
		// with no shim and no channel inside: what one command leaves
		// must not meet the next.
		for i := range 2 {
			res, err := runCommand(ctx, s, e.command("leftovers"))
			if err != nil {
				return err
			}
			if err := want(res.Output, "leftover /tmp/toolgate-leftover: false", "processes: 1", "leave a process: ok"); err != nil {
				return fmt.Errorf("command %d of a session: %w", i+1, err)
			}
		}
		return e.survivors()
	}
	res, err := runCommand(ctx, s, e.command("processes"))
	if err != nil {
		return err
	}
	base := string(res.Output)
	res, err = runCommand(ctx, s, e.command("session-intrude"))
	if err != nil {
		return err
	}
	out := res.Output
	if err := want(out, "fds: 0 1 2", "list /proc/1/fd: denied EACCES", "open /proc/1/fd/4: denied EACCES",
		"read /proc/1/environ: denied EACCES", "read /proc/1/mem: denied EACCES"); err != nil {
		return fmt.Errorf("a command reaches the session shim's descriptors or memory: %w", err)
	}
	if m := regexp.MustCompile(`ptrace 1: (.*)`).FindSubmatch(out); m == nil || !strings.HasPrefix(string(m[1]), "denied") {
		return fmt.Errorf("a command can ptrace the session shim:\n%s", clip(out))
	}
	if err := want(out, "leave /tmp/toolgate-session-left: ok", "leave a process: ok"); err != nil {
		return fmt.Errorf("the command could not leave its traces, so the next proves nothing: %w", err)
	}
	// The shim survived the signals and runs the next command: exactly
	// what was sent, with nothing of the last one's processes.
	res, err = runCommand(ctx, s, e.command("processes"))
	if err != nil {
		return fmt.Errorf("after the signals: %w", err)
	}
	if string(res.Output) != base {
		return fmt.Errorf("the next command sees %q, where a clean one saw %q: a process of the last outlived it", res.Output, base)
	}
	sent := e.command("argv", "next")
	if res, err = runCommand(ctx, s, sent); err != nil || !strings.Contains(string(res.Output), "\"next\"\n") {
		return fmt.Errorf("the next command did not run what was sent: %q, %w", clip(res.Output), err)
	}
	return e.survivors()
}

func caseSessionFresh(ctx context.Context, e *Env) error {
	exact := "env: GIT_CONFIG_NOSYSTEM=1 GIT_PAGER=cat PAGER=cat PATH=" + rt.DefaultPath
	for i := range 2 {
		s, err := e.openSession(ctx)
		if err != nil {
			return err
		}
		res, err := runCommand(ctx, s, e.command("leftovers"))
		s.Close()
		if err != nil {
			return err
		}
		if err := want(res.Output, "leftover /tmp/toolgate-leftover: false", "leftover /dev/shm/toolgate-leftover: false", "processes: 1", exact); err != nil {
			return fmt.Errorf("session %d's first command: %w", i+1, err)
		}
		if err := noSignalIgnored(res.Output); err != nil {
			return fmt.Errorf("session %d's first command: %w", i+1, err)
		}
		if err := want(res.Output, "leave /tmp/toolgate-leftover: ok", "leave a process: ok"); err != nil {
			return fmt.Errorf("session %d could not leave its traces, so the next proves nothing: %w", i+1, err)
		}
	}
	return e.survivors()
}
