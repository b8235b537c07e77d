//go:build seccomp

package battery

import (
	"context"
	"os"
	"testing"

	"github.com/toolgate/toolgate/internal/testbin"
	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/oci"
)

// ociBackends returns every OCI runtime that runs here, each with the
// battery's limits.
func ociBackends(t *testing.T, _ *cgroup.Manager) []backend {
	t.Helper()
	var out []backend
	for _, name := range oci.KnownRuntimes() {
		r, err := oci.New(context.Background(), oci.Config{
			Runtime: name, Shim: testbin.Shim(t), RunDir: runDir(t), Limits: testLimits(),
		})
		if err != nil {
			out = append(out, unavailable("oci/"+string(name), "%v", err))
			continue
		}
		t.Cleanup(func() { r.Close() })
		out = append(out, backend{name: "oci/" + string(name), run: r, limits: testLimits()})
	}
	return out
}

func runDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "toolgate-battery-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
