//go:build !seccomp

package bundle

import (
	"errors"
	"testing"
)

const haveSeccomp = false

// Without the seccomp build tag, asking for seccomp is an error, never a
// spec without a filter.
func TestSeccompWithoutTagIsAnError(t *testing.T) {
	p := testPolicy()
	p.Seccomp = true
	s, err := Spec(testTool(), p)
	if !errors.Is(err, ErrNoSeccomp) || s != nil {
		t.Fatalf("Spec(seccomp) = %v, %v; want nil, ErrNoSeccomp", s, err)
	}
	if _, err := DefaultSeccomp(); !errors.Is(err, ErrNoSeccomp) {
		t.Errorf("DefaultSeccomp() = %v, want ErrNoSeccomp", err)
	}
}
