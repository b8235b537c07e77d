//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/internal/mcptest"
)

// The Kubernetes workload of deploy/kubernetes on a real single-node
// cluster (scripts/k8s-local.sh up: kube-apiserver, kubelet and the rest
// at v1.37.2, containerd v2, runc, all on 127.0.0.1), applied unchanged
// with the operator's Secret made by docs/kubernetes.md's own command and
// the seccomp profile installed on the node where the docs say. The test
// reaches the pods as a client of the Service does (its ClusterIP, by
// kube-proxy's rules on the node) and each pod by its IP; nothing leaves
// the machine.
//
// The cluster is found from the environment `scripts/k8s-local.sh env`
// prints (scripts/e2e.sh exports it): KUBECONFIG, TOOLGATE_K8S_BIN (the
// kubectl and ctr of the cluster) and TOOLGATE_K8S_ROOT (the kubelet's
// root, for the seccomp profile, and containerd's socket). Without a
// cluster the test skips, and fails under TOOLGATE_REQUIRE_ALL=1.

// kube is one namespace of the local cluster.
type kube struct {
	bin, root, ns string
}

// needCluster returns the local cluster, or skips (fails under
// TOOLGATE_REQUIRE_ALL=1) when there is none.
func needCluster(t *testing.T) *kube {
	t.Helper()
	onlyImage(t)
	bin, root := os.Getenv("TOOLGATE_K8S_BIN"), os.Getenv("TOOLGATE_K8S_ROOT")
	if bin == "" || root == "" || os.Getenv("KUBECONFIG") == "" {
		missingDep(t, "no local cluster: KUBECONFIG, TOOLGATE_K8S_BIN and TOOLGATE_K8S_ROOT unset (scripts/e2e.sh runs scripts/k8s-local.sh up and exports them)")
	}
	k := &kube{bin: bin, root: root}
	out, err := k.run("get", "node", "localhost", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	if err != nil || out != "True" {
		missingDep(t, "the local cluster's node is not ready (%q, %v): scripts/k8s-local.sh status", out, err)
	}
	return k
}

// run runs kubectl (in k's namespace when it has one) and returns its
// stdout, trimmed.
func (k *kube) run(args ...string) (string, error) {
	if k.ns != "" {
		args = append([]string{"-n", k.ns}, args...)
	}
	cmd := exec.Command(filepath.Join(k.bin, "kubectl"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return strings.TrimSpace(string(out)), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// must is run for a step that cannot fail.
func (k *kube) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := k.run(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubePod is one pod of the Deployment.
type kubePod struct {
	Name, IP, UID string
	Ready         bool
}

// pods lists the Deployment's pods that are not terminating.
func (k *kube) pods(t *testing.T) []kubePod {
	t.Helper()
	out := k.must(t, "get", "pods", "-l", "app.kubernetes.io/name=toolgate", "-o", "json")
	var list struct {
		Items []struct {
			Metadata struct {
				Name              string  `json:"name"`
				UID               string  `json:"uid"`
				DeletionTimestamp *string `json:"deletionTimestamp"`
			} `json:"metadata"`
			Status struct {
				PodIP      string `json:"podIP"`
				Conditions []struct {
					Type, Status string
				} `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	var pods []kubePod
	for _, it := range list.Items {
		if it.Metadata.DeletionTimestamp != nil {
			continue
		}
		p := kubePod{Name: it.Metadata.Name, IP: it.Status.PodIP, UID: it.Metadata.UID}
		for _, c := range it.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				p.Ready = true
			}
		}
		pods = append(pods, p)
	}
	return pods
}

// deployWorkload applies deploy/kubernetes unchanged to a fresh
// namespace, with the Secret docs/kubernetes.md makes and the seccomp
// profile on the node, and waits for the rollout. It returns the token and
// how long kubectl apply took to two ready replicas.
func deployWorkload(t *testing.T, k *kube) (string, time.Duration) {
	t.Helper()
	token := k.prepare(t)
	start := time.Now()
	k.must(t, "apply", "-f", "../deploy/kubernetes/")
	return token, k.rolledOut(t, start, 2)
}

// prepare makes k a fresh namespace, removed when the test ends, with
// what the workload needs beside its objects: the image, the seccomp
// profile on the node and the operator's Secret (docs/kubernetes.md). It
// returns the Secret's token.
func (k *kube) prepare(t *testing.T) string {
	t.Helper()
	k.ns = fmt.Sprintf("toolgate-e2e-%06x", rand.Uint32()>>8)
	ns := k.ns
	k.ns = ""
	// What an interrupted run left (its pods would hold the node's CPU).
	k.must(t, "delete", "namespace", "-l", "toolgate-k8s-test=1", "--timeout=90s")
	k.must(t, "create", "namespace", ns)
	k.must(t, "label", "namespace", ns, "toolgate-k8s-test=1")
	k.ns = ns
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := k.run("get", "pods,events", "-o", "wide")
			t.Logf("namespace %s at the failure:\n%s", ns, out)
			for _, p := range k.podsNoFail() {
				logs, _ := k.run("logs", p, "--tail=30")
				t.Logf("logs of %s:\n%s", p, logs)
			}
		}
		nk := *k
		nk.ns = ""
		nk.run("delete", "namespace", ns, "--wait=false")
	})
	// The image under test, where the Deployment names it.
	k.importImage(t, image, "localhost/toolgate:dev")
	// The seccomp profile where the Localhost profile names it: the
	// kubelet's seccomp root (docs/kubernetes.md: /var/lib/kubelet/seccomp
	// on a node with the default root).
	prof, err := os.ReadFile(seccompProfile)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(k.root, "kubelet", "seccomp")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "toolgate-seccomp.json"), prof, 0o644); err != nil {
		t.Fatal(err)
	}
	// The Secret, by docs/kubernetes.md's command with this kubectl.
	token, name, data := readmeKubeSecret(t)
	args := []string{"create", "secret", "generic", name}
	for key, v := range data {
		args = append(args, "--from-literal="+key+"="+v)
	}
	k.must(t, args...)
	return token
}

// rolledOut waits for the Deployment's rollout to n ready replicas and
// for the Service to answer on its ClusterIP; it returns the time from
// start to the rollout's end.
func (k *kube) rolledOut(t *testing.T, start time.Time, n int) time.Duration {
	t.Helper()
	if _, err := k.run("rollout", "status", "deployment/toolgate", "--timeout=180s"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if pods := k.pods(t); len(pods) != n {
		t.Fatalf("%d pods after the rollout, want %d", len(pods), n)
	}
	// kube-proxy programs the Service a moment after the endpoints are
	// ready (until then its rules refuse the connection).
	ip := k.must(t, "get", "service", "toolgate", "-o", "jsonpath={.spec.clusterIP}")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "8080"), time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Service's ClusterIP %s:8080: %v", ip, err)
		}
	}
	return took
}

func (k *kube) podsNoFail() []string {
	out, _ := k.run("get", "pods", "-o", "jsonpath={.items[*].metadata.name}")
	return strings.Fields(out)
}

// importImage imports podman's image src into the cluster's containerd
// as dst.
func (k *kube) importImage(t *testing.T, src, dst string) {
	t.Helper()
	ctr := []string{"-a", filepath.Join(k.root, "run", "containerd", "containerd.sock"), "-n", "k8s.io"}
	save := exec.Command(podman, "save", "--format", "docker-archive", src)
	imp := exec.Command(filepath.Join(k.bin, "ctr"), append(ctr, "images", "import", "-")...)
	pipe, err := save.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	imp.Stdin = pipe
	var e1, e2 bytes.Buffer
	save.Stderr, imp.Stderr = &e1, &e2
	if err := save.Start(); err != nil {
		t.Fatal(err)
	}
	if out, err := imp.Output(); err != nil {
		t.Fatalf("ctr images import: %v\n%s%s", err, out, e2.String())
	}
	if err := save.Wait(); err != nil {
		t.Fatalf("podman save %s: %v\n%s", src, err, e1.String())
	}
	if src != dst {
		if out, err := exec.Command(filepath.Join(k.bin, "ctr"), append(ctr, "images", "tag", "--force", src, dst)...).CombinedOutput(); err != nil {
			t.Fatalf("ctr images tag: %v\n%s", err, out)
		}
	}
}

// serviceClient is an HTTP client that reaches the Service by its name
// (http://toolgate:8080, the name the Deployment's --allow-host gives) at
// its ClusterIP, as a client pod's DNS would resolve it.
func (k *kube) serviceClient(t *testing.T) (*http.Client, string) {
	t.Helper()
	ip := k.must(t, "get", "service", "toolgate", "-o", "jsonpath={.spec.clusterIP}")
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == "toolgate:8080" {
			addr = net.JoinHostPort(ip, "8080")
		}
		return d.DialContext(ctx, network, addr)
	}, MaxIdleConnsPerHost: 64}
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}, ip
}

// figure logs one measured figure, and appends it to the file
// $TOOLGATE_K8S_FIGURES when set (scripts/e2e.sh prints it: go test shows
// no log of a test that passed).
func figure(t *testing.T, format string, a ...any) {
	t.Helper()
	line := fmt.Sprintf(format, a...)
	t.Log("figure: " + line)
	if path := os.Getenv("TOOLGATE_K8S_FIGURES"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		fmt.Fprintln(f, line)
	}
}

// callArgs calls tool name with args.
func callArgs(c *client.Client, name string, args map[string]any) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	return c.CallTool(ctx, req)
}

// confState is checkpoint_status's conf.state.
func confState(t *testing.T, c *client.Client) string {
	t.Helper()
	res, err := call1(c, "checkpoint_status")
	if err != nil || res.IsError {
		t.Fatalf("checkpoint_status: %v %s", err, text(res))
	}
	var st struct {
		Conf struct {
			State string `json:"state"`
		} `json:"conf"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("checkpoint_status structuredContent %s: %v", b, err)
	}
	return st.Conf.State
}

// TestClusterWorkload: deploy/kubernetes on a real cluster. Two replicas
// become ready; MCP through the Service (mcp-go in both eras, the
// TypeScript SDK) and in each replica by its IP runs a sandboxed tool and
// a built-in with its helper; each pod has its user namespace, an unmasked
// /proc, the Localhost seccomp filter and the kubelet's pids limit; the
// kubelet's ConfigMap and Secret volumes pass the trust check; a refused
// ConfigMap stalls a rollout; no token reaches a log or an event; then the
// operations of TestClusterOperations.
func TestClusterWorkload(t *testing.T) {
	k := needCluster(t)
	token, took := deployWorkload(t, k)
	figure(t, "kubectl apply to 2 ready replicas: %.1f s", took.Seconds())
	hc, clusterIP := k.serviceClient(t)

	t.Run("service", func(t *testing.T) {
		for _, legacy := range []bool{true, false} {
			c := mcptest.Connect(t, "http://toolgate:8080/mcp", mcptest.Options{Token: token, Legacy: legacy, HTTP: hc, Name: "toolgate-e2e-cluster", Timeout: 30 * time.Second})
			got := names(t, c)
			for _, want := range []string{"checkpoint_status", "git_status", "git_log", "outline"} {
				if !slices.Contains(got, want) {
					t.Errorf("legacy=%v: tools/list %v lacks %s", legacy, got, want)
				}
			}
			res, err := call1(c, "git_status")
			if err != nil || !strings.Contains(text(res), "not a git repository") {
				t.Errorf("legacy=%v: git_status (sandboxed) through the Service: %v %q", legacy, err, text(res))
			}
			if st := confState(t, c); st != "loaded" {
				t.Errorf("legacy=%v: checkpoint_status conf.state = %q, want loaded (the ConfigMap volume trusted)", legacy, st)
			}
		}
		// A wrong token runs nothing.
		resp := mcptest.Post(t, hc, "http://toolgate:8080/mcp", mcptest.Request{Token: "not-" + token, Body: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`})
		if resp.Status != 401 {
			t.Errorf("a wrong token through the Service: %d, want 401", resp.Status)
		}
		r := runTSClient(t, "http://"+clusterIP+":8080/mcp", token, "git_status")
		if !slices.Contains(r.Tools, "git_status") || r.SessionID == "" || !strings.Contains(string(r.Calls["git_status"]), "not a git repository") {
			t.Errorf("TypeScript SDK through the ClusterIP: %+v", r)
		}
	})

	t.Run("each replica", func(t *testing.T) {
		for _, p := range k.pods(t) {
			checkReplica(t, k, p, token)
		}
	})

	t.Run("no token in logs or events", func(t *testing.T) {
		var all strings.Builder
		for _, p := range k.podsNoFail() {
			out, _ := k.run("logs", p)
			all.WriteString(out)
		}
		ev := k.must(t, "get", "events", "-o", "yaml")
		if strings.Contains(all.String(), token) || strings.Contains(ev, token) {
			t.Error("the token is in the pods' logs or the namespace's events")
		}
		if !strings.Contains(all.String(), `"principal":"ci-runner"`) {
			t.Error("no audit record of principal ci-runner in the pods' logs")
		}
	})

	t.Run("refused conf stalls the rollout", func(t *testing.T) {
		refusedRollout(t, k)
	})

	t.Run("operations", func(t *testing.T) {
		clusterOperations(t, k, token)
	})
}

// checkReplica checks one pod from the inside (kubectl exec) and over MCP
// by its IP.
func checkReplica(t *testing.T, k *kube, p kubePod, token string) {
	t.Helper()
	exec1 := func(argv ...string) string {
		out, err := k.run(append([]string{"exec", p.Name, "--"}, argv...)...)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		return out
	}
	// Seccomp: 2 is a filter (the Localhost profile; the kubelet would
	// refuse to start the pod without the file).
	if st := exec1("cat", "/proc/1/status"); !strings.Contains(st, "\nSeccomp:\t2\n") || !strings.Contains(st, "NoNewPrivs:\t1") {
		t.Errorf("%s: /proc/1/status lacks Seccomp: 2 and NoNewPrivs: 1:\n%s", p.Name, st)
	}
	// hostUsers: false: uid 0 of the pod is not the host's.
	if m := strings.Fields(exec1("cat", "/proc/self/uid_map")); len(m) != 3 || m[1] == "0" || m[2] == "4294967295" {
		t.Errorf("%s: uid_map %q: want the pod's own user namespace (hostUsers: false)", p.Name, m)
	}
	// procMount: Unmasked: no masking mounts under /proc.
	for line := range strings.SplitSeq(exec1("cat", "/proc/self/mountinfo"), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], "/proc/") {
			t.Errorf("%s: a mount under /proc (procMount: Unmasked wants none): %s", p.Name, line)
		}
	}
	// The kubelet's pod pids limit on the pod's cgroup (seen from the node).
	if max, cur := podPids(t, p.UID); max == "" || max == "max" || cur == "" || cur == "0" {
		t.Errorf("%s: the pod's cgroup pids.max %q, pids.current %q: want the kubelet's podPidsLimit over the pod's processes", p.Name, max, cur)
	} else {
		t.Logf("%s: pod cgroup pids.max %s, pids.current %s", p.Name, max, cur)
	}
	// /readyz: conf and registry loaded, bwrap ready.
	resp, err := http.Get("http://" + p.IP + ":9090/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`"conf":"loaded"`, `"registry":"loaded"`, `"sandbox":{"backend":"bwrap","state":"ready"}`} {
		if resp.StatusCode != 200 || !strings.Contains(b.String(), want) {
			t.Errorf("%s: /readyz %d %s lacks %s", p.Name, resp.StatusCode, b.String(), want)
		}
	}
	// A built-in with its helper (outline: ctags, sandboxed) and a
	// sandboxed tool, in this replica.
	exec1("sh", "-c", "printf 'package main\\n\\nfunc Served() {}\\n' >/workspace/main.go")
	c := mcptest.Connect(t, "http://"+p.IP+":8080/mcp", mcptest.Options{Token: token, Name: "toolgate-e2e-cluster", Timeout: 30 * time.Second})
	res, err := callArgs(c, "outline", map[string]any{"path": "main.go"})
	if err != nil || res.IsError || !strings.Contains(text(res), "Served") {
		t.Errorf("%s: outline (ctags) of main.go: %v %q", p.Name, err, text(res))
	}
	res, err = call1(c, "git_status")
	if err != nil || !strings.Contains(text(res), "not a git repository") {
		t.Errorf("%s: git_status (bwrap): %v %q", p.Name, err, text(res))
	}
}

// podPids finds the pod's cgroup on the node (v1: the pids hierarchy;
// v2: the unified one; cgroupfs or systemd names) and returns its
// pids.max and pids.current.
func podPids(t *testing.T, uid string) (limit, current string) {
	t.Helper()
	base := "/sys/fs/cgroup"
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err == nil {
		base = "/sys/fs/cgroup/pids"
	}
	names := []string{
		"pod" + uid, "kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice",
		"kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice", "kubepods-besteffort-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice",
	}
	var found string
	filepath.WalkDir(base, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if slices.Contains(names, d.Name()) {
			found = path
			return filepath.SkipAll
		}
		return nil
	})
	if found == "" {
		t.Errorf("no cgroup of pod %s under %s", uid, base)
		return "", ""
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(found, name))
		if err != nil {
			t.Error(err)
		}
		return strings.TrimSpace(string(b))
	}
	return read("pids.max"), read("pids.current")
}

// refusedRollout rolls out a ConfigMap that toolgate refuses: the new pod
// serves but never becomes ready, the rollout stalls with the old pods
// serving, and an undo ends it.
func refusedRollout(t *testing.T, k *kube) {
	before := k.pods(t)
	k.must(t, "create", "configmap", "toolgate-conf-bad", "--from-literal=tools.conf=bogus line\n")
	k.must(t, "patch", "deployment", "toolgate", "--type=json", "-p",
		`[{"op":"replace","path":"/spec/template/spec/volumes/0/configMap/name","value":"toolgate-conf-bad"}]`)
	if _, err := k.run("rollout", "status", "deployment/toolgate", "--timeout=25s"); err == nil {
		t.Fatal("the rollout of a refused tools.conf completed")
	}
	var fresh *kubePod
	pods := k.pods(t)
	for i, p := range pods {
		if !slices.ContainsFunc(before, func(b kubePod) bool { return b.Name == p.Name }) {
			fresh = &pods[i]
		} else if !p.Ready {
			t.Errorf("old pod %s is not ready during the stalled rollout", p.Name)
		}
	}
	if fresh == nil || fresh.Ready || len(pods) != 3 {
		t.Fatalf("pods during the stalled rollout: %+v, want the 2 old ready and one new not ready", pods)
	}
	resp, err := http.Get("http://" + fresh.IP + ":9090/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(b.String(), `"conf":"refused"`) || !strings.Contains(b.String(), "bogus") {
		t.Errorf("the new pod's /readyz: %d %s, want 503 naming the refused line", resp.StatusCode, b.String())
	}
	k.must(t, "rollout", "undo", "deployment/toolgate")
	k.must(t, "rollout", "status", "deployment/toolgate", "--timeout=120s")
	k.must(t, "delete", "configmap", "toolgate-conf-bad")
}
