package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// tracingGroup holds the rows of the trace pipeline's cost (issue 26).
const tracingGroup = "tracing (OTLP/HTTP, direct read tool)"

// tracingPaths measure the direct read tool's call with tracing off (no
// OTEL_* variable: nothing started), on with an OTLP/HTTP collector on
// 127.0.0.1 taking every export, and on with the collector stopped
// (nothing listens at the endpoint): every span is sampled (no client
// trace context, the SDK's default parentbased_always_on), five a call.
func (b *bench) tracingPaths(conf string, add func(*path, error)) {
	base := withoutOTEL(os.Environ())
	s, err := dial(b.serverArgv(conf), base, b.log)
	add(b.mcpPath(s, tracingGroup, "tracing off", "no OTEL_* variable: no exporter, no middleware, the API's no-op spans", "rd", nil), err)

	sink, err := startOTLPSink()
	if err != nil {
		add(&path{group: tracingGroup, name: "tracing on, collector reachable"}, err)
	} else {
		on := append(base, "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT="+sink.url)
		s, err := dial(b.serverArgv(conf), on, b.log)
		p := b.mcpPath(s, tracingGroup, "tracing on, collector reachable", "OTEL_TRACES_EXPORTER=otlp to an OTLP/HTTP listener on 127.0.0.1 that takes every export (the SDK's batch processor, toolgate's bounded hand-off)", "rd", nil)
		closeSession := p.close
		p.close = func() {
			if closeSession != nil {
				closeSession()
			}
			logf(b.stderr, "tracing: the collector took %d exports", sink.exports.Load())
			sink.close()
		}
		add(p, err)
	}

	stopped, err := closedEndpoint()
	if err != nil {
		add(&path{group: tracingGroup, name: "tracing on, collector stopped"}, err)
		return
	}
	off := append(base, "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT="+stopped)
	s, err = dial(b.serverArgv(conf), off, b.log)
	add(b.mcpPath(s, tracingGroup, "tracing on, collector stopped", "the same with nothing listening at the endpoint: every export fails (counted), no call waits", "rd", nil), err)
}

// withoutOTEL is env less every OTEL_* variable.
func withoutOTEL(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return out
}

// otlpSink is an OTLP/HTTP endpoint on 127.0.0.1 that answers every
// export 200 with an empty ExportTraceServiceResponse.
type otlpSink struct {
	url     string
	exports atomic.Int64
	srv     *http.Server
}

func startOTLPSink() (*otlpSink, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otlp sink: %w", err)
	}
	s := &otlpSink{url: "http://" + l.Addr().String()}
	s.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/traces" {
			s.exports.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

func (s *otlpSink) close() { _ = s.srv.Close() }

// closedEndpoint is the URL of a port on 127.0.0.1 nothing listens at.
func closedEndpoint() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr, nil
}
