package runtime

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/toolgate/toolgate/runtime/shim"
)

// The shims themselves (what runs inside a sandbox, or between the server
// and bwrap) are package runtime/shim, which links nothing of this
// package: the server renders a shim.Spec into the shim's argv.

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
