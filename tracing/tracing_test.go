package tracing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name         string
		env          map[string]string
		traces, logs Exporter
	}{
		{"unset", nil, "", ""},
		{"otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_LOGS_EXPORTER": "otlp"}, ExporterOTLP, ExporterOTLP},
		{"sdk disabled", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, ExporterNone, ExporterNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := FromEnv(env(tc.env))
			if c.Traces != tc.traces || c.Logs != tc.logs {
				t.Errorf("FromEnv(%v) = %q, %q, want %q, %q", tc.env, c.Traces, c.Logs, tc.traces, tc.logs)
			}
		})
	}
}

func TestStartRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		c       Config
		wantErr string
	}{
		{"unknown exporter", Config{Traces: "zipkin"}, `OTEL_TRACES_EXPORTER "zipkin": want one of`},
		{"a list", Config{Traces: "otlp,console"}, `OTEL_TRACES_EXPORTER "otlp,console"`},
		{"unknown logs exporter", Config{Logs: "console"}, `OTEL_LOGS_EXPORTER "console"`},
		{"http/json", Config{Traces: ExporterOTLP, Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})}, `OTEL_EXPORTER_OTLP_PROTOCOL "http/json": want "http/protobuf" or "grpc"`},
		{"traces protocol wins", Config{Traces: ExporterOTLP, Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"})}, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL "udp"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Start(context.Background(), tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Start(%+v) = %v, %v, want error %q", tc.c, p, err, tc.wantErr)
			}
		})
	}
}

// TestStartNone: with no exporter nothing starts, and the tracer provider
// is the API's no-op one.
func TestStartNone(t *testing.T) {
	p, err := Start(context.Background(), Config{Traces: ExporterNone})
	if err != nil || p != nil {
		t.Fatalf("Start(none) = %v, %v, want nil, nil", p, err)
	}
	if _, ok := p.TracerProvider().(noop.TracerProvider); !ok {
		t.Errorf("TracerProvider() = %T, want noop", p.TracerProvider())
	}
	if err := p.Shutdown(context.Background()); err != nil || p.Stats() != (Stats{}) {
		t.Errorf("nil provider: Shutdown %v, Stats %+v", err, p.Stats())
	}
}

// TestExportOTLPHTTP: the exporter reads its endpoint, headers and the
// service name from the standard variables; the spans reach an OTLP/HTTP
// listener and are counted.
func TestExportOTLPHTTP(t *testing.T) {
	var got atomic.Int64
	var header, path, ctype atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header.Store(r.Header.Get("X-Tenant"))
		path.Store(r.URL.Path)
		ctype.Store(r.Header.Get("Content-Type"))
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "svc-under-test") && strings.Contains(string(b), "the-span") {
			got.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "X-Tenant=t1")
	t.Setenv("OTEL_SERVICE_NAME", "svc-under-test")
	p, err := Start(context.Background(), Config{Traces: ExporterOTLP})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.TracerProvider().Tracer("t").Start(context.Background(), "the-span")
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got.Load() != 1 || header.Load() != "t1" || path.Load() != "/v1/traces" || ctype.Load() != "application/x-protobuf" {
		t.Errorf("export: %d requests with the span, X-Tenant %v, path %v, content type %v", got.Load(), header.Load(), path.Load(), ctype.Load())
	}
	if st := p.Stats(); st.Exported != 1 || st.DroppedFull+st.DroppedFailed != 0 {
		t.Errorf("Stats = %+v, want 1 exported", st)
	}
}

// TestCollectorUnreachable: with nothing listening at the endpoint, ending
// spans never waits, the failed export is counted, and Shutdown returns
// within its grace.
func TestCollectorUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "300")
	p, err := Start(context.Background(), Config{Traces: ExporterOTLP})
	if err != nil {
		t.Fatal(err)
	}
	tr := p.TracerProvider().Tracer("t")
	for range 100 {
		_, span := tr.Start(context.Background(), "s")
		span.End()
	}
	start := time.Now()
	_ = p.Shutdown(context.Background())
	if d := time.Since(start); d > ShutdownGrace+time.Second {
		t.Errorf("Shutdown took %v, want at most about %v", d, ShutdownGrace)
	}
	if st := p.Stats(); st.Exported != 0 || st.DroppedFailed+st.DroppedFull == 0 {
		t.Errorf("Stats = %+v, want the spans dropped and counted", st)
	}
}

// TestSamplerFromEnv: the SDK reads OTEL_TRACES_SAMPLER and its argument:
// parentbased_traceidratio at 0 samples no root of its own, and follows a
// client's sampled flag.
func TestSamplerFromEnv(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	p, err := Start(context.Background(), Config{Traces: ExporterOTLP})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	tr := p.TracerProvider().Tracer("t")
	_, root := tr.Start(context.Background(), "root")
	if root.SpanContext().IsSampled() {
		t.Error("a root span was sampled at ratio 0")
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	_, child := tr.Start(parent, "child")
	if !child.SpanContext().IsSampled() {
		t.Error("a span under a sampled client span was not sampled")
	}
}
