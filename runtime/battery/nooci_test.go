//go:build !seccomp

package battery

import (
	"testing"

	"github.com/toolgate/toolgate/runtime/cgroup"
)

// ociBackends: without the seccomp build tag the OCI backend refuses to
// start (its seccomp profile is required), so the battery runs bwrap only.
func ociBackends(_ *testing.T, _ *cgroup.Manager) []backend {
	return []backend{unavailable("oci", "built without the seccomp tag (go test -tags seccomp)")}
}
