//go:build seccomp

package bundle

import (
	"errors"

	cseccomp "github.com/containers/common/pkg/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// convertDefaultProfile converts the containers/common default profile for
// a process whose capability sets are all empty.
func convertDefaultProfile() (*specs.LinuxSeccomp, error) {
	noCaps := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{
		Bounding: []string{}, Effective: []string{}, Inheritable: []string{}, Permitted: []string{}, Ambient: []string{},
	}}}
	p, err := cseccomp.GetDefaultProfile(noCaps)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errors.New("containers/common returned no default profile")
	}
	return p, nil
}
