package runtime

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/runtime/shim"
)

// Guard is the server's guard: the shim in guard mode (shim.Guard),
// started once, which kills everything left in the server's cgroup
// directories a moment after the server dies, however it dies. A server
// killed with SIGKILL takes its sandboxes with it through their
// parent-death signals, but a process can be without one: bubblewrap's
// child has none until just before it execs the shim, and blocks for
// ever when bwrap dies before it has written the uid maps; an OCI
// container waits in the runtime's init, left created, when its hold shim
// dies. The guard's job is those; it costs a call nothing.
type Guard struct {
	cmd    *exec.Cmd
	server *os.File // the server's end of the pipe: its end of file is the server's death
	done   chan struct{}
	err    error // the guard's exit, once done is closed
}

// guardWait bounds Close's wait for the guard to finish.
const guardWait = 5 * time.Second

// StartGuard starts the guard of dirs, the server's cgroup directories
// (cgroup.Manager.ServerDirs), with shimPath (the toolgate-shim binary);
// its diagnostics go to stderr. With no dirs there is nothing to guard:
// it returns nil, which Close and Done accept.
func StartGuard(shimPath string, dirs []string, stderr *os.File) (*Guard, error) {
	if len(dirs) == 0 {
		return nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	spec := shim.Spec{Mode: shim.Guard, Cgroups: dirs, Parent: os.Getpid(), ParentFD: 3}
	p := Proc{
		Path: shimPath,
		Args: append([]string{shimPath}, spec.Args()...),
		Env:  []string{},
		Dir:  "/",
		// Not processAttr's SIGKILL: the guard's job starts at the
		// server's death.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: shim.GuardSignal},
		ExtraFiles:  []*os.File{r},
	}
	ready, armed, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("guard: %w", err)
	}
	defer ready.Close()
	cmd, err := p.start(nil, armed, stderr)
	r.Close()
	armed.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("guard: %w", err)
	}
	g := &Guard{cmd: cmd, server: w, done: make(chan struct{})}
	go func() {
		g.err = cmd.Wait()
		untrack(cmd.Process.Pid)
		close(g.done)
	}()
	// No sandbox starts before the guard is armed.
	_ = ready.SetReadDeadline(time.Now().Add(guardArmTimeout))
	line := make([]byte, len(shim.GuardReady))
	_, err = io.ReadFull(ready, line)
	if err == nil && string(line) != shim.GuardReady {
		err = fmt.Errorf("it said %q", line)
	}
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("guard: not armed within %s: %w", guardArmTimeout, errors.Join(err, g.Err()))
	}
	return g, nil
}

// guardArmTimeout bounds the wait for the guard's first line.
const guardArmTimeout = 10 * time.Second

// Done is closed when the guard has exited: before Close, the server runs
// unguarded from then on (Err says why).
func (g *Guard) Done() <-chan struct{} {
	if g == nil {
		return nil
	}
	return g.done
}

// Err is how the guard exited, once Done is closed.
func (g *Guard) Err() error {
	if g == nil {
		return nil
	}
	select {
	case <-g.done:
		return g.err
	default:
		return nil
	}
}

// Close ends the guard as the server's death would: it kills what is
// left in the directories (nothing, once the server has closed its
// sandboxes and cgroups, which it does first) and exits; Close waits for
// it, bounded.
func (g *Guard) Close() error {
	if g == nil {
		return nil
	}
	g.server.Close()
	select {
	case <-g.done:
	case <-time.After(guardWait):
		_ = g.cmd.Process.Kill()
		<-g.done
		return errors.New("guard: did not finish in time")
	}
	if g.err != nil {
		return fmt.Errorf("guard: %w", g.err)
	}
	return nil
}
