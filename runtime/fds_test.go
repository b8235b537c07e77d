package runtime

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSealInheritedFDs: a descriptor opened without close-on-exec (as one
// inherited from whatever started toolgate) has it afterwards.
func TestSealInheritedFDs(t *testing.T) {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC != 0 {
		t.Fatal("the test descriptor has close-on-exec already")
	}
	if err := SealInheritedFDs(); err != nil {
		t.Fatal(err)
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("fd %d flags %#x (%v): want close-on-exec", fd, flags, err)
	}
	for _, std := range []int{0, 1, 2} {
		if flags, _ := unix.FcntlInt(uintptr(std), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC != 0 {
			t.Errorf("fd %d got close-on-exec: stdin, stdout and stderr must stay as they are", std)
		}
	}
}
