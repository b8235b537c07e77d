//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// netns is a network namespace of the test's own, with only a loopback
// interface (up): what runs in it reaches 127.0.0.1 of the namespace and
// nothing else, so no packet it sends can leave the machine.
//
// It holds no name in /run/netns: the namespace lives while this handle,
// a socket or a process in it does, and is gone after Close and the
// processes started in it.
type netns struct {
	f *os.File
}

// newNetns creates the namespace (it needs CAP_SYS_ADMIN: root) and closes
// it when the test ends.
func newNetns(t *testing.T) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		missingDep(t, "a network namespace of the test's own needs root (uid %d)", os.Geteuid())
	}
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, now in the new namespace, ends with
		// this goroutine and no other goroutine ever runs on it.
		goruntime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("unshare(CLONE_NEWNET): %w", err)}
			return
		}
		if err := loopbackUp(); err != nil {
			ch <- result{err: err}
			return
		}
		f, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		ch <- result{f, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("network namespace: %v", r.err)
	}
	n := &netns{f: r.f}
	t.Cleanup(func() { n.f.Close() })
	return n
}

// loopbackUp sets IFF_UP on lo of the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS lo up: %w", err)
	}
	return nil
}

// do runs fn on a thread that joined the namespace. What fn opens there (a
// listening socket) stays in the namespace; a process fn starts (fork and
// exec happen on the calling thread) is born in it.
func (n *netns) do(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		// Never unlocked: see newNetns.
		goruntime.LockOSThread()
		if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- fmt.Errorf("setns: %w", err)
			return
		}
		ch <- fn()
	}()
	return <-ch
}

// listen opens a TCP listener on 127.0.0.1:0 inside the namespace.
func (n *netns) listen(t *testing.T) net.Listener {
	t.Helper()
	var l net.Listener
	err := n.do(func() (err error) {
		l, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	})
	if err != nil {
		t.Fatalf("listen in the test's network namespace: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// start starts cmd inside the namespace.
func (n *netns) start(cmd *exec.Cmd) error {
	return n.do(cmd.Start)
}

// interfaces lists the namespace's network interfaces (by name).
func (n *netns) interfaces() ([]string, error) {
	var names []string
	err := n.do(func() error {
		ifs, err := net.Interfaces()
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		return err
	})
	return names, err
}
