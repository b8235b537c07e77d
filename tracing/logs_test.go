package tracing

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/trace"
)

// TestAuditLogs: with OTEL_LOGS_EXPORTER=otlp an audit logger's entry is
// exported as an OTel log over OTLP/HTTP, its fields as attributes and
// the trace and span ids of the span context in its context; the logger's
// own output is unchanged.
func TestAuditLogs(t *testing.T) {
	bodies := collectLogs(t)
	p, err := Start(context.Background(), Config{Logs: ExporterOTLP})
	if err != nil {
		t.Fatal(err)
	}
	if p.AuditHook(true) == nil {
		t.Fatal("AuditHook() = nil with OTEL_LOGS_EXPORTER=otlp")
	}
	var out bytes.Buffer
	l := logrus.New()
	l.SetOutput(&out)
	l.SetFormatter(&logrus.JSONFormatter{})
	l.AddHook(p.AuditHook(true))
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	l.WithContext(ctx).WithFields(logrus.Fields{"tool": "the-tool", "exit_code": 3}).Info("call")
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := bodies()
	if len(got) != 1 {
		t.Fatalf("%d log exports, want 1", len(got))
	}
	for what, want := range map[string][]byte{"trace id": tid[:], "span id": sid[:], "the tool field": []byte("the-tool"), "the body": []byte("call")} {
		if !bytes.Contains(got[0], want) {
			t.Errorf("the export does not hold %s", what)
		}
	}
	if !bytes.Contains(out.Bytes(), []byte(`"tool":"the-tool"`)) {
		t.Errorf("the logger's own line = %q", out.String())
	}
}

// collectLogs points the OTLP exporters at a collector on 127.0.0.1 that
// keeps the bodies of the log exports it receives; bodies returns them.
func collectLogs(t *testing.T) (bodies func() [][]byte) {
	t.Helper()
	var mu sync.Mutex
	var got [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/logs" {
			mu.Lock()
			got = append(got, b)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	return func() [][]byte {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

func TestAuditHookOff(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	p, err := Start(context.Background(), Config{Traces: ExporterOTLP})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	if p.AuditHook(true) != nil {
		t.Error("AuditHook() set without OTEL_LOGS_EXPORTER")
	}
}
