//go:build e2e

package e2e

import (
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/mcptest"
)

// helmVersion is scripts/lib.sh's pin of Helm.
var helmVersion = regexp.MustCompile(`(?m)^helm_version=(v[0-9]+\.[0-9]+\.[0-9]+)$`)

// pinnedHelm is the Helm that scripts/lib.sh's helm_bin builds
// (TOOLGATE_HELM overrides the path); without it the test skips, and
// fails under TOOLGATE_REQUIRE_ALL=1.
func pinnedHelm(t *testing.T) string {
	t.Helper()
	lib, err := os.ReadFile("../scripts/lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := helmVersion.FindSubmatch(lib)
	if m == nil {
		t.Fatal("scripts/lib.sh has no helm_version=vX.Y.Z line")
	}
	bin := os.Getenv("TOOLGATE_HELM")
	if bin == "" {
		bin = filepath.Join(build.Default.GOPATH, "bin", "helm-"+string(m[1]))
	}
	if _, err := os.Stat(bin); err != nil {
		missingDep(t, "no Helm %s at %s (bash -c '. scripts/lib.sh && helm_bin' builds it)", m[1], bin)
	}
	return bin
}

// TestClusterHelm: the chart installed with the pinned Helm on the local
// cluster (one replica, in a namespace of its own, beside the Secret and
// the seccomp profile docs/kubernetes.md asks for) serves MCP through its
// Service with the operator's token, its ConfigMap trusted, its sandboxed
// tool run; `helm upgrade` to another replica count rolls out too.
func TestClusterHelm(t *testing.T) {
	k := needCluster(t)
	helm := pinnedHelm(t)
	token := k.prepare(t)
	// Gone before the next cluster test starts: its pods' preStop sleep
	// and drain would share the node with that test's rollouts.
	t.Cleanup(func() {
		nk := *k
		nk.ns = ""
		if out, err := nk.run("delete", "namespace", k.ns, "--timeout=120s"); err != nil {
			t.Logf("delete namespace %s: %v %s", k.ns, err, out)
		}
	})
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(helm, append(args, "--namespace", k.ns)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	start := time.Now()
	run("install", "toolgate", "../deploy/helm/toolgate", "--set", "replicas=1")
	figure(t, "helm install to 1 ready replica: %.1f s", k.rolledOut(t, start, 1).Seconds())
	hc, _ := k.serviceClient(t)
	c := mcptest.Connect(t, "http://toolgate:8080/mcp", mcptest.Options{Token: token, HTTP: hc, Name: "toolgate-e2e-helm", Timeout: 30 * time.Second})
	if got := names(t, c); !slices.Contains(got, "git_status") {
		t.Errorf("tools/list of the chart's release = %v, want git_status", got)
	}
	if res, err := call1(c, "git_status"); err != nil || !strings.Contains(text(res), "not a git repository") {
		t.Errorf("git_status (sandboxed) through the chart's Service: %v %q", err, text(res))
	}
	if st := confState(t, c); st != "loaded" {
		t.Errorf("checkpoint_status conf.state = %q, want loaded", st)
	}
	run("upgrade", "toolgate", "../deploy/helm/toolgate", "--set", "replicas=2")
	k.rolledOut(t, time.Now(), 2)
}
