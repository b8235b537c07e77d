package shim

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/runtime/cgroup"
)

// GuardSignal is the guard's parent-death signal, given when it is
// started (SysProcAttr.Pdeathsig) and set again by the guard itself: a
// signal whose default action is to be ignored, so that one that comes
// before the guard's handler is in place is lost harmlessly (the guard
// looks at its parent once the handler is in place), where a SIGKILL or
// SIGTERM would end the guard before it did its job.
const GuardSignal = syscall.SIGWINCH

// GuardReady is what the guard writes on its stdout once it is armed.
const GuardReady = "armed\n"

// guard waits for the server (s.Parent) to die, then kills every process
// in the server's cgroup directories (s.Cgroups) and removes them, and
// exits: what a server killed with SIGKILL leaves (a bwrap child still
// waiting for its parent's uid maps, which has no parent-death signal yet;
// a process that lost it; an OCI container left created when its hold
// shim died) dies a moment after the server, not at the next start's
// sweep. The server's death is the end of file of the --parent-fd pipe,
// whose other end only the server holds: the kernel closes it when the
// server exits, however it dies; the parent-death signal, held by the
// main thread (init says why), is a second way, and is acted on only once
// the guard's parent is no longer s.Parent (the signal is sent when the
// server's thread that started the guard ends, which is not always the
// server's death). Any other signal but SIGKILL is only a reason to look
// again: while the server lives, the guard kills nothing. It refuses
// (exit 127) a directory that is not named as one of the server's
// (cgroup.IsServerDir), and cgroup.KillServerDirs refuses one that is not
// on a cgroup filesystem: it never kills anything else.
func guard(s Spec) int {
	onMainThread("guard")
	for _, d := range s.Cgroups {
		if !cgroup.IsServerDir(d, s.Parent) {
			die(127, "guard: %s is not a cgroup directory of server %d", d, s.Parent)
		}
	}
	wake := make(chan os.Signal, 4)
	signal.Notify(wake, GuardSignal, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(GuardSignal), 0, 0, 0); err != nil {
		die(126, "guard: parent-death signal: %v", err)
	}
	// Armed: the server waits for this line before it starts a sandbox
	// (rt.StartGuard), so that none runs unguarded, and a signal sent to
	// the guard from now on finds its handler.
	if _, err := os.Stdout.WriteString(GuardReady); err != nil {
		die(126, "guard: tell the server it is armed: %v", err)
	}
	os.Stdout.Close()
	eof := make(chan struct{})
	go func() {
		// The server never writes: the read ends at its death.
		_, _ = io.Copy(io.Discard, os.NewFile(uintptr(s.ParentFD), "server"))
		close(eof)
	}()
wait:
	for os.Getppid() == s.Parent {
		select {
		case <-eof:
			break wait
		case <-wake:
		}
	}
	_, err := cgroup.KillServerDirs(s.Cgroups, s.Parent)
	if err != nil {
		fmt.Fprintf(os.Stderr, "toolgate: guard: %v\n", err)
		return 1
	}
	return 0
}
