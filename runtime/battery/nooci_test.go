//go:build !seccomp

package battery

import (
	"testing"

	rt "github.com/toolgate/toolgate/runtime"
)

// ociBackends: without the seccomp build tag the OCI backend refuses to
// start (its seccomp profile is required), so the battery runs bwrap only.
func ociBackends(_ *testing.T, _ *rt.Cgroups) []backend {
	return []backend{unavailable("oci", "built without the seccomp tag (go test -tags seccomp)")}
}
