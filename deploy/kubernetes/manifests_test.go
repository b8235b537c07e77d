// Package kubernetes holds toolgate's Kubernetes workload (the YAML beside
// this file) and the test that decodes it strictly against the Kubernetes
// API types: an unknown or misspelt field, a duplicate key or a wrong type
// fails, as the API server would refuse it. No cluster runs here; the same
// YAML is played with `podman kube play` by e2e/kube_test.go.
package kubernetes

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
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
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func TestManifestsDecodeStrictly(t *testing.T) {
	d := decodeAll(t)
	if len(d.deployments) != 1 || len(d.services) != 1 || len(d.configMaps) != 2 || len(d.secrets) != 1 || len(d.policies) != 1 {
		t.Fatalf("decoded %d deployments, %d services, %d configmaps, %d secrets, %d network policies; want 1, 1, 2, 1, 1",
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
// in-container bwrap sandbox needs (README "Running on Kubernetes").
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
	for _, v := range pod.Volumes {
		if v.Secret != nil && (v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o007 != 0) {
			t.Errorf("secret volume %s: want no access for others (the token file is refused when world-readable)", v.Name)
		}
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
