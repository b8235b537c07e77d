package runtime

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The release channel of a prepared sandbox (a Standby) is one
// SOCK_SEQPACKET socketpair per sandbox, made when it is prepared: the
// server keeps one end, the sandbox's waiting shim gets the other (the
// standby shim inside a bwrap sandbox; the hold shim beside an OCI
// container). The protocol is three messages at most, each one byte:
//
//   - the shim writes ReadyByte once the sandbox is fully prepared and
//     waits (namespaces, mounts, limits, cgroups: all done, no tool code
//     running), with a descriptor of the sandbox's mount namespace: the
//     server holds it until the call is over, so that the namespace's
//     teardown (an RCU grace period per unmount batch, several ms on a
//     loaded VM) happens after the call's answer, not before;
//   - the server writes GoByte to release it; for the standby shim the
//     message carries, by SCM_RIGHTS, exactly three descriptors: the
//     call's stdin, stdout and stderr, which the shim makes its own 0, 1
//     and 2 before it execs the tool;
//   - or the server closes its end without writing: the sandbox is
//     discarded, and the shim exits without running anything.
//
// The message carries no path and no argument: what a prepared sandbox
// runs is fixed when it is prepared (the shim's own argv), so a release can
// never make the sandbox of one tool run another. Each socketpair joins
// one sandbox to the server and nothing else, and the shim closes its end
// before it execs: no tool ever holds a release channel, its own or
// another sandbox's.
const (
	ReadyByte = 'R'
	GoByte    = 'G'
)

// releaseStreams is the number of descriptors a release passes: stdin,
// stdout, stderr.
const releaseStreams = 3

// releasePair returns the two ends of a new release channel, both
// close-on-exec: the server's, and the one to hand the sandbox (as an
// ExtraFile, which os/exec passes without close-on-exec).
func releasePair() (server, sandbox *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("release channel: %w", err)
	}
	// The server's end goes through the runtime's poller: an idle
	// prepared sandbox holds no thread of the server.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		closeAll(fds[:])
		return nil, nil, fmt.Errorf("release channel: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "release"), os.NewFile(uintptr(fds[1]), "release-sandbox"), nil
}

// sendRelease writes the release message on the server's end, with the
// streams when given (nil: the streams were made at preparation).
func sendRelease(ctl *os.File, streams []*os.File) error {
	rc, err := ctl.SyscallConn()
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	var oob []byte
	if streams != nil {
		if len(streams) != releaseStreams {
			return fmt.Errorf("release: %d streams, want %d", len(streams), releaseStreams)
		}
		fds := make([]int, len(streams))
		for i, f := range streams {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), []byte{GoByte}, oob, nil, 0)
		return !errors.Is(serr, unix.EAGAIN)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// errDiscarded is what the shim's wait returns when the server closed the
// release channel without releasing the sandbox.
var errDiscarded = errors.New("discarded before release")

// awaitRelease is the shim's side: it blocks on fd until the release
// message arrives and returns the descriptors it carried (want of them,
// exactly; 0 for none). Anything else (more bytes, another byte, a
// truncated message, a descriptor count other than want) is an error: the
// shim then runs nothing.
func awaitRelease(fd, want int) ([]int, error) {
	buf := make([]byte, 8)
	oob := make([]byte, unix.CmsgSpace(4*(releaseStreams+1)))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("release channel: %w", err)
		}
		var fds []int
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return nil, fmt.Errorf("release message: %w", err)
			}
			for _, m := range msgs {
				got, err := unix.ParseUnixRights(&m)
				if err != nil {
					closeAll(fds)
					return nil, fmt.Errorf("release message: %w", err)
				}
				fds = append(fds, got...)
			}
		}
		switch {
		case n == 0 && oobn == 0:
			return nil, errDiscarded
		case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n != 1 || buf[0] != GoByte || len(fds) != want:
			closeAll(fds)
			return nil, fmt.Errorf("release message refused: %d bytes, flags %#x, %d descriptors (want the go byte and %d)", n, flags, len(fds), want)
		}
		return fds, nil
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// signalReady writes ReadyByte on fd (the shim's end), with the mount
// namespace of the process pid (0: the shim's own) when it can be opened.
func signalReady(fd, pid int) error {
	ns := "/proc/self/ns/mnt"
	if pid > 0 {
		ns = fmt.Sprintf("/proc/%d/ns/mnt", pid)
	}
	var oob []byte
	if nsfd, err := unix.Open(ns, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		defer unix.Close(nsfd)
		oob = unix.UnixRights(nsfd)
	}
	for {
		err := unix.Sendmsg(fd, []byte{ReadyByte}, oob, nil, 0)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// readReady reads the ready message on the server's end: whether it came,
// and the namespace descriptor it carried (nil when none).
func readReady(ctl *os.File) (bool, *os.File) {
	rc, err := ctl.SyscallConn()
	if err != nil {
		return false, nil
	}
	buf := make([]byte, 8)
	oob := make([]byte, unix.CmsgSpace(4*2))
	var n, oobn, flags int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return !errors.Is(rerr, unix.EAGAIN)
	})
	if err != nil || rerr != nil {
		return false, nil
	}
	var fds []int
	if oobn > 0 {
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if got, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	if n != 1 || buf[0] != ReadyByte || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || len(fds) > 1 {
		closeAll(fds)
		return false, nil
	}
	if len(fds) == 1 {
		return true, os.NewFile(uintptr(fds[0]), "sandbox-mntns")
	}
	return true, nil
}
