package runtime

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// HelperCmd is one run of a helper program of the built-in tools (git,
// tokei, ctags). Unlike a tool call, a helper keeps stdout and stderr apart
// (the built-in parses stdout) and caps each stream on its own.
type HelperCmd struct {
	// Path is the helper's canonical absolute path, resolved at start-up.
	Path string
	// Args are the arguments after argv[0]; argv[0] is Path.
	Args []string
	// Dir is the working directory; it must be absolute.
	Dir string
	// Timeout is the hard wall-clock limit.
	Timeout time.Duration
	// MaxStdout and MaxStderr cap what is kept of each stream. The helper
	// is never blocked by a full pipe: the excess is read and counted.
	MaxStdout int
	MaxStderr int
}

// HelperResult is the outcome of a helper that ran. A helper that failed,
// timed out or was cancelled is a HelperResult, not an error.
type HelperResult struct {
	// Stdout and Stderr are the kept bytes of each stream.
	Stdout []byte
	Stderr []byte
	// StdoutBytes and StderrBytes count every byte written, kept or not.
	StdoutBytes int64
	StderrBytes int64
	// StdoutCut and StderrCut report that a stream exceeded its cap.
	StdoutCut bool
	StderrCut bool
	// ExitCode is the exit status, or 128+N when signal N killed it.
	ExitCode int
	// Elapsed is the wall-clock time of the run.
	Elapsed time.Duration
	// TimedOut reports that the timeout was reached.
	TimedOut bool
	// Limit names what ended the run early, if anything.
	Limit Limit
}

// Failed reports whether the helper run counts as a failure: non-zero
// exit, timeout or cancellation.
func (r HelperResult) Failed() bool {
	return r.ExitCode != 0 || r.TimedOut || r.Limit == LimitCancelled
}

// RunHelper runs h on the host with stdin /dev/null, the environment
// exactly Env, in a process group of its own that is SIGKILLed as soon as
// the direct child has exited or the timeout or ctx ends the run, so that
// no descendant outlives the run or holds its pipes open for longer than
// DrainGrace.
//
// Security caveat: it is for what reads no workspace content (a helper's
// version probe, with Dir "/"). A helper run over the workspace runs
// sandboxed (a Runner with Invocation.SplitStderr and StderrMax set): a repository's
// configuration names programs git runs, and no process started over
// workspace content may run on the host. A descendant that leaves the
// process group (setsid) is not killed by the group kill.
//
// The error return means the helper could not be started at all.
func RunHelper(ctx context.Context, h HelperCmd) (HelperResult, error) {
	if !filepath.IsAbs(h.Path) {
		return HelperResult{}, fmt.Errorf("run helper %q: path is not absolute", h.Path)
	}
	if !filepath.IsAbs(h.Dir) {
		return HelperResult{}, fmt.Errorf("run helper %q: working directory %q is not absolute", h.Path, h.Dir)
	}
	if h.Timeout <= 0 || h.MaxStdout <= 0 || h.MaxStderr <= 0 {
		return HelperResult{}, fmt.Errorf("run helper %q: limits not set (timeout %s, stdout %d, stderr %d)",
			h.Path, h.Timeout, h.MaxStdout, h.MaxStderr)
	}
	res, err := Exec(ctx, Cmd{
		Proc: Proc{
			Path: h.Path,
			Args: append([]string{h.Path}, h.Args...),
			// A fresh copy: Env is exactly the four variables, never the
			// server's environment.
			Env: append([]string(nil), Env...),
			Dir: h.Dir,
		},
		Call: Call{Timeout: h.Timeout, MaxBytes: h.MaxStdout, StderrMax: h.MaxStderr},
	})
	if err != nil {
		return HelperResult{}, fmt.Errorf("run helper %q: %w", h.Path, err)
	}
	return HelperResultOf(res), nil
}

// HelperResultOf is the HelperResult of a run whose stderr was kept apart
// (Cmd.StderrMax, Invocation.StderrMax).
func HelperResultOf(res Result) HelperResult {
	return HelperResult{
		Stdout:      res.Output,
		Stderr:      res.Stderr,
		StdoutBytes: res.OutputBytes,
		StderrBytes: res.StderrBytes,
		StdoutCut:   res.Truncated,
		StderrCut:   res.StderrBytes > int64(len(res.Stderr)),
		ExitCode:    res.ExitCode,
		Elapsed:     res.Elapsed,
		TimedOut:    res.TimedOut,
		Limit:       res.Limit,
	}
}
