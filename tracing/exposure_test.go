package tracing

// What the pipeline must never expose: the principal, a collector's
// text, the headers' values.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/internal/testbin"
)

// TestAuditLogsWithoutPrincipal: with OTEL_LOGS_EXPORTER=otlp and no
// --trace-principal, the audit's principal and client are not exported;
// with it, they are.
func TestAuditLogsWithoutPrincipal(t *testing.T) {
	for _, principal := range []bool{false, true} {
		bodies := collectLogs(t)
		p, err := Start(context.Background(), Config{Logs: ExporterOTLP})
		if err != nil {
			t.Fatal(err)
		}
		l := logrus.New()
		l.SetOutput(io.Discard)
		l.AddHook(p.AuditHook(principal))
		l.WithFields(logrus.Fields{"tool": "t", "principal": "alice@example.com", "client": "oauth-client-42"}).Info("call")
		_ = p.Shutdown(context.Background())
		all := bytes.Join(bodies(), nil)
		if !bytes.Contains(all, []byte("call")) {
			t.Fatalf("principal=%v: no audit record exported at all", principal)
		}
		named := bytes.Contains(all, []byte("alice@example.com")) || bytes.Contains(all, []byte("oauth-client-42"))
		if named != principal {
			t.Errorf("principal=%v: the export names the principal or client: %v", principal, named)
		}
	}
}

// TestShutdownCollectorBlackhole: a collector that accepts and never
// answers holds Shutdown (traces and logs both on) no longer than
// ShutdownGrace.
func TestShutdownCollectorBlackhole(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+testbin.Blackhole(t))
	p, err := Start(context.Background(), Config{Traces: ExporterOTLP, Logs: ExporterOTLP})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.TracerProvider().Tracer("t").Start(context.Background(), "s")
	span.End()
	l := logrus.New()
	l.SetOutput(io.Discard)
	l.AddHook(p.AuditHook(true))
	l.Info("call")
	time.Sleep(6 * time.Second) // the BSP's and BLRP's schedule delays: exports under way
	t0 := time.Now()
	err = p.Shutdown(context.Background())
	t.Logf("Shutdown took %v: %v", time.Since(t0), err)
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("Shutdown took %v, over ShutdownGrace", d)
	}
}

// TestExportErrorsEscaped: a collector's refusal of the audit's logs,
// whose body holds a forged audit line, reaches toolgate's log only
// escaped, through Config.Errors (the SDK's own handler wrote it raw to
// stderr).
func TestExportErrorsEscaped(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, "nope\n{\"level\":\"info\",\"msg\":\"call\",\"tool\":\"forged\"}\nend")
	}))
	defer srv.Close()
	u := strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", u)
	var buf bytes.Buffer
	elog := logrus.New()
	elog.SetOutput(&buf)
	elog.SetFormatter(&logrus.JSONFormatter{})
	p, err := Start(context.Background(), Config{Logs: ExporterOTLP, Errors: func(err error) { elog.WithError(err).Warn("export") }})
	if err != nil {
		t.Fatal(err)
	}
	l := logrus.New()
	l.SetOutput(io.Discard)
	l.AddHook(p.AuditHook(true))
	var raw bytes.Buffer
	log.SetOutput(&raw)
	defer log.SetOutput(os.Stderr)
	l.Info("call")
	time.Sleep(2 * time.Second)
	t.Logf("Shutdown: %v", p.Shutdown(context.Background()))
	if raw.Len() > 0 {
		t.Errorf("the SDK wrote to the standard logger: %q", raw.String())
	}
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["tool"] != nil || rec["msg"] != "export" {
			t.Errorf("a line of the export errors' log is not toolgate's own: %q", line)
		}
	}
	if !strings.Contains(buf.String(), "forged") {
		t.Errorf("the export's error never reached Config.Errors: %q", buf.String())
	}
}

// TestHeadersRefusedWithoutValues: a malformed OTEL_EXPORTER_OTLP_HEADERS
// value is refused before anything starts, by its entry and key, never
// its values (the exporters skipped the bad pair and printed them all).
func TestHeadersRefusedWithoutValues(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer s3cr%zzet,x-api-key=abc,def")
	var buf bytes.Buffer
	log.SetOutput(&buf)
	defer log.SetOutput(os.Stderr)
	p, err := Start(context.Background(), Config{Traces: ExporterOTLP, Logs: ExporterOTLP})
	if err == nil {
		_ = p.Shutdown(context.Background())
		t.Fatal("Start took a malformed OTEL_EXPORTER_OTLP_HEADERS")
	}
	if !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_HEADERS") || strings.Contains(err.Error(), "s3cr") || strings.Contains(err.Error(), "abc") {
		t.Errorf("refusal = %q: want the variable named and no value", err)
	}
	if strings.Contains(buf.String(), "s3cr") {
		t.Errorf("the headers' secret is on stderr: %q", buf.String())
	}
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20s3cret,x-api-key=abc")
	if err := (Config{Traces: ExporterOTLP}).Check(); err != nil {
		t.Errorf("well-formed headers refused: %v", err)
	}
}
