package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/internal/mcptest"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tracing"
)

// recorded is a server traced into a span recorder.
func recorded(t *testing.T, opts Options) (*Server, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	opts.Tracing = tracing.Over(tp)
	return New(opts), rec
}

func spanNamed(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, s := range rec.Ended() {
			if s.Name() == name {
				return s
			}
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range rec.Ended() {
				names = append(names, s.Name())
			}
			t.Fatalf("no span %q; ended: %q", name, names)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func attrOf(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
)

// TestTraceCallStdio: a call over stdio whose _meta carries a traceparent
// is one span under the client's trace and span, from its arrival, with
// the queue wait under it; a failed call's span is an error whose
// error.type is the limit that ended it.
func TestTraceCallStdio(t *testing.T) {
	c := loadConf(t, twoTools)
	direct := &fakeRunner{res: rt.Result{Output: []byte("late"), ExitCode: -1, Limit: rt.LimitTimeout, TimedOut: true, Elapsed: time.Millisecond}}
	s, rec := recorded(t, Options{Conf: c, Direct: direct, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{})})
	w := serveWire(t, s)
	w.send(initLine)
	w.next(5 * time.Second)
	w.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"zeta","arguments":{},"_meta":{"traceparent":"00-%s-%s-01","tracestate":"k=v"}}}`, clientTrace, clientSpan))
	w.next(5 * time.Second)

	call := spanNamed(t, rec, "tools/call zeta")
	if got := call.SpanContext().TraceID().String(); got != clientTrace {
		t.Errorf("trace id = %s, want the client's %s", got, clientTrace)
	}
	if got := call.Parent().SpanID().String(); got != clientSpan || !call.Parent().IsRemote() {
		t.Errorf("parent = %s (remote %v), want the client's span %s", got, call.Parent().IsRemote(), clientSpan)
	}
	if got := call.Parent().TraceState().Get("k"); got != "v" {
		t.Errorf("tracestate k = %q, want v", got)
	}
	if call.SpanKind() != trace.SpanKindServer {
		t.Errorf("kind = %v, want server", call.SpanKind())
	}
	for key, want := range map[string]string{
		"gen_ai.tool.name": "zeta", "mcp.method.name": "tools/call", "jsonrpc.request.id": "7",
		"gen_ai.operation.name": "execute_tool", "error.type": "timeout", "toolgate.tool.kind": "external",
		"network.transport": "pipe",
	} {
		if v, ok := attrOf(call, key); !ok || v.String() != want {
			t.Errorf("%s = %q (set %v), want %q", key, v.String(), ok, want)
		}
	}
	if v, _ := attrOf(call, "process.exit.code"); v.AsInt64() != -1 {
		t.Errorf("process.exit.code = %v, want -1", v.String())
	}
	if call.Status().Code != codes.Error {
		t.Errorf("status = %v, want error", call.Status())
	}
	if _, ok := attrOf(call, "enduser.id"); ok {
		t.Error("enduser.id set without TracePrincipal")
	}
	queue := spanNamed(t, rec, "queue wait")
	if queue.Parent().SpanID() != call.SpanContext().SpanID() {
		t.Errorf("queue wait's parent = %s, want the call's %s", queue.Parent().SpanID(), call.SpanContext().SpanID())
	}
	if queue.StartTime() != call.StartTime() {
		t.Errorf("queue wait starts %v, the call %v: both at the arrival", queue.StartTime(), call.StartTime())
	}
}

// TestTraceCallRoots: with an invalid traceparent a call is the root of a
// trace of its own.
func TestTraceCallRoots(t *testing.T) {
	c := loadConf(t, twoTools)
	s, rec := recorded(t, Options{Conf: c, Direct: &fakeRunner{res: rt.Result{Output: []byte("ok")}}, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{})})
	w := serveWire(t, s)
	w.send(initLine)
	w.next(5 * time.Second)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"zeta","arguments":{},"_meta":{"traceparent":"00-zz-bad-01"}}}`)
	w.next(5 * time.Second)
	call := spanNamed(t, rec, "tools/call zeta")
	if call.Parent().IsValid() {
		t.Errorf("parent = %v, want none (the traceparent was invalid)", call.Parent())
	}
	if call.Status().Code == codes.Error {
		t.Errorf("status = %v, want unset for exit 0", call.Status())
	}
}

// TestTraceEgressSpans: each egress connection the proxy records is a
// client span under the call's, over the connection's life; a refused one
// is an error; a summary is an event; every record still reaches the
// audit sink.
func TestTraceEgressSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, parent := tp.Tracer("t").Start(context.Background(), "call")
	var got []egress.Record
	sink := egressSpans(ctx, func(r egress.Record) { got = append(got, r) })
	sink(egress.Record{Host: "example.test", Port: 443, Addr: "127.0.0.1:443", Decision: egress.Allowed, Up: 10, Down: 20, Elapsed: 5 * time.Millisecond, Credential: egress.CredentialInjected})
	sink(egress.Record{Host: "other.test", Port: 80, Decision: egress.Refused, Reason: "not in the allowlist"})
	sink(egress.Record{Decision: egress.Summary, Suppressed: 3})
	parent.End()
	if len(got) != 3 {
		t.Fatalf("records passed on = %d, want 3", len(got))
	}
	var conns []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "egress connect" {
			conns = append(conns, s)
		}
	}
	if len(conns) != 2 {
		t.Fatalf("egress spans = %d, want 2 (the summary is an event)", len(conns))
	}
	allowed, refused := conns[0], conns[1]
	if d := allowed.EndTime().Sub(allowed.StartTime()); d != 5*time.Millisecond {
		t.Errorf("allowed span lasts %v, want the connection's 5ms", d)
	}
	for key, want := range map[string]string{"server.address": "example.test", "server.port": "443", "toolgate.egress.decision": "allowed", "toolgate.egress.bytes_up": "10", "toolgate.egress.bytes_down": "20", "toolgate.egress.credential_injected": "true"} {
		if v, ok := attrOf(allowed, key); !ok || v.String() != want {
			t.Errorf("allowed %s = %q, want %q", key, v.String(), want)
		}
	}
	if refused.Status().Code != codes.Error {
		t.Errorf("refused status = %v, want error", refused.Status())
	}
	if v, _ := attrOf(refused, "error.type"); v.String() != "egress-refused" {
		t.Errorf("refused error.type = %q", v.String())
	}
	for _, s := range conns {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindClient {
			t.Errorf("%s: parent %s kind %v, want the call's, client", s.Name(), s.Parent().SpanID(), s.SpanKind())
		}
	}
}

// TestTracingOffNoSpans: without Options.Tracing, no middleware and no
// recording span reach a handler.
func TestTracingOffNoSpans(t *testing.T) {
	c := loadConf(t, twoTools)
	var recording bool
	direct := runnerFunc(func(ctx context.Context, _ rt.Invocation) (rt.Result, error) {
		recording = trace.SpanFromContext(ctx).IsRecording() || trace.SpanFromContext(ctx).SpanContext().IsValid()
		return rt.Result{}, nil
	})
	s := New(Options{Conf: c, Direct: direct, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{})})
	w := serveWire(t, s)
	w.send(initLine)
	w.next(5 * time.Second)
	w.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"zeta","arguments":{},"_meta":{"traceparent":"00-%s-%s-01"}}}`, clientTrace, clientSpan))
	w.next(5 * time.Second)
	if recording {
		t.Error("with tracing off the runner's context has a span")
	}
}

type runnerFunc func(context.Context, rt.Invocation) (rt.Result, error)

func (f runnerFunc) Run(ctx context.Context, inv rt.Invocation) (rt.Result, error) {
	return f(ctx, inv)
}

// discardExporter takes every batch and keeps nothing: the SDK's batch
// processor's work, without a network.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkTracedCall is what tracing adds to one tools/call in the
// server (the runner a fake: no process): off (no Options.Tracing), and on
// with the SDK's batch processor over an exporter that keeps nothing,
// with and without a client trace context.
func BenchmarkTracedCall(b *testing.B) {
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sdktrace.NewBatchSpanProcessor(discardExporter{})))
	defer tp.Shutdown(context.Background())
	for _, tc := range []struct {
		name string
		tp   *tracing.Provider
		meta map[string]any
	}{
		{"off", nil, nil},
		{"on", tracing.Over(tp), nil},
		{"on-with-traceparent", tracing.Over(tp), map[string]any{"traceparent": "00-" + clientTrace + "-" + clientSpan + "-01"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := New(Options{
				Conf: loadConf(b, twoTools), Direct: &fakeRunner{res: rt.Result{Output: []byte("hi\n")}},
				Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{}), Log: quiet, Audit: quiet, Tracing: tc.tp,
			})
			c := inProcess(s)
			ctx := context.Background()
			if err := c.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			init := mcp.InitializeRequest{}
			init.Params.ProtocolVersion = "2025-06-18"
			if _, err := c.Initialize(ctx, init); err != nil {
				b.Fatal(err)
			}
			req := mcp.CallToolRequest{}
			req.Params.Name = "zeta"
			req.Params.Arguments = map[string]any{}
			if tc.meta != nil {
				req.Params.Meta = &mcp.Meta{AdditionalFields: tc.meta}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.CallTool(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTraceHTTPDownstream: a call of an HTTP downstream server's tool has
// the downstream request as a client span under the call's, and the
// server gets its context as _meta.traceparent and as the W3C header.
func TestTraceHTTPDownstream(t *testing.T) {
	var mu sync.Mutex
	var header, meta string
	m := mcpserver.NewMCPServer("web", "1", mcpserver.WithToolCapabilities(true))
	m.AddTool(mcp.NewTool("echo", mcp.WithDescription("Echo.")), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		defer mu.Unlock()
		if req.Params.Meta != nil {
			meta, _ = req.Params.Meta.AdditionalFields["traceparent"].(string)
		}
		return mcp.NewToolResultText("ok"), nil
	})
	inner := mcpserver.NewStreamableHTTPServer(m)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tp := r.Header.Get("traceparent"); tp != "" {
			mu.Lock()
			header = tp
			mu.Unlock()
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	dir := t.TempDir()
	frag := fmt.Sprintf("schema_version = 8\n\n[tool_mcp_servers.web]\ntransport = \"streamable_http\"\nurl = %q\nenabled_tools = [\"echo\"]\ndefault_tools_approval_mode = \"auto\"\n", ts.URL+"/mcp")
	if err := os.WriteFile(filepath.Join(dir, "10-web.toml"), []byte(frag), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	h := newHarness(t, Options{Tracing: tracing.Over(tp)}, gateway.Options{Registry: registry.Load(dir, registry.Options{})}, nil)
	if res := h.call(t, "web__echo", map[string]any{}); res.IsError {
		t.Fatalf("web__echo = %q", resultText(res))
	}
	call := spanNamed(t, rec, "tools/call web__echo")
	down := spanNamed(t, rec, "tools/call echo")
	if down.Parent().SpanID() != call.SpanContext().SpanID() || down.SpanKind() != trace.SpanKindClient {
		t.Errorf("downstream span: parent %s kind %v, want the call's %s, client", down.Parent().SpanID(), down.SpanKind(), call.SpanContext().SpanID())
	}
	want := "00-" + down.SpanContext().TraceID().String() + "-" + down.SpanContext().SpanID().String() + "-01"
	mu.Lock()
	defer mu.Unlock()
	if meta != want || header != want {
		t.Errorf("the server got _meta.traceparent %q and header %q, want both %q", meta, header, want)
	}
	u, _ := url.Parse(ts.URL)
	if v, _ := attrOf(down, "server.address"); v.AsString() != u.Hostname() {
		t.Errorf("server.address = %q, want %q", v.AsString(), u.Hostname())
	}
}

// TestTraceHTTPPrincipal: over HTTP the W3C header parents the call's
// span (the request has no _meta), the transport is tcp, and the
// principal is on the span only with TracePrincipal.
func TestTraceHTTPPrincipal(t *testing.T) {
	for _, opt := range []bool{false, true} {
		t.Run(fmt.Sprintf("TracePrincipal=%v", opt), func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken))}, func(o *Options) {
				o.Tracing, o.TracePrincipal = tracing.Over(tp), opt
			})
			hc := &http.Client{Transport: headerRT{"traceparent", "00-" + clientTrace + "-" + clientSpan + "-01"}}
			c := mcptest.Connect(t, f.url, mcptest.Options{Token: aliceToken, HTTP: hc, Legacy: true})
			req := mcp.CallToolRequest{}
			req.Params.Name = "hello"
			req.Params.Arguments = map[string]any{}
			if res, err := c.CallTool(context.Background(), req); err != nil || res.IsError {
				t.Fatalf("hello: %v %v", err, res)
			}
			call := spanNamed(t, rec, "tools/call hello")
			if call.SpanContext().TraceID().String() != clientTrace || call.Parent().SpanID().String() != clientSpan {
				t.Errorf("parent = %s/%s, want the header's %s/%s", call.SpanContext().TraceID(), call.Parent().SpanID(), clientTrace, clientSpan)
			}
			if v, _ := attrOf(call, "network.transport"); v.AsString() != "tcp" {
				t.Errorf("network.transport = %q, want tcp", v.AsString())
			}
			v, ok := attrOf(call, "enduser.id")
			if ok != opt || (opt && v.AsString() != "alice") {
				t.Errorf("enduser.id = %q (set %v), want set %v to alice", v.AsString(), ok, opt)
			}
			spanNamed(t, rec, "queue wait") // the principal's, then the server's
			code, body := getStatus(t, f.base+"/metrics", aliceToken)
			for _, outcome := range []string{"exported", "dropped_full", "dropped_failed"} {
				if want := `toolgate_trace_spans_total{outcome="` + outcome + `"} 0`; code != 200 || !strings.Contains(body, want) {
					t.Errorf("/metrics: %d, no %q", code, want)
				}
			}
		})
	}
}

type headerRT struct{ key, value string }

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.key, h.value)
	return http.DefaultTransport.RoundTrip(r)
}

// TestTraceUnixSocket: a call over HTTP on a unix socket is
// network.transport unix.
func TestTraceUnixSocket(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := startHTTP(t, HTTPOptions{}, func(o *Options) { o.Tracing = tracing.Over(tp) })
	c := mcptest.Connect(t, f.url, mcptest.Options{HTTP: testHTTPClient(f.url), Legacy: true})
	req := mcp.CallToolRequest{}
	req.Params.Name = "hello"
	req.Params.Arguments = map[string]any{}
	if res, err := c.CallTool(context.Background(), req); err != nil || res.IsError {
		t.Fatalf("hello: %v %v", err, res)
	}
	if v, _ := attrOf(spanNamed(t, rec, "tools/call hello"), "network.transport"); v.AsString() != "unix" {
		t.Errorf("network.transport = %q, want unix", v.AsString())
	}
}

// TestTraceBoundsClientID: a client's JSON-RPC id of 3 MiB is cut to
// maxIDAttr on the call's span (it was copied whole, twice).
func TestTraceBoundsClientID(t *testing.T) {
	c := loadConf(t, twoTools)
	s, rec := recorded(t, Options{Conf: c, Direct: &fakeRunner{res: rt.Result{Output: []byte("ok")}}, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{})})
	w := serveWire(t, s)
	w.send(initLine)
	w.next(5 * time.Second)
	id := strings.Repeat("A", 3<<20)
	w.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"tools/call","params":{"name":"zeta","arguments":{}}}`, id))
	w.next(10 * time.Second)
	call := spanNamed(t, rec, "tools/call zeta")
	for _, k := range []string{"jsonrpc.request.id", "gen_ai.tool.call.id"} {
		v, _ := attrOf(call, k)
		if len(v.AsString()) > maxIDAttr+16 {
			t.Errorf("%s is %d bytes: the client's id unbounded on the span", k, len(v.AsString()))
		}
	}
}

// TestTraceClientIDsMemoryBounded: with a collector that accepts and
// never answers, the spans queued of calls with 1 MiB ids hold no more
// than their bounded attributes (they held every id whole).
func TestTraceClientIDsMemoryBounded(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+testbin.Blackhole(t))
	p, err := tracing.Start(context.Background(), tracing.Config{Traces: tracing.ExporterOTLP})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	c := loadConf(t, twoTools)
	s := New(Options{Conf: c, Tracing: p, Direct: &fakeRunner{res: rt.Result{Output: []byte("ok")}}, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{})})
	w := serveWire(t, s)
	w.send(initLine)
	w.next(5 * time.Second)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	const n = 200
	peak := before
	for i := range n {
		id := fmt.Sprintf("%d-%s", i, strings.Repeat("A", 1<<20))
		w.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"tools/call","params":{"name":"zeta","arguments":{}}}`, id))
		w.next(10 * time.Second)
		if i%25 == 24 {
			if h := heap(); h > peak {
				peak = h
			}
		}
	}
	grew := (peak - before) >> 20
	t.Logf("%d calls with 1 MiB ids (tool zeta): peak heap growth %d MiB; stats %+v", n, grew, p.Stats())
	if grew > 64 {
		t.Errorf("heap grew %d MiB: a client's ids are held by queued spans", grew)
	}
}
