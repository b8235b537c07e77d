//go:build seccomp

package bundle

import (
	"fmt"
	"io"
	"os"

	cseccomp "github.com/containers/common/pkg/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// compileBPF compiles p with libseccomp into the classic BPF program the
// kernel loads (what bwrap --seccomp reads from a descriptor).
func compileBPF(p *specs.LinuxSeccomp) ([]byte, error) {
	filter, err := cseccomp.BuildFilter(p)
	if err != nil {
		return nil, err
	}
	defer filter.Release()
	fd, err := unix.MemfdCreate("toolgate-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "toolgate-seccomp")
	defer f.Close()
	if err := filter.ExportBPF(f); err != nil {
		return nil, fmt.Errorf("export BPF: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}
