package runtime

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	procfs "github.com/toolgate/toolgate/internal/proc"
)

// Every process toolgate starts is started through startTracked, so that the
// reaper (active only when toolgate is PID 1, as in a container) can tell
// the children os/exec waits for from orphans reparented to it.
var (
	// startMu is held for reading by every start in progress and for
	// writing by the reaper, so that a started child is always tracked
	// before the reaper can look at it.
	startMu sync.RWMutex
	pidsMu  sync.Mutex
	pids    = map[int]struct{}{}
)

func startTracked(cmd *exec.Cmd) error {
	startMu.RLock()
	defer startMu.RUnlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	pidsMu.Lock()
	pids[cmd.Process.Pid] = struct{}{}
	pidsMu.Unlock()
	return nil
}

func untrack(pid int) {
	pidsMu.Lock()
	delete(pids, pid)
	pidsMu.Unlock()
}

// StartReaper makes toolgate reap orphans when it runs as PID 1 (the
// entrypoint of a container), where every orphaned process of every call is
// reparented to it. Outside PID 1 it does nothing: the host's init reaps.
// It returns when ctx is done.
func StartReaper(ctx context.Context) {
	if os.Getpid() != 1 {
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	go func() {
		defer signal.Stop(sig)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
			case <-tick.C:
			}
			reapOrphans()
		}
	}()
}

// reapOrphans reaps every exited child that os/exec is not waiting for.
func reapOrphans() {
	// Holding the write lock means no tracked start is half done: a child
	// that is not in pids now is an orphan.
	startMu.Lock()
	defer startMu.Unlock()
	for _, pid := range procfs.ChildPids() {
		pidsMu.Lock()
		_, ok := pids[pid]
		pidsMu.Unlock()
		if ok {
			continue
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}
