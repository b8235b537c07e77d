package shim

import (
	"errors"
	"fmt"

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

// Streams is the number of descriptors a release passes: stdin, stdout,
// stderr.
const Streams = 3

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
	oob := make([]byte, unix.CmsgSpace(4*(Streams+1)))
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
