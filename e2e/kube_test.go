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
	"regexp"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/internal/mcptest"
)

// The Kubernetes workload of deploy/kubernetes, played with `podman kube
// play`: the Deployment as written (the image swapped for the one under
// test), its Secret, and a ConfigMap of the test's tools. The pods are
// driven from the host over HTTP: a socket the test opens in a pod's own
// network namespace and dials 127.0.0.1:8080 there (podman 4.3 would
// publish every containerPort on the host's every address otherwise, and
// no packet needs to leave the machine or touch the pod network), with
// mcp-go's client, the TypeScript SDK and the conformance suite.
//
// What podman 4.3 cannot read from the YAML, and how the test supplies it
// (each one a podman limitation, not a change of the workload):
//   - securityContext.procMount: Unmasked (containers/podman#19881, podman
//     4.7): testdata/procmount-runc, a runc wrapper that unmasks /proc for
//     the toolgate container, as systempaths=unconfined does;
//   - securityContext.seccompProfile: the same profile is also named by the
//     seccomp.security.alpha.kubernetes.io/pod annotation, which podman reads
//     from --seccomp-profile-root;
//   - hostUsers: false becomes podman's userns=auto, which needs a subuid
//     range for the "containers" user: without one here, --userns host;
//   - a Secret (podman 4.4 plays a Secret document): a podman secret
//     holding it, its data unencoded, which 4.3 reads as is.
//
// The manifests ship no Secret: the test makes toolgate-auth as the
// docs/kubernetes.md says, by running that page's own `kubectl create secret` block
// (a fresh random token) with a kubectl that hands its arguments to the
// test.

type playedPod struct {
	name  string
	pid   int    // the toolgate container's first process
	token string // the bearer token of the Secret it was played with
}

var readmeKubeSecretRE = regexp.MustCompile("(?s)<!-- test: kube secret -->\n```sh\n(.*?)```\n")

// readmeKubeSecret runs docs/kubernetes.md's block that makes the Secret and
// returns the token it generated and the Secret's name and data, as the
// block's kubectl create secret generic NAME --from-literal=KEY=VALUE
// would make it.
func readmeKubeSecret(t *testing.T) (token, name string, data map[string]string) {
	t.Helper()
	readme, err := os.ReadFile("../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	m := readmeKubeSecretRE.FindAllSubmatch(readme, -1)
	if len(m) != 1 {
		t.Fatalf("docs/kubernetes.md has %d blocks marked <!-- test: kube secret -->, want 1", len(m))
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	argsFile, tokenFile := filepath.Join(dir, "args"), filepath.Join(dir, "token")
	shim := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > \"$KUBECTL_ARGS\"\n"
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", string(m[0][1])+"printf %s \"$TOKEN\" > \"$TOKEN_OUT\"\n")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECTL_ARGS="+argsFile, "TOKEN_OUT="+tokenFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docs/kubernetes.md's kube secret block: %v\n%s", err, out)
	}
	raw, _ := os.ReadFile(argsFile)
	args := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	if len(args) < 5 || !slices.Equal(args[:3], []string{"create", "secret", "generic"}) {
		t.Fatalf("docs/kubernetes.md's block ran kubectl %q, want create secret generic NAME --from-literal=KEY=VALUE...", args)
	}
	data = map[string]string{}
	for _, a := range args[4:] {
		kv, ok := strings.CutPrefix(a, "--from-literal=")
		k, v, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 {
			t.Fatalf("kubectl argument %q: the test reads --from-literal=KEY=VALUE only", a)
		}
		data[k] = v
	}
	tok, _ := os.ReadFile(tokenFile)
	if len(tok) < 32 {
		t.Fatalf("docs/kubernetes.md's block made a %d-byte TOKEN", len(tok))
	}
	return string(tok), args[3], data
}

// netnsDialer dials in the network namespace of pid: the socket is made on
// a thread that joined it, and stays there.
func netnsDialer(pid int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			goruntime.LockOSThread() // never unlocked: the thread ends with the goroutine
			f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
			if err != nil {
				ch <- result{err: err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{err: err}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

func (p playedPod) httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: netnsDialer(p.pid)}, Timeout: 60 * time.Second}
}

// nsenter runs argv in the pod's network namespace.
func (p playedPod) nsenter(argv ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/proc/" + strconv.Itoa(p.pid) + "/ns/net", "--"}, argv...)...)
}

// playWorkload plays deploy/kubernetes with conf as the toolgate-conf
// ConfigMap's tools.conf and the Secret docs/kubernetes.md makes, and returns its
// pods once ready.
func playWorkload(t *testing.T, conf string) []playedPod {
	t.Helper()
	onlyImage(t)
	token, secName, secData := readmeKubeSecret(t)
	if secName != "toolgate-auth" {
		t.Fatalf("docs/kubernetes.md makes Secret %q, the Deployment mounts toolgate-auth", secName)
	}
	playManifests(t, conf, secData)
	var pods []playedPod
	for i := 0; ; i++ {
		name := fmt.Sprintf("toolgate-pod-%d-toolgate", i)
		out, err := exec.Command(podman, "inspect", "--format", "{{.State.Pid}}", name).Output()
		if err != nil {
			break
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		if pid <= 0 {
			logs, _ := exec.Command(podman, "logs", name).CombinedOutput()
			t.Fatalf("%s is not running:\n%s", name, logs)
		}
		pods = append(pods, playedPod{name: name, pid: pid, token: token})
	}
	if len(pods) != 2 {
		t.Fatalf("%d pods played, want the Deployment's 2 replicas", len(pods))
	}
	for _, p := range pods {
		c := p.httpClient()
		var body string
		ready := false
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) && !ready {
			resp, err := c.Get("http://127.0.0.1:9090/readyz")
			if err == nil {
				var b bytes.Buffer
				b.ReadFrom(resp.Body)
				resp.Body.Close()
				body = b.String()
				ready = resp.StatusCode == 200
			}
			if !ready {
				time.Sleep(200 * time.Millisecond)
			}
		}
		if !ready {
			logs, _ := exec.Command(podman, "logs", p.name).CombinedOutput()
			t.Fatalf("%s: /readyz never answered 200 (last: %s):\n%s", p.name, body, logs)
		}
		if !strings.Contains(body, `"sandbox":{"backend":"bwrap","state":"ready"}`) || !strings.Contains(body, `"conf":"loaded"`) {
			t.Fatalf("%s: /readyz %s: want the conf loaded and the bwrap sandbox ready", p.name, body)
		}
	}
	return pods
}

// playManifests plays deploy/kubernetes with conf as the toolgate-conf
// ConfigMap's tools.conf and secData as the toolgate-auth Secret's data,
// and returns once podman has started the pods.
func playManifests(t *testing.T, conf string, secData map[string]string) {
	t.Helper()
	if os.Geteuid() != 0 {
		missingDep(t, "joining a pod's network namespace needs root (uid %d)", os.Geteuid())
	}
	if _, err := exec.LookPath("catatonit"); err != nil {
		missingDep(t, "podman kube play builds its pause image with catatonit, which is not installed (scripts/image.sh installs it)")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("../deploy/kubernetes", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The Deployment as written, the image under test.
	dep := bytes.ReplaceAll(read("deployment.yaml"), []byte("image: localhost/toolgate:dev"), []byte("image: "+image))
	if bytes.Equal(dep, read("deployment.yaml")) && image != "localhost/toolgate:dev" {
		t.Fatal("deployment.yaml names no localhost/toolgate:dev image to replace")
	}
	if !bytes.Contains(dep, []byte("procMount: Unmasked")) {
		t.Fatal("deployment.yaml asks for no unmasked /proc: the runc wrapper would grant what it does not ask")
	}
	// The test's tools in the ConfigMap the Deployment mounts; the
	// registry ConfigMap as written.
	cm := corev1.ConfigMap{}
	cm.APIVersion, cm.Kind, cm.Name = "v1", "ConfigMap", "toolgate-conf"
	cm.Data = map[string]string{"tools.conf": conf}
	cmYAML, err := yaml.Marshal(cm)
	if err != nil {
		t.Fatal(err)
	}
	regDoc := ""
	for doc := range strings.SplitSeq(string(read("configmap.yaml")), "\n---\n") {
		if strings.Contains(doc, "name: toolgate-registry") {
			regDoc = doc
		}
	}
	if regDoc == "" {
		t.Fatal("configmap.yaml has no toolgate-registry ConfigMap")
	}
	play := filepath.Join(dir, "workload.yaml")
	if err := os.WriteFile(play, []byte(string(cmYAML)+"---\n"+regDoc+"\n---\n"+string(dep)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The Secret, as podman 4.3 reads it.
	secJSON, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]string{"name": "toolgate-auth"}, "type": "Opaque", "data": secData})
	secFile := filepath.Join(dir, "secret.json")
	os.WriteFile(secFile, secJSON, 0o600)
	// The seccomp profile where the Localhost profile names it.
	profiles := filepath.Join(dir, "seccomp")
	os.Mkdir(profiles, 0o755)
	if b, err := os.ReadFile(seccompProfile); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(profiles, "toolgate-seccomp.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "procmount-runc")
	build := exec.Command("go", "build", "-o", wrapper, "./testdata/procmount-runc")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the runc wrapper: %v\n%s", err, out)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		missingDep(t, "runc is not installed: %v", err)
	}
	volumes := []string{"toolgate-conf", "toolgate-registry", "toolgate-auth", "toolgate-workspace", "toolgate-tmp"}
	cleanup := func() {
		exec.Command(podman, "kube", "down", play).Run()
		exec.Command(podman, "secret", "rm", "toolgate-auth").Run()
		exec.Command(podman, append([]string{"volume", "rm", "--force"}, volumes...)...).Run()
	}
	cleanup()
	t.Cleanup(cleanup)
	if out, err := exec.Command(podman, "secret", "create", "toolgate-auth", secFile).CombinedOutput(); err != nil {
		t.Fatalf("podman secret create: %v\n%s", err, out)
	}
	args := []string{"--runtime", wrapper, "kube", "play", "--seccomp-profile-root", profiles}
	if subuid, _ := os.ReadFile("/etc/subuid"); !bytes.Contains(subuid, []byte("containers:")) {
		t.Logf("no subuid range for \"containers\" in /etc/subuid: hostUsers: false (podman userns=auto) cannot be had here; playing with --userns host")
		args = append(args, "--userns", "host")
	}
	cmd := exec.Command(podman, append(args, play)...)
	cmd.Env = append(os.Environ(), "PROCMOUNT_RUNC="+runc)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("podman kube play: %v\n%s", err, out)
	}
}

// TestKubeWorkload: the played Deployment serves MCP over HTTP behind its
// Secret's token; a sandboxed tool in the pod has no network while a
// read-class tool of the same pod reaches a listener in the pod's own
// namespace; the TypeScript SDK's client and the conformance suite drive
// it; metrics and probes answer on 9090; a refused token runs nothing.
func TestKubeWorkload(t *testing.T) {
	onlyImage(t)
	// The listener's port must be in the conf, which is read at start:
	// pick it now (a fresh namespace has every port free).
	port := 20000 + rand.IntN(20000)
	target := fmt.Sprintf("http://127.0.0.1:%d/r", port)
	conf := fmt.Sprintf(`tool git_status /usr/bin/git test 30 65536 on /workspace -- status --short
tool net /usr/bin/git test 30 65536 on /workspace -- ls-remote %[1]s
tool netdirect /usr/bin/git read 30 65536 off /workspace -- ls-remote %[1]s
`, target)
	pods := playWorkload(t, conf)
	p := pods[0]
	// The listener in the pod's namespace.
	var accepted func() int
	{
		type result struct {
			l   net.Listener
			err error
		}
		ch := make(chan result, 1)
		go func() {
			goruntime.LockOSThread()
			f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", p.pid))
			if err != nil {
				ch <- result{err: err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{err: err}
				return
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			ch <- result{l, err}
		}()
		r := <-ch
		if r.err != nil {
			t.Fatalf("listen in the pod: %v", r.err)
		}
		defer r.l.Close()
		count := make(chan int, 1)
		count <- 0
		srv := &http.Server{Handler: http.NotFoundHandler(), ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				count <- <-count + 1
			}
		}}
		go srv.Serve(r.l)
		accepted = func() int { v := <-count; count <- v; return v }
	}
	hc := p.httpClient()
	url := "http://127.0.0.1:8080/mcp"

	// A refused token runs nothing.
	resp := mcptest.Post(t, hc, url, mcptest.Request{Token: "not-" + p.token, Body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"netdirect"}}`})
	if resp.Status != 401 || accepted() != 0 {
		t.Fatalf("a wrong token: %d, %d connections made; want 401 and none", resp.Status, accepted())
	}

	for _, legacy := range []bool{true, false} {
		c, err := mcptest.Dial(context.Background(), url, mcptest.Options{Token: p.token, Legacy: legacy, HTTP: hc, Name: "toolgate-e2e-kube", Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got := names(t, c)
		for _, want := range []string{"checkpoint_status", "git_status", "net", "netdirect"} {
			if !slices.Contains(got, want) {
				t.Errorf("tools/list %v lacks %s", got, want)
			}
		}
		before := accepted()
		res, err := call1(c, "net")
		if err != nil || !res.IsError || !strings.Contains(text(res), "Failed to connect to 127.0.0.1") {
			t.Errorf("the sandboxed git reached the network: %v %q", err, text(res))
		}
		if accepted() != before {
			t.Errorf("the sandboxed tool opened %d connections to the pod's listener, want 0", accepted()-before)
		}
		res, err = call1(c, "netdirect")
		if err != nil || !strings.Contains(text(res), "not found") || accepted() == before {
			t.Errorf("the read-class git in the same pod did not reach the listener: %v %q (connections %d)", err, text(res), accepted()-before)
		}
		c.Close()
	}

	// The official TypeScript SDK's client, and the conformance suite, from
	// the host in the pod's network namespace.
	npmDir, node := httpNPM(t)
	script, _ := filepath.Abs("testdata/ts-client.mjs")
	ts := p.nsenter(node, script, url, p.token, "git_status")
	ts.Env = append(os.Environ(), "TOOLGATE_HTTP_NPM_DIR="+npmDir)
	var stderr bytes.Buffer
	ts.Stderr = &stderr
	out, err := ts.Output()
	if err != nil {
		t.Fatalf("TypeScript SDK client in the pod's namespace: %v\n%s", err, stderr.String())
	}
	var r tsResult
	if err := json.Unmarshal(out, &r); err != nil || !slices.Contains(r.Tools, "git_status") || r.SessionID == "" {
		t.Errorf("TypeScript SDK client: %s (%v)", out, err)
	}
	if !strings.Contains(string(r.Calls["git_status"]), "fatal: not a git repository") {
		t.Errorf("git_status through the TypeScript SDK: %s", r.Calls["git_status"])
	}
	runConformanceIn(t, p, url, p.token)

	// Metrics and probes on 9090, without a token.
	mresp, err := hc.Get("http://127.0.0.1:9090/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var mb bytes.Buffer
	mb.ReadFrom(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{
		`toolgate_calls_total{backend="bwrap",outcome="error",tool="net"} 2`,
		`toolgate_sandbox_state{backend="bwrap",state="ready"} 1`, `toolgate_http_auth_failures_total{reason="invalid"} 1`,
	} {
		if !strings.Contains(mb.String(), want+"\n") {
			t.Errorf("/metrics of the pod lacks %q", want)
		}
	}
	logs, _ := exec.Command(podman, "logs", p.name).CombinedOutput()
	if strings.Contains(string(logs), p.token) {
		t.Error("the token is in the pod's logs")
	}
	if !strings.Contains(string(logs), `"principal":"ci-runner"`) {
		t.Errorf("no audit record of principal ci-runner in the pod's logs")
	}
}

// TestKubeRefusesPublishedToken: a Secret holding the token that an
// earlier deploy/kubernetes/secret.yaml published serves nothing: each
// pod's toolgate exits 2 naming the line, and no replica becomes ready.
func TestKubeRefusesPublishedToken(t *testing.T) {
	onlyImage(t)
	playManifests(t, "tool git_status /usr/bin/git test 30 65536 on /workspace -- status --short\n",
		map[string]string{"tokens": "ci-runner sha256:401fe3ccb9f5ffb678ecd700eb48039250d139152a40c65a83eccc706b997819"})
	const want = "toolgate serve: --auth-tokens: /etc/toolgate/auth/tokens:1: token: a published example token"
	for i := range 2 {
		name := fmt.Sprintf("toolgate-pod-%d-toolgate", i)
		var logs, state string
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			l, _ := exec.Command(podman, "logs", name).CombinedOutput()
			st, _ := exec.Command(podman, "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name).Output()
			logs, state = string(l), strings.TrimSpace(string(st))
			if strings.Contains(logs, want) && strings.HasSuffix(state, " 2") {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !strings.Contains(logs, want) || !strings.HasSuffix(state, " 2") {
			t.Fatalf("%s: state %q, logs:\n%s\nwant it to exit 2 with %q", name, state, logs, want)
		}
		if strings.Contains(logs, "MCP on http://") {
			t.Errorf("%s served MCP:\n%s", name, logs)
		}
	}
}

// runConformanceIn runs the conformance suite in the pod's network
// namespace.
func runConformanceIn(t *testing.T, p playedPod, url, token string) {
	t.Helper()
	old := conformanceCommand
	conformanceCommand = func(argv ...string) *exec.Cmd { return p.nsenter(argv...) }
	defer func() { conformanceCommand = old }()
	runConformance(t, url, token)
}
