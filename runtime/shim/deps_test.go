package shim

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testbin"
)

// TestShimLinksNothingOfTheServer: the toolgate-shim binary, which starts
// on every sandboxed call, links only this package's own imports: nothing
// of the server's side (package runtime, the egress proxy, the HTTP
// stack), whose package initialisation would be paid on every start
// (issue 22). It may link runtime/cgroup, which imports nothing of
// toolgate: the guard mode kills with it.
func TestShimLinksNothingOfTheServer(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		testbin.Missing(t, "no go command to list the shim's dependencies: %v", err)
	}
	cmd := exec.Command(gobin, "list", "-deps", "github.com/toolgate/toolgate/cmd/toolgate-shim")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	// The shim's own side of runtime/: itself, and the cgroup package
	// (which imports nothing of toolgate) that the guard kills with.
	ownSide := []string{"github.com/toolgate/toolgate/runtime/shim", "github.com/toolgate/toolgate/runtime/cgroup"}
	deps := strings.FieldsSeq(string(out))
	for dep := range deps {
		for _, bad := range []string{
			"github.com/toolgate/toolgate/runtime", // the server's side of the shims
			"github.com/toolgate/toolgate/egress",
			"github.com/toolgate/toolgate/server",
			"github.com/toolgate/toolgate/conf",
			"github.com/elazarl/goproxy",
			"golang.org/x/net/",
			"net/http",
		} {
			if dep == bad || strings.HasPrefix(dep, strings.TrimSuffix(bad, "/")+"/") && !slices.Contains(ownSide, dep) {
				t.Errorf("toolgate-shim links %s (under %s: the server's side)", dep, bad)
			}
		}
	}
	for _, want := range []string{"github.com/toolgate/toolgate/runtime/shim", "golang.org/x/sys/unix"} {
		if !strings.Contains("\n"+string(out), "\n"+want+"\n") {
			t.Errorf("toolgate-shim's dependencies lack %s, so this check lists the wrong thing:\n%s", want, out)
		}
	}
}
