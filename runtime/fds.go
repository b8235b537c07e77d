package runtime

import (
	"fmt"

	"golang.org/x/sys/unix"

	procfs "github.com/toolgate/toolgate/internal/proc"
)

// SealInheritedFDs marks every descriptor above 2 close-on-exec. Whatever
// started toolgate may have left descriptors open (fd 9 of a shell, a
// supervisor's log file); os/exec passes on only stdin, stdout, stderr and
// ExtraFiles, but a descriptor without close-on-exec would still reach
// every process toolgate starts, sandboxes included. Call it first thing in
// main, before anything is started; it returns an error only when neither
// close_range(2) nor a walk of /proc/self/fd could do it.
func SealInheritedFDs() error {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	fds, err := procfs.FDs()
	if err != nil {
		return fmt.Errorf("seal inherited descriptors: %w", err)
	}
	for _, fd := range fds {
		if fd <= 2 {
			continue
		}
		// The directory's own descriptor is closed by now: EBADF.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return fmt.Errorf("seal inherited descriptor %d: %w", fd, err)
		}
	}
	return nil
}
