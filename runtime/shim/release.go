package shim

import (
	"errors"
	"fmt"
	"strings"

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
//
// A helper session (the session shim: a built-in's git over the
// workspace, rt.Session) is the one sandbox that takes an argv, and only
// in this form: after its ready message, each release is a command,
// CommandByte then the argv's words joined by NUL bytes (at most
// MaxCommandBytes in all) with the command's three streams; the shim
// checks it against the shape it was prepared with (CheckCommand), runs
// it, ends whatever it left, and answers StatusByte and the exit status
// (one byte); then it waits for the next command, or the channel's close.
// The argv comes from the server alone, which checks it too: nothing in a
// sandbox holds the channel.
const (
	ReadyByte   = 'R'
	GoByte      = 'G'
	CommandByte = 'C'
	StatusByte  = 'X'
)

// MaxCommandBytes bounds a session command's message: the argv's words
// and their separators.
const MaxCommandBytes = 64 << 10

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
		fds, err := rights(oob[:oobn])
		if err != nil {
			return nil, err
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

// awaitCommand is a session shim's wait for its next command: the argv
// and the three descriptors of its streams. A channel closed without one
// is errDiscarded; any other message is an error.
func awaitCommand(fd int) ([]string, []int, error) {
	buf := make([]byte, MaxCommandBytes+2)
	oob := make([]byte, unix.CmsgSpace(4*(Streams+1)))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("release channel: %w", err)
		}
		fds, err := rights(oob[:oobn])
		if err != nil {
			return nil, nil, err
		}
		switch {
		case n == 0 && oobn == 0:
			return nil, nil, errDiscarded
		case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n < 2 || n > MaxCommandBytes+1 || buf[0] != CommandByte || len(fds) != Streams:
			closeAll(fds)
			return nil, nil, fmt.Errorf("command message refused: %d bytes, flags %#x, %d descriptors (want the command byte, an argv and %d)", n, flags, len(fds), Streams)
		}
		return strings.Split(string(buf[1:n]), "\x00"), fds, nil
	}
}

// rights returns the descriptors an SCM_RIGHTS control message carried.
func rights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("release message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("release message: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// sendStatus answers a session command with its exit status.
func sendStatus(fd, code int) error {
	if code < 0 || code > 255 {
		code = 255
	}
	for {
		err := unix.Sendmsg(fd, []byte{StatusByte, byte(code)}, nil, nil, 0)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
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
