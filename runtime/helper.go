package runtime

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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

// RunHelper runs h with stdin /dev/null, the environment exactly Env, in a
// process group of its own that is SIGKILLed as soon as the direct child
// has exited or the timeout or ctx ends the run, so that no descendant
// outlives the run or holds its pipes open for longer than DrainGrace.
//
// Security caveat: a descendant that leaves the process group (setsid) is
// not killed by the group kill; helpers are trusted programs (git, tokei,
// ctags) resolved by the operator, not workspace content.
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
	if ctx.Err() != nil {
		return HelperResult{Limit: LimitCancelled, ExitCode: -1}, nil
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return HelperResult{}, fmt.Errorf("run helper %q: stdout pipe: %w", h.Path, err)
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return HelperResult{}, fmt.Errorf("run helper %q: stderr pipe: %w", h.Path, err)
	}
	defer errR.Close()

	cmd := &exec.Cmd{
		Path: h.Path,
		Args: append([]string{h.Path}, h.Args...),
		// A fresh copy: Env is exactly the four variables, never the
		// server's environment.
		Env:    append([]string(nil), Env...),
		Dir:    h.Dir,
		Stdin:  nil, // os/exec opens /dev/null
		Stdout: outW,
		Stderr: errW,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	start := time.Now()
	err = startTracked(cmd)
	outW.Close()
	errW.Close()
	if err != nil {
		return HelperResult{}, fmt.Errorf("run helper %q: %w", h.Path, err)
	}
	pid := cmd.Process.Pid
	defer untrack(pid)

	stdout, stderr := newStreamCap(h.MaxStdout), newStreamCap(h.MaxStderr)
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); stdout.readFrom(outR) }()
	go func() { defer readers.Done(); stderr.readFrom(errR) }()
	readDone := make(chan struct{})
	go func() { readers.Wait(); close(readDone) }()

	exited := make(chan struct{})
	go func() {
		// The zombie pins the pid and so the process group id until
		// cmd.Wait below: the group kill cannot hit an unrelated group.
		waitNoReap(pid)
		close(exited)
	}()

	var res HelperResult
	timer := time.NewTimer(h.Timeout)
	defer timer.Stop()
	done := ctx.Done()
wait:
	for {
		select {
		case <-exited:
			break wait
		case <-timer.C:
			if res.Limit == LimitNone {
				res.Limit, res.TimedOut = LimitTimeout, true
			}
			_ = unix.Kill(-pid, unix.SIGKILL)
		case <-done:
			done = nil
			if res.Limit == LimitNone {
				res.Limit = LimitCancelled
			}
			_ = unix.Kill(-pid, unix.SIGKILL)
		}
	}
	// The direct child has exited: kill what it left in its group while
	// the zombie still pins the group id, then reap.
	_ = unix.Kill(-pid, unix.SIGKILL)
	werr := cmd.Wait()
	res.ExitCode = exitCode(cmd.ProcessState, werr)

	select {
	case <-readDone:
	case <-time.After(DrainGrace):
		// Something outside the group still holds a pipe: cut it off.
		outR.Close()
		errR.Close()
		<-readDone
	}
	res.Elapsed = time.Since(start)
	res.Stdout, res.StdoutBytes = stdout.result()
	res.Stderr, res.StderrBytes = stderr.result()
	res.StdoutCut = res.StdoutBytes > int64(len(res.Stdout))
	res.StderrCut = res.StderrBytes > int64(len(res.Stderr))
	return res, nil
}

// streamCap keeps the first max bytes of one stream and counts the rest,
// reading on after the cap so the writer never blocks.
type streamCap struct {
	max   int
	buf   []byte
	total int64
}

func newStreamCap(max int) *streamCap {
	return &streamCap{max: max, buf: make([]byte, 0, min(max, 64<<10))}
}

func (c *streamCap) readFrom(r io.Reader) {
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			c.total += int64(n)
			if room := c.max - len(c.buf); room > 0 {
				c.buf = append(c.buf, chunk[:min(n, room)]...)
			}
		}
		if err != nil {
			// EOF, or the pipe was closed after DrainGrace.
			return
		}
	}
}

// result is called only after readFrom has returned.
func (c *streamCap) result() ([]byte, int64) { return c.buf, c.total }
