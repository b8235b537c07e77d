// Package helm holds toolgate's Helm chart (toolgate/ beside this file) and
// the tests that keep it from drifting from deploy/kubernetes: the chart's
// default render is those manifests' objects, exactly; each value changes
// what it says and nothing else; `helm lint --strict` passes. The tests run
// the pinned Helm that scripts/lib.sh's helm_bin builds from the Go module
// proxy (scripts/test.sh builds it first).
package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/build"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/internal/credscan"
)

const (
	chartDir     = "toolgate"
	manifestsDir = "../kubernetes"
	libSh        = "../../scripts/lib.sh"
	kubeDoc      = "../../docs/kubernetes.md"
)

var helmVersionRE = regexp.MustCompile(`(?m)^helm_version=(v[0-9.]+)$`)

// helmBin returns the pinned Helm, GOPATH/bin/helm-VERSION with VERSION
// scripts/lib.sh's helm_version (TOOLGATE_HELM overrides the path). Without
// it the test skips, saying how to build it; under TOOLGATE_REQUIRE_ALL=1 it
// fails. Another version there fails: the pin is what is tested.
func helmBin(t *testing.T) string {
	t.Helper()
	lib, err := os.ReadFile(libSh)
	if err != nil {
		t.Fatal(err)
	}
	m := helmVersionRE.FindSubmatch(lib)
	if m == nil {
		t.Fatalf("%s has no helm_version=vX.Y.Z line", libSh)
	}
	want := string(m[1])
	bin := os.Getenv("TOOLGATE_HELM")
	if bin == "" {
		bin = filepath.Join(build.Default.GOPATH, "bin", "helm-"+want)
	}
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("no Helm %s at %s (build it: bash -c '. scripts/lib.sh && helm_bin')", want, bin)
		if os.Getenv("TOOLGATE_REQUIRE_ALL") == "1" {
			t.Fatal(msg + " (TOOLGATE_REQUIRE_ALL=1)")
		}
		t.Skip("SKIP: " + msg)
	}
	out, err := exec.Command(bin, "version", "--template", "{{.Version}}").Output()
	if err != nil || string(out) != want {
		t.Fatalf("%s version = %q (%v), want %s (the pin of %s)", bin, out, err, want, libSh)
	}
	return bin
}

// helm runs Helm with args; it returns stdout, and fails the test on an
// error.
func helm(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	out, stderr, err := helmRun(bin, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

func helmRun(bin string, args ...string) (stdout, stderr []byte, err error) {
	var o, e bytes.Buffer
	cmd := exec.Command(bin, args...)
	// No repository, cache or config of the machine's user is read or written.
	home := os.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "toolgate-helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "toolgate-helm-config"), "HELM_DATA_HOME="+filepath.Join(home, "toolgate-helm-data"))
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.Bytes(), e.Bytes(), err
}

// render is `helm template` of the chart with a values file holding
// values (none when empty).
func render(t *testing.T, bin, values string, extra ...string) []byte {
	t.Helper()
	args := append([]string{"template", "toolgate", chartDir}, extra...)
	if values != "" {
		args = append(args, "--values", valuesFile(t, values))
	}
	return helm(t, bin, args...)
}

// valuesFile writes values to a file for --values. Not in t.TempDir():
// Helm splits --values at commas, which subtest names hold.
func valuesFile(t *testing.T, values string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "toolgate-helm-values")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// objects decodes every document of a multi-document YAML stream into an
// unstructured object, keyed "apiVersion kind name"; a key twice fails.
func objects(t *testing.T, into map[string]map[string]any, where string, stream []byte) {
	t.Helper()
	for i, doc := range docSep.Split(string(stream), -1) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s #%d: %v", where, i, err)
		}
		if obj == nil {
			continue // comments only
		}
		md, _ := obj["metadata"].(map[string]any)
		key := fmt.Sprintf("%v %v %v", obj["apiVersion"], obj["kind"], md["name"])
		if _, dup := into[key]; dup {
			t.Fatalf("%s #%d: %s twice", where, i, key)
		}
		into[key] = obj
	}
}

// manifests is every object of deploy/kubernetes/*.yaml, unstructured.
func manifests(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestsDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestsDir, err)
	}
	objs := map[string]map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objects(t, objs, f, b)
	}
	return objs
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestChartDefaultRenderIsTheManifests: `helm template` with the default
// values renders exactly the objects of deploy/kubernetes, no more, no
// fewer, each equal field for field (compared as decoded data: comments,
// key order, quoting and document order aside), whatever the release's
// name and namespace.
func TestChartDefaultRenderIsTheManifests(t *testing.T) {
	bin := helmBin(t)
	want := manifests(t)
	for _, tc := range []struct{ name, release, namespace string }{
		{"release toolgate", "toolgate", ""},
		{"another release and namespace", "tg-prod", "agents"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", tc.release, chartDir}
			if tc.namespace != "" {
				args = append(args, "--namespace", tc.namespace)
			}
			got := map[string]map[string]any{}
			objects(t, got, "helm template", helm(t, bin, args...))
			if !slices.Equal(sortedKeys(got), sortedKeys(want)) {
				t.Fatalf("helm template renders %q, want deploy/kubernetes's %q", sortedKeys(got), sortedKeys(want))
			}
			for k, w := range want {
				if d := cmp.Diff(w, got[k]); d != "" {
					t.Errorf("%s: the chart's default render differs from %s (-manifests +chart):\n%s", k, manifestsDir, d)
				}
			}
		})
	}
}

// TestChartLint: `helm lint --strict` (warnings fail) passes with the
// default values and with every value changed.
func TestChartLint(t *testing.T) {
	bin := helmBin(t)
	for _, tc := range []struct{ name, values string }{
		{"default values", ""},
		{"every value changed", everyValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"lint", "--strict", chartDir}
			if tc.values != "" {
				args = append(args, "--values", valuesFile(t, tc.values))
			}
			out := helm(t, bin, args...)
			if !bytes.Contains(out, []byte("1 chart(s) linted, 0 chart(s) failed")) {
				t.Errorf("helm lint --strict:\n%s", out)
			}
		})
	}
}

// rendered is a render decoded strictly against the Kubernetes API types
// (an unknown field, a duplicate key or a wrong type fails); an object the
// render lacks is nil.
type rendered struct {
	dep      *appsv1.Deployment
	svc      *corev1.Service
	conf     *corev1.ConfigMap
	registry *corev1.ConfigMap
	np       *networkingv1.NetworkPolicy
}

// decodeStrict decodes a render into rendered: a kind the chart does not
// make (a Secret above all) fails, and so does a second object of a kind.
func decodeStrict(t *testing.T, stream []byte) rendered {
	t.Helper()
	var r rendered
	for i, doc := range docSep.Split(string(stream), -1) {
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("render #%d: %v", i, err)
		}
		var into any
		switch tm.APIVersion + " " + tm.Kind {
		case " ":
			continue // comments only
		case "apps/v1 Deployment":
			into = once(t, &r.dep)
		case "v1 Service":
			into = once(t, &r.svc)
		case "v1 ConfigMap":
			if strings.HasSuffix(tm.Metadata.Name, "-registry") {
				into = once(t, &r.registry)
			} else {
				into = once(t, &r.conf)
			}
		case "networking.k8s.io/v1 NetworkPolicy":
			into = once(t, &r.np)
		default:
			t.Fatalf("render #%d: %s %s is not an object the chart makes", i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("render #%d (%s %s): %v", i, tm.Kind, tm.Metadata.Name, err)
		}
	}
	return r
}

func once[T any](t *testing.T, p **T) *T {
	t.Helper()
	if *p != nil {
		t.Fatalf("a second %T in the render", *p)
	}
	*p = new(T)
	return *p
}

// copyOf is a deep copy of r.
func (r rendered) copyOf() rendered {
	c := rendered{}
	if r.dep != nil {
		c.dep = r.dep.DeepCopy()
	}
	if r.svc != nil {
		c.svc = r.svc.DeepCopy()
	}
	if r.conf != nil {
		c.conf = r.conf.DeepCopy()
	}
	if r.registry != nil {
		c.registry = r.registry.DeepCopy()
	}
	if r.np != nil {
		c.np = r.np.DeepCopy()
	}
	return c
}

// plain is v as the API server would store it, as unstructured data (so
// that quantities compare by value).
func plain(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (r rendered) diff(t *testing.T, got rendered) string {
	t.Helper()
	var b strings.Builder
	for _, o := range []struct {
		name      string
		want, got any
	}{
		{"Deployment", r.dep, got.dep},
		{"Service", r.svc, got.svc},
		{"ConfigMap conf", r.conf, got.conf},
		{"ConfigMap registry", r.registry, got.registry},
		{"NetworkPolicy", r.np, got.np},
	} {
		if d := cmp.Diff(plain(t, o.want), plain(t, o.got)); d != "" {
			fmt.Fprintf(&b, "%s (-want +got):\n%s\n", o.name, d)
		}
	}
	return b.String()
}

// Helpers for the expected changes.

func (r rendered) container() *corev1.Container { return &r.dep.Spec.Template.Spec.Containers[0] }

// replaceArg replaces the argument old with news (none: removes it).
func (r rendered) replaceArg(t *testing.T, old string, news ...string) {
	t.Helper()
	c := r.container()
	i := slices.Index(c.Args, old)
	if i < 0 {
		t.Fatalf("args %q lack %s", c.Args, old)
	}
	c.Args = slices.Concat(c.Args[:i], news, c.Args[i+1:])
}

func (r rendered) dropAuthVolume() {
	pod := &r.dep.Spec.Template.Spec
	pod.Volumes = slices.DeleteFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "auth" })
	c := r.container()
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "auth" })
}

const fragment = `schema_version = 8

[tool_mcp_servers.research]
transport = "stdio"
command = "/usr/local/bin/research-mcp"
enabled_tools = ["search"]
`

// everyValue changes every value of the chart at once (the lint case).
const everyValue = `
nameOverride: tg
fullnameOverride: tg-main
replicas: 3
image: {repository: registry.example/toolgate, tag: "1.2.3", pullPolicy: Always}
toolsConf: |
  tool sloc_all /usr/bin/git test 10 4096 on /workspace -- ls-files
registry:
  10-research.toml: |
    schema_version = 8
auth: {tokenSecret: tg-tokens}
oauth: {enabled: true, issuer: "https://issuer.example", resource: "https://tg.example/mcp", jwksURL: "https://issuer.example/jwks", algorithms: "ES256"}
allowHosts: [tg.agents.svc]
extraArgs: [--max-concurrent=16]
resources: {requests: {cpu: 250m, memory: 256Mi}, limits: {cpu: "1", memory: 1Gi}}
workspace: {persistentVolumeClaim: {claimName: repos}}
metrics: {enabled: true, port: 9191}
networkPolicy:
  enabled: true
  mcpFrom: [{namespaceSelector: {matchLabels: {team: agents}}}]
  metricsFrom: [{ipBlock: {cidr: 10.0.0.0/8}}]
  egress: [{ports: [{protocol: TCP, port: 443}]}]
`

// TestChartValues: each value changes what it says and nothing else. The
// want of each case is the default render, decoded strictly against the
// API types, with exactly the change the value names; the render with the
// value must equal it.
func TestChartValues(t *testing.T) {
	bin := helmBin(t)
	def := decodeStrict(t, render(t, bin, ""))
	for _, tc := range valueCases {
		t.Run(tc.name, func(t *testing.T) {
			got := decodeStrict(t, render(t, bin, tc.values))
			want := tc.want(t, def.copyOf())
			if d := want.diff(t, got); d != "" {
				t.Errorf("values:%s\nthe render differs from the default render changed as the values say:\n%s", tc.values, d)
			}
		})
	}
}

var oauthArgs = []string{"--oauth-issuer=https://issuer.example", "--oauth-resource=https://toolgate.example/mcp"}

// valueCases are TestChartValues's: values, and the default render changed
// as they say.
var valueCases = []struct {
	name, values string
	want         func(t *testing.T, r rendered) rendered
}{
	{
		"replicas 3, a registry fragment, OAuth on, NetworkPolicy off", `
replicas: 3
registry: {10-research.toml: ` + jsonString(fragment) + `}
auth: {tokenSecret: ""}
oauth: {enabled: true, issuer: "https://issuer.example", resource: "https://toolgate.example/mcp"}
networkPolicy: {enabled: false}
`,
		func(t *testing.T, r rendered) rendered {
			r.dep.Spec.Replicas = new(int32(3))
			r.registry.Data = map[string]string{"10-research.toml": fragment}
			r.replaceArg(t, "--auth-tokens=/etc/toolgate/auth/tokens", oauthArgs...)
			r.dropAuthVolume()
			r.np = nil
			return r
		},
	},
	{
		"OAuth beside the token file, every OAuth flag", `
oauth: {enabled: true, issuer: "https://issuer.example", resource: "https://toolgate.example/mcp", jwksURL: "https://issuer.example/keys", algorithms: "ES256,EdDSA"}
`,
		func(t *testing.T, r rendered) rendered {
			r.replaceArg(t, "--auth-tokens=/etc/toolgate/auth/tokens", slices.Concat([]string{"--auth-tokens=/etc/toolgate/auth/tokens"}, oauthArgs,
				[]string{"--oauth-jwks-url=https://issuer.example/keys", "--oauth-algs=ES256,EdDSA"})...)
			return r
		},
	},
	{
		"another token Secret", `auth: {tokenSecret: agents-tokens}`,
		func(t *testing.T, r rendered) rendered {
			for i := range r.dep.Spec.Template.Spec.Volumes {
				if v := &r.dep.Spec.Template.Spec.Volumes[i]; v.Secret != nil {
					v.Secret.SecretName = "agents-tokens"
				}
			}
			return r
		},
	},
	{
		"image and tools.conf", `
image: {repository: registry.example/toolgate, tag: "1.2.3", pullPolicy: Always}
toolsConf: "tool ls /usr/bin/ls read 5 1024 off /workspace --\n"
`,
		func(_ *testing.T, r rendered) rendered {
			r.container().Image = "registry.example/toolgate:1.2.3"
			r.container().ImagePullPolicy = corev1.PullAlways
			r.conf.Data = map[string]string{"tools.conf": "tool ls /usr/bin/ls read 5 1024 off /workspace --\n"}
			return r
		},
	},
	{
		"resources, workspace, allowHosts, extraArgs", `
resources: {requests: {cpu: 250m, memory: 256Mi}, limits: {cpu: "1", memory: 1Gi}}
workspace: {persistentVolumeClaim: {claimName: repos, readOnly: true}}
allowHosts: [toolgate.agents.svc, mcp.example]
extraArgs: [--max-concurrent=16, --rate=*=5/s]
`,
		func(t *testing.T, r rendered) rendered {
			res, err := yaml.Marshal(map[string]any{"requests": map[string]string{"cpu": "250m", "memory": "256Mi"}, "limits": map[string]string{"cpu": "1", "memory": "1Gi"}})
			if err != nil || yaml.UnmarshalStrict(res, &r.container().Resources) != nil {
				t.Fatal(err)
			}
			for i := range r.dep.Spec.Template.Spec.Volumes {
				if v := &r.dep.Spec.Template.Spec.Volumes[i]; v.Name == "toolgate-workspace" {
					v.VolumeSource = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "repos", ReadOnly: true}}
				}
			}
			r.replaceArg(t, "--allow-host=toolgate", "--allow-host=toolgate", "--allow-host=toolgate.agents.svc", "--allow-host=mcp.example")
			r.container().Args = append(r.container().Args, "--max-concurrent=16", "--rate=*=5/s")
			return r
		},
	},
	{
		"metrics on another port", `metrics: {port: 9191}`,
		func(t *testing.T, r rendered) rendered {
			r.dep.Spec.Template.Annotations["prometheus.io/port"] = "9191"
			r.replaceArg(t, "--metrics-listen=:9090", "--metrics-listen=:9191")
			r.container().ReadinessProbe.HTTPGet.Port.IntVal = 9191
			r.container().LivenessProbe.HTTPGet.Port.IntVal = 9191
			r.np.Spec.Ingress[1].Ports[0].Port.IntVal = 9191
			return r
		},
	},
	{
		"metrics off: no listener, probes on the MCP port", `metrics: {enabled: false}`,
		func(t *testing.T, r rendered) rendered {
			for _, k := range []string{"prometheus.io/scrape", "prometheus.io/port", "prometheus.io/path"} {
				delete(r.dep.Spec.Template.Annotations, k)
			}
			r.replaceArg(t, "--metrics-listen=:9090")
			r.container().ReadinessProbe.HTTPGet.Port.IntVal = 8080
			r.container().LivenessProbe.HTTPGet.Port.IntVal = 8080
			r.np.Spec.Ingress = r.np.Spec.Ingress[:1]
			return r
		},
	},
	{
		"NetworkPolicy peers and egress", `
networkPolicy:
  mcpFrom: [{namespaceSelector: {matchLabels: {team: agents}}, podSelector: {matchLabels: {role: agent}}}]
  metricsFrom: [{ipBlock: {cidr: 10.1.0.0/16}}]
  egress: [{ports: [{protocol: TCP, port: 443}]}]
`,
		func(t *testing.T, r rendered) rendered {
			var np networkingv1.NetworkPolicySpec
			if err := yaml.UnmarshalStrict([]byte(`
ingress:
- from: [{namespaceSelector: {matchLabels: {team: agents}}, podSelector: {matchLabels: {role: agent}}}]
- from: [{ipBlock: {cidr: 10.1.0.0/16}}]
egress: [{ports: [{protocol: TCP, port: 443}]}]
`), &np); err != nil {
				t.Fatal(err)
			}
			r.np.Spec.Ingress[0].From = np.Ingress[0].From
			r.np.Spec.Ingress[1].From = np.Ingress[1].From
			r.np.Spec.Egress = np.Egress
			return r
		},
	},
	{
		"nameOverride: labels, selectors and names", `nameOverride: tg`,
		func(t *testing.T, r rendered) rendered { return renamed(t, r, "tg", "tg") },
	},
	{
		"fullnameOverride: names, not labels", `fullnameOverride: tg-main`,
		func(t *testing.T, r rendered) rendered { return renamed(t, r, "toolgate", "tg-main") },
	},
}

// renamed is r with app.kubernetes.io/name label everywhere and the objects
// named name (the ConfigMaps name-conf and name-registry, the Service's
// name in --allow-host).
func renamed(t *testing.T, r rendered, label, name string) rendered {
	t.Helper()
	l := map[string]string{"app.kubernetes.io/name": label}
	r.dep.Name, r.svc.Name, r.np.Name, r.conf.Name, r.registry.Name = name, name, name, name+"-conf", name+"-registry"
	for _, m := range []*map[string]string{
		&r.dep.Labels, &r.dep.Spec.Selector.MatchLabels, &r.dep.Spec.Template.Labels, &r.svc.Labels, &r.svc.Spec.Selector,
		&r.np.Labels, &r.np.Spec.PodSelector.MatchLabels, &r.conf.Labels, &r.registry.Labels,
	} {
		*m = maps.Clone(l)
	}
	for i := range r.dep.Spec.Template.Spec.Volumes {
		if cm := r.dep.Spec.Template.Spec.Volumes[i].ConfigMap; cm != nil {
			cm.Name = name + strings.TrimPrefix(cm.Name, "toolgate")
		}
	}
	r.replaceArg(t, "--allow-host=toolgate", "--allow-host="+name)
	return r
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestChartRefuses: values that would deploy something broken or open are
// refused by `helm template` (and so by install), naming what is wrong.
func TestChartRefuses(t *testing.T) {
	bin := helmBin(t)
	for _, tc := range []struct{ name, values, wantErr string }{
		{"no authentication", `auth: {tokenSecret: ""}`, "auth.tokenSecret or oauth.enabled is required"},
		{"OAuth without a resource", `oauth: {enabled: true, issuer: "https://issuer.example"}`, "oauth.enabled needs oauth.issuer and oauth.resource"},
		{"OAuth issuer not a URL", `oauth: {enabled: true, issuer: "issuer.example", resource: "https://t.example/mcp"}`, "issuer"},
		{"MCP open to every peer", `networkPolicy: {mcpFrom: []}`, "mcpFrom"},
		{"metrics open to every peer", `networkPolicy: {metricsFrom: []}`, "metricsFrom"},
		{"a misspelt value", `replica: 3`, "replica"},
		{"a misspelt nested value", `image: {tags: "1"}`, "tags"},
		{"a registry file toolgate would skip", `registry: {research.conf: "x"}`, "research.conf"},
		{"metrics on the MCP port", `metrics: {port: 8080}`, "port"},
		{"an extra arg that is not a flag", `extraArgs: [serve]`, "extraArgs"},
		{"a token in the values", `auth: {token: abc}`, "token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := helmRun(bin, "template", "toolgate", chartDir, "--values", valuesFile(t, tc.values))
			if err == nil {
				t.Fatalf("helm template with %s: rendered, want an error naming %q:\n%s", tc.values, tc.wantErr, out)
			}
			if !strings.Contains(string(stderr), tc.wantErr) {
				t.Errorf("helm template with %s: error %q, want it to name %q", tc.values, stderr, tc.wantErr)
			}
		})
	}
}

// TestChartShipsNoCredential: no file of the chart holds a token, a
// token's digest or a published example token (the chart names an existing
// Secret; no render holds a Secret: decodeStrict refuses the kind).
func TestChartShipsNoCredential(t *testing.T) {
	err := filepath.WalkDir(chartDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		credscan.File(t, p, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestChartValuesDocumented: every value of values.yaml (to the second
// level) is in the values table of docs/kubernetes.md, and the table names
// no value the chart lacks.
func TestChartValuesDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.UnmarshalStrict(b, &values); err != nil {
		t.Fatal(err)
	}
	var want []string
	for k, v := range values {
		sub, ok := v.(map[string]any)
		if !ok || len(sub) == 0 || k == "resources" {
			want = append(want, k)
			continue
		}
		for s := range sub {
			want = append(want, k+"."+s)
		}
	}
	sort.Strings(want)
	page, err := os.ReadFile(kubeDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, helmSection, ok := bytes.Cut(page, []byte("\n## Helm\n"))
	if !ok {
		t.Fatalf("%s has no section ## Helm", kubeDoc)
	}
	helmSection, _, _ = bytes.Cut(helmSection, []byte("\n## "))
	var got []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Za-z.]+)` \\|").FindAllSubmatch(helmSection, -1) {
		got = append(got, string(m[1]))
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s's values table names %q, want the chart's values %q", kubeDoc, got, want)
	}
}
