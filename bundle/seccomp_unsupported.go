//go:build !seccomp

package bundle

import specs "github.com/opencontainers/runtime-spec/specs-go"

func convertDefaultProfile() (*specs.LinuxSeccomp, error) {
	return nil, ErrNoSeccomp
}

func compileBPF(*specs.LinuxSeccomp) ([]byte, error) {
	return nil, ErrNoSeccomp
}
