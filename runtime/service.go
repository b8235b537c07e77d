package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/egress/allowlist"

	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/shim"
)

// Service is a long-lived process that speaks a protocol on its stdin and
// stdout: a stdio MCP server. A backend starts it (the bwrap sandbox, or
// DirectServices unsandboxed) and a Process owns its lifetime.
type Service struct {
	// ID names the service's cgroup: unique per start within the server
	// process.
	ID string
	// Name is the service's name (a downstream server's id), for logs; a
	// pool keeps the next start's sandbox of one name only.
	Name string
	// Path is the absolute executable to execve: no PATH search.
	Path string
	// Argv is the full argument vector; Argv[0] is the command as
	// configured.
	Argv []string
	// Dir is the canonical working directory, or "" for "/". A sandbox
	// binds it read-only.
	Dir string
	// Env are the service's own variables, "NAME=value", set after Env.
	// Their values travel in the environment of the processes toolgate
	// starts, never on a command line (the host's ps shows every argv).
	Env []string
	// Network keeps the host's network in a sandbox. An unsandboxed
	// service always has it.
	Network bool
	// ReadOnly are further canonical host paths a sandbox binds read-only
	// at their own path (the server's installation, a data directory named
	// in its arguments). Unsandboxed services see the whole host anyway.
	ReadOnly []string
	// Egress, when set, is the service's network allowlist (its registry
	// entry's allowed_hosts): a sandbox then reaches these destinations,
	// and nothing else, through an egress proxy that lives as long as the
	// process (Invocation.Egress says how). EgressRecord receives each
	// connection's record.
	Egress       allowlist.List
	EgressRecord func(egress.Record)
	// Inject are the credentials its egress proxy sets on its requests
	// (Invocation.Inject): a server that calls an API holds no key.
	Inject map[string]egress.Injection
	// Stderr receives the service's stderr one line at a time, bounded:
	// see MaxStderrLine and MaxStderrBytes. nil discards it.
	Stderr func(line string)
}

// ServiceStarter starts services. The bwrap backend implements it; the OCI
// backend does not, and a sandboxed service never falls back to
// DirectServices.
type ServiceStarter interface {
	// StartService starts s. ctx bounds the start only: the Process lives
	// until it exits or is killed.
	StartService(ctx context.Context, s Service) (*Process, error)
}

// Bounds of what a service's stderr may put into toolgate's log.
const (
	// MaxStderrLine is the longest stderr line passed on; the rest of a
	// longer line is dropped and the line is marked.
	MaxStderrLine = 2048
	// MaxStderrBytes is how much of a service's stderr is passed on over
	// the life of one process; the rest is read and dropped.
	MaxStderrBytes = 256 << 10
)

// ServiceCmd is one long-lived process to start: the common ground of the
// service backends, as Cmd is for calls.
type ServiceCmd struct {
	// Proc is the process to start, extended as Exec extends a call's.
	// The Process owns its Group from then on: it is killed and removed
	// when the process ends. ExtraFiles carry the bwrap backend's seccomp
	// program.
	Proc
	// Stop, when set, asks the process tree to end instead of the default
	// SIGKILL of the process group (the reap shim takes SIGTERM as "kill
	// everything"). The group is SIGKILLed anyway if the direct child has
	// not exited stopEscalation later.
	Stop func(pid int)
	// Stderr receives stderr lines; see Service.Stderr.
	Stderr func(line string)
	// Egress, when set, is the process's egress proxy: the Process owns
	// it from the start, and closes it once the process has ended.
	Egress *Egress
	// IDs are the sandbox's host ids: the Process owns them, and gives
	// them back once nothing it started can still run.
	IDs SandboxID
}

// Process is a running service. Its stdin and stdout are pipes to the
// caller; its stderr goes to the Stderr callback. When the direct child
// exits, for whatever reason, everything it started is killed with it
// (process group and cgroup), so a crashed server leaves nothing behind.
type Process struct {
	stdin  *os.File
	stdout *os.File
	pid    int
	group  *cgroup.Group
	egress *Egress
	ids    SandboxID
	stop   func(pid int)
	cmd    *exec.Cmd

	mu     sync.Mutex // guards exited against the kill of a reaped pid
	exited bool
	code   int
	done   chan struct{}

	killOnce  sync.Once
	closeOnce sync.Once
}

// StartProcess starts c with stdin and stdout piped to the caller, in a
// process group of its own (and c.Group), SIGKILLed when toolgate dies.
func StartProcess(c ServiceCmd) (*Process, error) {
	if c.Env == nil {
		return nil, errors.New("start service: nil environment would inherit the server's")
	}
	if !filepath.IsAbs(c.Path) {
		return nil, fmt.Errorf("start service: path %q is not absolute", c.Path)
	}
	pp, err := newCallPipes(true, true)
	if err != nil {
		return nil, fmt.Errorf("start service: %w", err)
	}
	cmd, err := c.start(pp.inR, pp.outW, pp.errW)
	// The child holds its ends now; the parent keeps only its own.
	pp.closeChild()
	if err != nil {
		pp.closeParent()
		return nil, err
	}
	p := &Process{
		stdin:  pp.inW,
		stdout: pp.outR,
		pid:    cmd.Process.Pid,
		group:  c.Group,
		egress: c.Egress,
		ids:    c.IDs,
		stop:   c.Stop,
		cmd:    cmd,
		done:   make(chan struct{}),
	}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		forwardLines(pp.errR, c.Stderr)
	}()
	go p.watch(pp.errR, stderrDone)
	return p, nil
}

// watch waits for the direct child to exit, kills what it left, reaps it,
// removes its cgroup and marks the Process done.
func (p *Process) watch(stderr *os.File, stderrDone <-chan struct{}) {
	waitNoReap(p.pid)
	p.mu.Lock()
	p.exited = true
	// While the zombie pins the pgid, the group kill cannot hit an
	// unrelated process.
	killGroup(p.pid, p.group)
	werr := p.cmd.Wait()
	p.code = exitCode(p.cmd.ProcessState, werr)
	p.mu.Unlock()
	untrack(p.pid)
	if err := p.group.Close(); err != nil {
		_ = err // the sweep at the next start removes what is left
	}
	p.egress.Close()
	p.ids.Release()
	select {
	case <-stderrDone:
	case <-time.After(DrainGrace):
		stderr.Close()
		<-stderrDone
	}
	stderr.Close()
	close(p.done)
}

// Stdin is the write end of the service's stdin.
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Stdout is the read end of the service's stdout. It reaches EOF once the
// service and everything it started are gone.
func (p *Process) Stdout() io.ReadCloser { return p.stdout }

// Pid is the pid of the direct child (the shim or bwrap for a sandboxed
// service).
func (p *Process) Pid() int { return p.pid }

// Done is closed when the process has exited and everything it started is
// killed and reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitCode is the exit status of the direct child, or 128+N when signal N
// killed it. It is valid once Done is closed.
func (p *Process) ExitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code
}

// Kill ends the process and everything it started, and returns when it is
// reaped.
func (p *Process) Kill() {
	p.killOnce.Do(func() {
		p.mu.Lock()
		if !p.exited {
			if p.stop != nil {
				p.stop(p.pid)
			} else {
				killGroup(p.pid, p.group)
			}
		}
		p.mu.Unlock()
	})
	select {
	case <-p.done:
		return
	case <-time.After(stopEscalation):
	}
	p.mu.Lock()
	if !p.exited {
		killGroup(p.pid, p.group)
	}
	p.mu.Unlock()
	<-p.done
}

// Close kills the process (see Kill) and closes the caller's pipe ends.
func (p *Process) Close() {
	p.Kill()
	p.closeOnce.Do(func() {
		p.stdin.Close()
		p.stdout.Close()
	})
}

// forwardLines reads r to EOF and passes each line to sink, bounded by
// MaxStderrLine per line and MaxStderrBytes in all; what is over is read
// and dropped, so the writer never blocks on a full pipe.
func forwardLines(r io.Reader, sink func(string)) {
	if sink == nil {
		_, _ = io.Copy(io.Discard, r)
		return
	}
	var (
		line   []byte
		cut    bool  // the current line was cut at MaxStderrLine
		passed int64 // bytes passed on so far
		capped bool  // MaxStderrBytes reached: drop the rest
	)
	emit := func() {
		defer func() { line, cut = line[:0], false }()
		if capped {
			return
		}
		passed += int64(len(line)) + 1
		if passed > MaxStderrBytes {
			capped = true
			sink(fmt.Sprintf("[stderr: %d bytes passed on; the rest of this process's stderr is dropped]", MaxStderrBytes))
			return
		}
		s := strings.TrimRight(string(line), "\r")
		if cut {
			s += " [line cut]"
		}
		sink(s)
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		chunk := buf[:n]
		for len(chunk) > 0 {
			i := bytes.IndexByte(chunk, '\n')
			part := chunk
			if i >= 0 {
				part = chunk[:i]
			}
			if room := MaxStderrLine - len(line); len(part) > room {
				line = append(line, part[:max(room, 0)]...)
				cut = true
			} else {
				line = append(line, part...)
			}
			if i < 0 {
				break
			}
			emit()
			chunk = chunk[i+1:]
		}
		if err != nil {
			if len(line) > 0 || cut {
				emit()
			}
			return
		}
	}
}

// DirectServices starts unsandboxed services (a registry entry with
// sandbox = false): execve of the path with Env plus the service's
// variables, in a process group of its own, tracked by a cgroup2 group
// where the host offers one and otherwise by the reap shim, and killed
// with everything it started when it is stopped, when it exits, or when
// toolgate dies.
//
// Security caveat: the service sees the host as toolgate does (files,
// network, toolgate's uid). Only the environment is scrubbed.
type DirectServices struct {
	// Cgroups is the host's cgroup support; without a cgroup2 part the
	// reap shim tracks the service instead.
	Cgroups *cgroup.Manager
	// Shim is the toolgate-shim binary (the reap shim).
	Shim string
}

// StartService starts s directly. s.Network and s.ReadOnly do not apply.
func (d *DirectServices) StartService(ctx context.Context, s Service) (*Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	if len(s.Argv) == 0 {
		return nil, fmt.Errorf("start %s: empty argv", s.Name)
	}
	if len(s.Egress) > 0 {
		// Unsandboxed, an allowlist would bound nothing.
		return nil, fmt.Errorf("start %s: an egress allowlist needs a sandbox: a direct service has the host's network", s.Name)
	}
	c := ServiceCmd{
		Proc:   Proc{Path: s.Path, Args: s.Argv, Env: ServiceEnv(s.Env), Dir: s.Dir},
		Stderr: s.Stderr,
	}
	if c.Dir == "" {
		c.Dir = "/"
	}
	if d.Cgroups != nil && d.Cgroups.V2 != "" {
		if g, err := d.Cgroups.NewGroup(s.ID, cgroup.Limits{}); err == nil {
			c.Group = g
			p, err := StartProcess(c)
			if err != nil {
				g.Close()
			}
			return p, err
		}
		// Tracking by the reap shim is as complete.
	}
	if d.Shim == "" {
		return nil, fmt.Errorf("start %s: no cgroup2 group and no reap shim to track it", s.Name)
	}
	spec := shim.Spec{Mode: shim.Reap, Path: s.Path, Argv: s.Argv}
	c.Path = d.Shim
	c.Args = append([]string{d.Shim}, spec.Args()...)
	c.Stop = func(pid int) { _ = syscall.Kill(pid, syscall.SIGTERM) }
	return StartProcess(c)
}

// ServiceEnv is the environment of a service: exactly Env, then extra.
func ServiceEnv(extra []string) []string {
	env := make([]string, 0, len(Env)+len(extra))
	env = append(env, Env...)
	return append(env, extra...)
}

// CheckServiceBind checks that a host path may be bound read-only into a
// service's sandbox: the sandbox policy's rule (bundle.CheckBind).
func CheckServiceBind(p string) error {
	return bundle.CheckBind(p)
}
