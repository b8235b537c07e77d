package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestServeTracingRefused: an exporter or protocol toolgate does not run,
// from the flag or the environment, stops serve (exit 2) before anything
// starts, naming the setting.
func TestServeTracingRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"flag", []string{"--traces-exporter", "zipkin"}, nil, `toolgate serve: --traces-exporter (OTEL_TRACES_EXPORTER) "zipkin": want one of`},
		{"env", nil, map[string]string{"OTEL_TRACES_EXPORTER": "console"}, `"console": want one of ["none" "otlp"]`},
		{"protocol", nil, map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, `OTEL_EXPORTER_OTLP_PROTOCOL "http/json"`},
		{"logs", nil, map[string]string{"OTEL_LOGS_EXPORTER": "stdout"}, `OTEL_LOGS_EXPORTER "stdout"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"serve", "--conf", "/nonexistent/tools.conf"}, tc.args...), strings.NewReader(""), &stdout, &stderr)
			if code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("serve %v %v: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, tc.env, code, stdout.String(), stderr.String(), tc.want)
			}
		})
	}
}
