// Package kubernetes holds toolgate's Kubernetes workload (the YAML beside
// this file) and the test that decodes it strictly against the Kubernetes
// API types: an unknown or misspelt field, a duplicate key or a wrong type
// fails, as the API server would refuse it. No cluster runs here; the same
// YAML is played with `podman kube play` by e2e/kube_test.go.
package kubernetes

import (
	"bytes"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/credscan"
)

// decoded is every object of the manifests, by kind.
type decoded struct {
	deployments []appsv1.Deployment
	services    []corev1.Service
	configMaps  []corev1.ConfigMap
	secrets     []corev1.Secret
	policies    []networkingv1.NetworkPolicy
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decodeAll decodes every document of every .yaml file here strictly, by
// its apiVersion and kind; a kind this workload does not use fails.
func decodeAll(t *testing.T) decoded {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var d decoded
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSep.Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			var into any
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				d.deployments = append(d.deployments, appsv1.Deployment{})
				into = &d.deployments[len(d.deployments)-1]
			case "v1 Service":
				d.services = append(d.services, corev1.Service{})
				into = &d.services[len(d.services)-1]
			case "v1 ConfigMap":
				d.configMaps = append(d.configMaps, corev1.ConfigMap{})
				into = &d.configMaps[len(d.configMaps)-1]
			case "v1 Secret":
				d.secrets = append(d.secrets, corev1.Secret{})
				into = &d.secrets[len(d.secrets)-1]
			case "networking.k8s.io/v1 NetworkPolicy":
				d.policies = append(d.policies, networkingv1.NetworkPolicy{})
				into = &d.policies[len(d.policies)-1]
			default:
				t.Fatalf("%s #%d: %s %s is not a kind of this workload", f, i, tm.APIVersion, tm.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
				t.Errorf("%s #%d (%s): %v", f, i, tm.Kind, err)
			}
		}
	}
	return d
}

func stripComments(doc string) string {
	var b strings.Builder
	for l := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func TestManifestsDecodeStrictly(t *testing.T) {
	d := decodeAll(t)
	if len(d.deployments) != 1 || len(d.services) != 1 || len(d.configMaps) != 2 || len(d.secrets) != 0 || len(d.policies) != 1 {
		t.Fatalf("decoded %d deployments, %d services, %d configmaps, %d secrets, %d network policies; want 1, 1, 2, 0, 1",
			len(d.deployments), len(d.services), len(d.configMaps), len(d.secrets), len(d.policies))
	}
}

// TestStrictDecodingRefuses: the decoder the test relies on does refuse
// what the API server would.
func TestStrictDecodingRefuses(t *testing.T) {
	for _, tc := range []struct{ name, doc string }{
		{"an unknown field", "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: 1\n  replica: 2\n"},
		{"a misspelt security field", "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    securityContext:\n      procMounts: Unmasked\n"},
		{"a duplicate key", "apiVersion: v1\nkind: Service\nspec:\n  type: ClusterIP\n  type: NodePort\n"},
		{"a wrong type", "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: two\n"},
	} {
		var obj any = &appsv1.Deployment{}
		if strings.Contains(tc.doc, "kind: Pod") {
			obj = &corev1.Pod{}
		} else if strings.Contains(tc.doc, "kind: Service") {
			obj = &corev1.Service{}
		}
		if err := yaml.UnmarshalStrict([]byte(tc.doc), obj); err == nil {
			t.Errorf("%s: decoded without error", tc.name)
		}
	}
}

// TestDeploymentSandboxSettings holds the pod to exactly the settings the
// in-container bwrap sandbox needs (docs/kubernetes.md).
func TestDeploymentSandboxSettings(t *testing.T) {
	d := decodeAll(t)
	dep := d.deployments[0]
	pod := dep.Spec.Template.Spec
	ps := pod.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser != 10001 ||
		ps.RunAsGroup == nil || *ps.RunAsGroup != 10001 || ps.FSGroup == nil || *ps.FSGroup != 10001 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot, uid and gid 10001 (the image's user), fsGroup 10001", ps)
	}
	if ps == nil || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost ||
		ps.SeccompProfile.LocalhostProfile == nil || *ps.SeccompProfile.LocalhostProfile != "toolgate-seccomp.json" {
		t.Errorf("pod seccompProfile: want Localhost toolgate-seccomp.json (images/seccomp.json on each node)")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken: want false (no tool needs the API)")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ProcMount == nil || *sc.ProcMount != corev1.UnmaskedProcMount {
		t.Error("procMount: want Unmasked (bwrap mounts a new /proc)")
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem: want true")
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation: want false")
	}
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Error("capabilities: want drop ALL and nothing added")
	}
	if sc != nil && (sc.Privileged != nil && *sc.Privileged) {
		t.Error("privileged: want unset")
	}
	if c.Resources.Limits.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Error("resources.limits: want cpu and memory")
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--listen=:8080", "--allow-host=toolgate", "--auth-tokens=/etc/toolgate/auth/tokens", "--tool-mcp-dir=/etc/toolgate/tool-mcp.d", "--sandbox-pids=0", "--sandbox-memory=0", "--root=/workspace"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	for _, p := range []string{"/etc/saphira/mcp", "/etc/toolgate/tool-mcp.d", "/etc/toolgate/auth"} {
		if m, ok := mounts[p]; !ok || !m.ReadOnly {
			t.Errorf("%s: want a read-only mount", p)
		}
	}
	secretVolumes := 0
	for _, v := range pod.Volumes {
		if v.Secret == nil {
			continue
		}
		secretVolumes++
		if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o007 != 0 {
			t.Errorf("secret volume %s: want no access for others (the token file is refused when world-readable)", v.Name)
		}
		if v.Secret.SecretName != "toolgate-auth" || v.Secret.Optional == nil || *v.Secret.Optional || len(v.Secret.Items) != 0 {
			t.Errorf("secret volume %s: want the whole Secret toolgate-auth, optional: false (no pod starts without it)", v.Name)
		}
	}
	if secretVolumes != 1 {
		t.Errorf("%d secret volumes, want 1 (toolgate-auth, the token file)", secretVolumes)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Error("probes: want readiness /readyz and liveness /healthz")
	}
	svc := d.services[0]
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		t.Error("Service: want ClientIP affinity (2025-11-25 sessions live in one replica)")
	}
	np := d.policies[0]
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(np.Spec.Egress) != 0 ||
		len(np.Spec.PodSelector.MatchLabels) == 0 {
		t.Error("NetworkPolicy: want Egress among policyTypes, no egress rule (default deny) and the app's pods selected")
	}
	// The ConfigMap's tools.conf names tools that exist in the image.
	for _, cm := range d.configMaps {
		if conf, ok := cm.Data["tools.conf"]; ok && !bytes.Contains([]byte(conf), []byte("/usr/bin/git test")) {
			t.Errorf("tools.conf: want the image's git as a test-class tool:\n%s", conf)
		}
	}
}

// TestManifestsShipNoCredential: `kubectl apply -f deploy/kubernetes/`
// creates no Secret, and no file here (comments included) holds a token,
// a token's sha256: digest, or any word that is a published example token.
func TestManifestsShipNoCredential(t *testing.T) {
	d := decodeAll(t)
	for _, s := range d.secrets {
		if len(s.Data) != 0 || len(s.StringData) != 0 {
			t.Errorf("Secret %s holds data (%d keys): the manifests ship no credential", s.Name, len(s.Data)+len(s.StringData))
		}
	}
	if len(d.secrets) != 0 {
		t.Errorf("%d Secrets in the manifests, want none: the operator makes toolgate-auth (docs/kubernetes.md)", len(d.secrets))
	}
	files, _ := filepath.Glob("*")
	for _, f := range files {
		if strings.HasSuffix(f, ".go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		credscan.File(t, f, b)
	}
}

// TestNetworkPolicyPeers: ingress to MCP (8080) only from this
// namespace's pods labelled toolgate.io/client: "true", to metrics (9090)
// only from the namespace named monitoring, exactly as docs/kubernetes.md says;
// no other rule.
func TestNetworkPolicyPeers(t *testing.T) {
	d := decodeAll(t)
	if len(d.policies) != 1 {
		t.Fatalf("%d network policies, want 1", len(d.policies))
	}
	np := d.policies[0]
	tcp := corev1.ProtocolTCP
	port := func(n int) []networkingv1.NetworkPolicyPort {
		p := intstr.FromInt32(int32(n))
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}
	}
	want := []networkingv1.NetworkPolicyIngressRule{
		{Ports: port(8080), From: []networkingv1.NetworkPolicyPeer{{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"toolgate.io/client": "true"}},
		}}},
		{Ports: port(9090), From: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
		}}},
	}
	if !reflect.DeepEqual(np.Spec.Ingress, want) {
		got, _ := yaml.Marshal(np.Spec.Ingress)
		exp, _ := yaml.Marshal(want)
		t.Errorf("NetworkPolicy ingress:\n%s\nwant:\n%s", got, exp)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) || len(np.Spec.Egress) != 0 {
		t.Errorf("NetworkPolicy: want policyTypes Ingress and Egress, no egress rule (default deny)")
	}
	if !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, d.deployments[0].Spec.Template.Labels) {
		t.Errorf("NetworkPolicy podSelector %v: want the Deployment's pods %v", np.Spec.PodSelector.MatchLabels, d.deployments[0].Spec.Template.Labels)
	}
	page, err := os.ReadFile(kubeDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{"`toolgate.io/client: \"true\"`", "`kubernetes.io/metadata.name: monitoring`", "admits MCP (8080) only from pods of toolgate's\nnamespace labelled"} {
		if !strings.Contains(string(page), doc) {
			t.Errorf("%s does not document the peer %q", kubeDoc, doc)
		}
	}
}

// kubeDoc is the page of the Kubernetes workload: the Secret command the
// tests run, the peers they hold the NetworkPolicy to.
const kubeDoc = "../../docs/kubernetes.md"

var readmeSecretRE = regexp.MustCompile("(?s)<!-- test: kube secret -->\n```sh\n(.*?)```\n")

// need returns the path of a command the test runs, skipping without it
// (failing under TOOLGATE_REQUIRE_ALL=1).
func need(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("TOOLGATE_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is not installed (TOOLGATE_REQUIRE_ALL=1): %v", name, err)
		}
		t.Skipf("%s is not installed: %v", name, err)
	}
	return p
}

// TestREADMESecretCommand runs docs/kubernetes.md's one command that makes the
// Secret, with a kubectl that records its arguments: it makes the Secret
// the Deployment mounts (toolgate-auth, key tokens), holding a token file
// toolgate loads, of the principal ci-runner, whose only entry is the
// digest of the fresh random token the command generated. With a real
// kubectl installed, its --dry-run=client renders that Secret too.
func TestREADMESecretCommand(t *testing.T) {
	need(t, "openssl")
	need(t, "sha256sum")
	bash := need(t, "bash")
	page, err := os.ReadFile(kubeDoc)
	if err != nil {
		t.Fatal(err)
	}
	m := readmeSecretRE.FindAllSubmatch(page, -1)
	if len(m) != 1 {
		t.Fatalf("%s has %d blocks marked <!-- test: kube secret -->, want 1", kubeDoc, len(m))
	}
	block := string(m[0][1])
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	argsFile, tokenFile := filepath.Join(dir, "args"), filepath.Join(dir, "token")
	shim := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > \"$KUBECTL_ARGS\"\n"
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, "-euo", "pipefail", "-c", block+"printf %s \"$TOKEN\" > \"$TOKEN_OUT\"\n")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECTL_ARGS="+argsFile, "TOKEN_OUT="+tokenFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the block of %s: %v\n%s", kubeDoc, err, out)
	}
	rawArgs, _ := os.ReadFile(argsFile)
	args := strings.Split(strings.TrimSuffix(string(rawArgs), "\x00"), "\x00")
	token, _ := os.ReadFile(tokenFile)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).Match(token) {
		t.Fatalf("TOKEN is %d bytes, want 64 hex digits (openssl rand -hex 32)", len(token))
	}
	const literal = "--from-literal=tokens="
	if len(args) != 5 || !slices.Equal(args[:4], []string{"create", "secret", "generic", "toolgate-auth"}) || !strings.HasPrefix(args[4], literal) {
		t.Fatalf("kubectl %q: want create secret generic toolgate-auth %sFILE", args, literal)
	}
	tokens := strings.TrimPrefix(args[4], literal)
	if strings.Contains(tokens, string(token)) {
		t.Error("the Secret holds the token itself, want its digest only")
	}
	// The Secret is what the Deployment mounts, at what --auth-tokens reads.
	dep := decodeAll(t).deployments[0].Spec.Template.Spec
	if !slices.Contains(dep.Containers[0].Args, "--auth-tokens=/etc/toolgate/auth/tokens") {
		t.Errorf("args %v: want --auth-tokens=/etc/toolgate/auth/tokens (the Secret's key tokens)", dep.Containers[0].Args)
	}
	// The token file toolgate loads from it.
	p := filepath.Join(dir, "tokens")
	if err := os.WriteFile(p, []byte(tokens), 0o440); err != nil {
		t.Fatal(err)
	}
	loaded, err := conf.LoadTokens(p)
	if err != nil {
		t.Fatalf("toolgate refuses the token file of %s: %v", kubeDoc, err)
	}
	if len(loaded.Tokens) != 1 || loaded.Tokens[0].Name != "ci-runner" || loaded.Tokens[0].Digest != sha256.Sum256(token) || len(loaded.Tokens[0].Scopes) != 0 {
		t.Errorf("tokens %+v: want one, ci-runner, the digest of TOKEN", loaded.Tokens)
	}
	// The real kubectl, if any, renders that Secret without a cluster.
	real, err := exec.LookPath("kubectl")
	if err != nil {
		t.Logf("no kubectl here: its --dry-run=client rendering is not checked")
		return
	}
	out, err := exec.Command(real, append(args, "--dry-run=client", "-o", "json")...).Output()
	if err != nil {
		t.Fatalf("kubectl %q --dry-run=client: %v", args, err)
	}
	var sec corev1.Secret
	if err := yaml.UnmarshalStrict(out, &sec); err != nil {
		t.Fatal(err)
	}
	if sec.Name != "toolgate-auth" || len(sec.Data) != 1 || string(sec.Data["tokens"]) != tokens {
		t.Errorf("kubectl renders Secret %s with %d keys (tokens %q), want toolgate-auth with tokens the file", sec.Name, len(sec.Data), sec.Data["tokens"])
	}
}

// TestDeploymentDrains: a rolling update loses no call
// (e2e/cluster_ops_test.go proves it on a cluster) when the pod keeps
// serving for a moment after it leaves the Service's endpoints (a native
// preStop sleep: no binary in the image) and the kubelet's grace covers
// that sleep plus toolgate's --shutdown-grace drain.
func TestDeploymentDrains(t *testing.T) {
	d := decodeAll(t)
	pod := d.deployments[0].Spec.Template.Spec
	c := pod.Containers[0]
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Exec != nil {
		t.Fatal("lifecycle.preStop: want a native sleep (the endpoints move before SIGTERM)")
	}
	sleep := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	if sleep < 3*time.Second {
		t.Errorf("preStop sleep %s: want at least 3 s for kube-proxy to drop the endpoint", sleep)
	}
	var grace time.Duration
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--shutdown-grace="); ok {
			g, err := time.ParseDuration(v)
			if err != nil {
				t.Fatal(err)
			}
			grace = g
		}
	}
	if grace == 0 {
		t.Fatal("args: want --shutdown-grace")
	}
	if pod.TerminationGracePeriodSeconds == nil {
		t.Fatal("terminationGracePeriodSeconds: want it set")
	}
	if total := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; total <= sleep+grace {
		t.Errorf("terminationGracePeriodSeconds %s: want more than the preStop sleep %s + --shutdown-grace %s", total, sleep, grace)
	}
}
