package runtime

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/toolgate/toolgate/runtime/shim"
)

// The shims themselves (what runs inside a sandbox, or between the server
// and bwrap) are package runtime/shim, which links nothing of this
// package; these names are the server's side of them.
type (
	// ShimSpec is shim.Spec.
	ShimSpec = shim.Spec
	// Rlimit is shim.Rlimit.
	Rlimit = shim.Rlimit
)

// The shim's argument and modes (shim.Arg, shim.Reap...).
const (
	ShimArg     = shim.Arg
	ShimReap    = shim.Reap
	ShimEnter   = shim.Enter
	ShimInit    = shim.Init
	ShimService = shim.Service
	ShimStandby = shim.Standby
	ShimHold    = shim.Hold
	ShimMask    = shim.Mask
)

// The release channel's bytes (shim.ReadyByte, shim.GoByte).
const (
	ReadyByte = shim.ReadyByte
	GoByte    = shim.GoByte
)

// MaybeShim is shim.MaybeShim: it runs a shim and never returns when
// os.Args name one. TestMain of packages that run tools calls it.
func MaybeShim() { shim.MaybeShim() }

// ShimName is the file name of the shim binary, installed next to toolgate.
const ShimName = "toolgate-shim"

// FindShim returns the shim binary next to the running executable: the
// toolgate-shim that was built and installed with it.
func FindShim() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate the toolgate binary: %w", err)
	}
	self, err = filepath.EvalSymlinks(self)
	if err != nil {
		return "", fmt.Errorf("locate the toolgate binary: %w", err)
	}
	p := filepath.Join(filepath.Dir(self), ShimName)
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%s must be installed next to %s (build both: go build ./cmd/toolgate ./cmd/toolgate-shim): %w", ShimName, self, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", p)
	}
	return p, nil
}
