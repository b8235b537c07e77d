package runtime

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/runtime/shim"
)

// The server's side of the release channel of a prepared sandbox (a
// Standby): the protocol, and the shim's side, are in runtime/shim
// (release.go).

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
	return send(ctl, []byte{shim.GoByte}, streams)
}

// send writes msg on the server's end, with the streams when given.
func send(ctl *os.File, msg []byte, streams []*os.File) error {
	rc, err := ctl.SyscallConn()
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	var oob []byte
	if streams != nil {
		if len(streams) != shim.Streams && len(streams) != shim.Streams+1 {
			return fmt.Errorf("release: %d descriptors, want %d (and an egress socket)", len(streams), shim.Streams)
		}
		fds := make([]int, len(streams))
		for i, f := range streams {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), msg, oob, nil, 0)
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

// sendCommand writes a helper session's command on the server's end: the
// argv (checked by the caller) and its three streams.
func sendCommand(ctl *os.File, argv []string, streams []*os.File) error {
	msg := append([]byte{shim.CommandByte}, strings.Join(argv, "\x00")...)
	if len(msg)-1 > shim.MaxCommandBytes {
		return fmt.Errorf("command: %d bytes of argv, at most %d", len(msg)-1, shim.MaxCommandBytes)
	}
	return send(ctl, msg, streams)
}

// readStatus reads a session command's status on the server's end: its
// exit code, or false when the channel ended (or said something else)
// first.
func readStatus(ctl *os.File) (int, bool) {
	rc, err := ctl.SyscallConn()
	if err != nil {
		return 0, false
	}
	buf := make([]byte, 8)
	var n, flags int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, flags, _, rerr = unix.Recvmsg(int(fd), buf, nil, 0)
		return !errors.Is(rerr, unix.EAGAIN)
	})
	if err != nil || rerr != nil || n != 2 || buf[0] != shim.StatusByte || flags&unix.MSG_TRUNC != 0 {
		return 0, false
	}
	return int(buf[1]), true
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
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
	if n != 1 || buf[0] != shim.ReadyByte || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || len(fds) > 1 {
		closeAll(fds)
		return false, nil
	}
	if len(fds) == 1 {
		return true, os.NewFile(uintptr(fds[0]), "sandbox-mntns")
	}
	return true, nil
}
