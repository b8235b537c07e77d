//go:build e2e

package e2e

// TestTracingJaeger: toolgate's traces in a real backend, Jaeger
// all-in-one v1.75.0 on 127.0.0.1 (built by scripts/lib.sh jaeger), read
// back through its query API.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/mcptest"
	"github.com/toolgate/toolgate/internal/testbin"
)

// jaegerVersion is the approved release scripts/lib.sh builds.
const jaegerVersion = "v1.75.0"

// jaegerBinary is Jaeger all-in-one: TOOLGATE_JAEGER, else where
// scripts/lib.sh's jaeger builds it. Missing, the test skips loudly
// (fails under TOOLGATE_REQUIRE_ALL=1).
func jaegerBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("TOOLGATE_JAEGER")
	if p == "" {
		cache := os.Getenv("TOOLGATE_CACHE")
		if cache == "" {
			base, err := os.UserCacheDir()
			if err != nil {
				testbin.Missing(t, "Jaeger: no cache directory: %v", err)
			}
			cache = filepath.Join(base, "toolgate")
		}
		p = filepath.Join(cache, "jaeger-"+jaegerVersion, "jaeger")
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		testbin.Missing(t, "Jaeger all-in-one %s is not built at %s (scripts/lib.sh jaeger builds it; scripts/e2e.sh and scripts/test.sh run it)", jaegerVersion, p)
	}
	return p
}

type jaegerServer struct {
	otlpHTTP string // http://127.0.0.1:PORT, the OTLP/HTTP receiver
	query    string // http://127.0.0.1:PORT, the query API
}

// startJaeger starts Jaeger with e2e/testdata/jaeger.yaml: every
// listener on 127.0.0.1.
func startJaeger(t *testing.T) *jaegerServer {
	t.Helper()
	bin := jaegerBinary(t)
	cfg, err := filepath.Abs("testdata/jaeger.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]string{}
	for _, k := range []string{"JAEGER_QUERY_HTTP_PORT", "JAEGER_QUERY_GRPC_PORT", "JAEGER_OTLP_GRPC_PORT", "JAEGER_OTLP_HTTP_PORT"} {
		ports[k] = freePort(t)
	}
	cmd := exec.Command(bin, "--config", "file:"+cfg)
	cmd.Env = os.Environ()
	for k, v := range ports {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var log testbin.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	j := &jaegerServer{otlpHTTP: "http://127.0.0.1:" + ports["JAEGER_OTLP_HTTP_PORT"], query: "http://127.0.0.1:" + ports["JAEGER_QUERY_HTTP_PORT"]}
	if !waitUntil(30*time.Second, func() bool {
		resp, err := http.Get(j.query + "/api/services")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}) {
		t.Fatalf("Jaeger's query API did not answer within 30 s:\n%s", &log)
	}
	return j
}

// jspan is a span as Jaeger's query API returns it.
type jspan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

func (s jspan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

func (s jspan) tag(k string) string {
	for _, kv := range s.Tags {
		if kv.Key == k {
			return fmt.Sprint(kv.Value)
		}
	}
	return ""
}

// trace polls the query API until trace id holds a span of every name
// in want, and returns its spans by name (the last of a name).
func (j *jaegerServer) trace(t *testing.T, id string, want ...string) map[string]jspan {
	t.Helper()
	var spans map[string]jspan
	ok := waitUntil(20*time.Second, func() bool {
		resp, err := http.Get(j.query + "/api/traces/" + id)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct {
			Data []struct {
				TraceID string  `json:"traceID"`
				Spans   []jspan `json:"spans"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.Data) != 1 {
			return false
		}
		spans = map[string]jspan{}
		for _, s := range body.Data[0].Spans {
			spans[s.OperationName] = s
		}
		for _, w := range want {
			if _, ok := spans[w]; !ok {
				return false
			}
		}
		return true
	})
	if !ok {
		names := make([]string, 0, len(spans))
		for n := range spans {
			names = append(names, n)
		}
		t.Fatalf("trace %s: spans %q, want %q", id, names, want)
	}
	return spans
}

// tracedCall is one call with a client trace context, and the span tree
// its trace must hold: each span's parent by name ("client" is the
// client's own span).
type tracedCall struct {
	tool    string
	args    map[string]any
	parents map[string]string
	check   func(t *testing.T, res *mcp.CallToolResult, spans map[string]jspan)
}

// tracingSetup is the tools.conf, workspace and registry of the test: a
// test-class tool, an egress tool (to a listener here), a read-class
// tool that prints its environment, outline (ctags) over the workspace,
// and the probe as a downstream stdio server.
func tracingSetup(t *testing.T, j *jaegerServer) (conf, root, reg, egressAddr string) {
	t.Helper()
	if _, err := exec.LookPath("ctags"); err != nil {
		testbin.Missing(t, "ctags (outline's helper): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	egressAddr = l.Addr().String()
	probe, dir := testbin.Probe(t), testbin.Dir(t)
	conf = writeConf(t, fmt.Sprintf(`tool sbx %[1]s test 20 4096 on %[2]s -- echo sandboxed
tool net %[1]s test 30 65536 on %[2]s -- egress get:http://%[3]s/
egress net %[3]s
tool env %[1]s read 10 4096 off %[2]s -- env
`, probe, dir, egressAddr))
	root = testbin.Dir(t)
	if err := os.WriteFile(filepath.Join(root, "a.go"), []byte("package a\n\nfunc A() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg = registryDir(t, fmt.Sprintf(`schema_version = 8

[tool_mcp_servers.probe]
transport = "stdio"
command = %q
args = ["mcp"]
enabled_tools = ["echo"]
default_tools_approval_mode = "auto"
startup_timeout_sec = 30
`, probe))
	web := startTracedDownstream(t, j)
	if err := os.WriteFile(filepath.Join(reg, "20-web.toml"), []byte(fmt.Sprintf(`schema_version = 8

[tool_mcp_servers.web]
transport = "streamable_http"
url = %q
enabled_tools = ["hop"]
default_tools_approval_mode = "auto"
`, web)), 0o644); err != nil {
		t.Fatal(err)
	}
	return conf, root, reg, egressAddr
}

// startTracedDownstream starts an MCP server over streamable HTTP on
// 127.0.0.1 that exports its own spans to j (service e2e-downstream):
// its tool hop is a span under the trace context the call's _meta
// carries, so that toolgate's downstream request is seen to be the
// parent of the downstream server's own span in the backend.
func startTracedDownstream(t *testing.T, j *jaegerServer) string {
	t.Helper()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(j.otlpHTTP+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "e2e-downstream"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	m := mcpserver.NewMCPServer("web", "1", mcpserver.WithToolCapabilities(true))
	m.AddTool(mcp.NewTool("hop", mcp.WithDescription("A traced hop.")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		carrier := propagation.MapCarrier{}
		if req.Params.Meta != nil {
			for k, v := range req.Params.Meta.AdditionalFields {
				if s, ok := v.(string); ok {
					carrier[k] = s
				}
			}
		}
		ctx = propagation.TraceContext{}.Extract(ctx, carrier)
		_, span := tp.Tracer("e2e-downstream").Start(ctx, "downstream hop", trace.WithSpanKind(trace.SpanKindServer))
		span.End()
		return mcp.NewToolResultText("hopped"), nil
	})
	ts := httptest.NewServer(mcpserver.NewStreamableHTTPServer(m))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

func tracedCalls(egressAddr string) []tracedCall {
	host, port, _ := net.SplitHostPort(egressAddr)
	return []tracedCall{
		{tool: "sbx", parents: map[string]string{
			"tools/call sbx": "client", "queue wait": "tools/call sbx", "process run": "tools/call sbx", "output capture": "tools/call sbx",
		}, check: func(t *testing.T, _ *mcp.CallToolResult, spans map[string]jspan) {
			// The pool's prepared sandbox, or one made on the path.
			take, make := spans["sandbox take"], spans["sandbox make"]
			if take.SpanID == "" && make.SpanID == "" {
				t.Errorf("sbx: neither a sandbox take nor a sandbox make span")
			}
			if got := spans["tools/call sbx"].tag("process.exit.code"); got != "0" {
				t.Errorf("sbx: process.exit.code = %q, want 0", got)
			}
		}},
		{tool: "outline", args: map[string]any{"path": "a.go"}, parents: map[string]string{
			"tools/call outline": "client", "helper ctags": "tools/call outline", "process run": "helper ctags", "output capture": "helper ctags",
		}},
		{tool: "net", parents: map[string]string{
			"tools/call net": "client", "process run": "tools/call net", "egress connect": "tools/call net",
		}, check: func(t *testing.T, _ *mcp.CallToolResult, spans map[string]jspan) {
			// Its proxy started with the prepared sandbox's release
			// (sandbox take), or with a sandbox made on the path.
			if spans["sandbox take"].SpanID == "" && spans["sandbox make"].SpanID == "" {
				t.Errorf("net: neither a sandbox take nor a sandbox make span")
			}
			e := spans["egress connect"]
			if e.tag("server.address") != host || e.tag("server.port") != port || e.tag("toolgate.egress.decision") != "allowed" || e.tag("toolgate.egress.bytes_down") == "0" {
				t.Errorf("egress connect: tags %+v, want %s:%s allowed with bytes", e.Tags, host, port)
			}
		}},
		{tool: "web__hop", parents: map[string]string{
			"tools/call web__hop": "client", "tools/call hop": "tools/call web__hop", "downstream hop": "tools/call hop",
		}, check: func(t *testing.T, _ *mcp.CallToolResult, spans map[string]jspan) {
			// The downstream server's own span, exported by it to the
			// same backend, under toolgate's downstream request.
			if down := spans["tools/call hop"]; down.tag("server.address") != "127.0.0.1" {
				t.Errorf("tools/call hop: server.address %q, want 127.0.0.1", down.tag("server.address"))
			}
		}},
		{tool: "probe__echo", args: map[string]any{}, parents: map[string]string{
			"tools/call probe__echo": "client", "tools/call echo": "tools/call probe__echo",
		}, check: func(t *testing.T, res *mcp.CallToolResult, spans map[string]jspan) {
			// The downstream server got the trace context in _meta, with
			// the downstream request's span as its parent.
			down := spans["tools/call echo"]
			if !strings.Contains(text(res), "-"+down.SpanID+"-01") {
				t.Errorf("probe__echo: the server saw %q, want a traceparent naming span %s", text(res), down.SpanID)
			}
			if down.tag("span.kind") != "client" || down.tag("toolgate.downstream.server") != "probe" {
				t.Errorf("tools/call echo: tags %+v", down.Tags)
			}
		}},
	}
}

// assertTree checks the spans' parents under the client's span.
func assertTree(t *testing.T, tc tracedCall, spans map[string]jspan, clientSpan string) {
	t.Helper()
	t.Logf("%s: spans %q", tc.tool, keys(spanParents(spans)))
	for name, parent := range tc.parents {
		want := clientSpan
		if parent != "client" {
			want = spans[parent].SpanID
		}
		if got := spans[name].parent(); got != want {
			t.Errorf("%s: span %q's parent = %s, want %s (%s)", tc.tool, name, got, want, parent)
		}
	}
	root := spans["tools/call "+tc.tool]
	if root.tag("gen_ai.tool.name") != tc.tool || root.tag("span.kind") != "server" || root.tag("mcp.method.name") != "tools/call" {
		t.Errorf("%s: the call's span has tags %+v", tc.tool, root.Tags)
	}
}

func traceIDs(i int, transport string) (traceID, spanID string) {
	n := len(transport)
	return fmt.Sprintf("%016x%016x", 0x7e57_0000+n, i+1), fmt.Sprintf("%016x", 0xc11e_0000+n*16+i)
}

func TestTracingJaeger(t *testing.T) {
	onlyBinary(t) // the backend listens on the host's 127.0.0.1
	j := startJaeger(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", j.otlpHTTP)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-e2e-secret=s3cret")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	conf, root, reg, egressAddr := tracingSetup(t, j)
	calls := tracedCalls(egressAddr)

	t.Run("stdio", func(t *testing.T) {
		c, _ := start(t, "2025-06-18", conf, "--root", root, "--tool-mcp-dir", reg)
		for i, tc := range calls {
			traceID, spanID := traceIDs(i, "stdio")
			res := callTraced(t, c, tc, map[string]any{"traceparent": "00-" + traceID + "-" + spanID + "-01"}, nil)
			spans := j.trace(t, traceID, keys(tc.parents)...)
			assertTree(t, tc, spans, spanID)
			if tc.check != nil {
				tc.check(t, res, spans)
			}
		}
		res, err := call(t, c, "env", map[string]any{})
		if err != nil || strings.Contains(text(res), "OTEL_") || strings.Contains(text(res), "s3cret") {
			t.Errorf("env: %v %q, want none of toolgate's OTEL_* variables", err, text(res))
		}
	})

	t.Run("http", func(t *testing.T) {
		s := startHTTPServer(t, conf, "--auth-tokens", writeTokens(t, "ci-runner "+e2eToken), "--root", root, "--tool-mcp-dir", reg)
		hc := &http.Client{Transport: traceHeaders{http.DefaultTransport}}
		c := mcptest.Connect(t, s.url, mcptest.Options{Token: e2eToken, HTTP: hc, Name: "toolgate-e2e-tracing"})
		for i, tc := range calls {
			traceID, spanID := traceIDs(i, "http")
			tp := "00-" + traceID + "-" + spanID + "-01"
			// Half the calls carry the W3C header, half _meta.
			var meta map[string]any
			header := tp
			if i%2 == 1 {
				meta, header = map[string]any{"traceparent": tp}, ""
			}
			res := callTraced(t, c, tc, meta, &header)
			spans := j.trace(t, traceID, keys(tc.parents)...)
			assertTree(t, tc, spans, spanID)
			if got := spans["tools/call "+tc.tool].tag("network.transport"); got != "tcp" {
				t.Errorf("%s over HTTP: network.transport = %q, want tcp", tc.tool, got)
			}
			if tc.check != nil {
				tc.check(t, res, spans)
			}
		}
	})
}

type traceHeaderKey struct{}

// traceHeaders sets the traceparent header a call's context names.
type traceHeaders struct{ base http.RoundTripper }

func (h traceHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	if tp, _ := r.Context().Value(traceHeaderKey{}).(*string); tp != nil && *tp != "" {
		r = r.Clone(r.Context())
		r.Header.Set("traceparent", *tp)
	}
	return h.base.RoundTrip(r)
}

func callTraced(t *testing.T, c *client.Client, tc tracedCall, meta map[string]any, header *string) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if header != nil {
		ctx = context.WithValue(ctx, traceHeaderKey{}, header)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = tc.tool
	req.Params.Arguments = tc.args
	if tc.args == nil {
		req.Params.Arguments = map[string]any{}
	}
	if meta != nil {
		req.Params.Meta = &mcp.Meta{AdditionalFields: meta}
	}
	res, err := c.CallTool(ctx, req)
	if err != nil || res.IsError {
		t.Fatalf("%s: %v %q", tc.tool, err, text(res))
	}
	return res
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func spanParents(spans map[string]jspan) map[string]string {
	m := map[string]string{}
	for n, s := range spans {
		m[n] = s.parent()
	}
	return m
}
