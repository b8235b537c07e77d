package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestServeDownstreamFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"serve", "--downstream-max-bytes", "100"}, strings.NewReader(""), &stdout, &stderr)
	if code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "--downstream-max-bytes 100: want at least 4096") {
		t.Errorf("serve --downstream-max-bytes 100: exit %d, stdout %q, stderr %q; want exit 2 and the reason", code, stdout.String(), stderr.String())
	}
	stderr.Reset()
	code = run([]string{"serve", "-h"}, strings.NewReader(""), &stdout, &stderr)
	for _, flag := range []string{"-tool-mcp-dir", "/etc/saphira/mcp/tool-mcp.d", "-eager", "-downstream-max-bytes"} {
		if !strings.Contains(stderr.String(), flag) {
			t.Errorf("serve -h (exit %d) lacks %q", code, flag)
		}
	}
}

func TestServeMaxRequestBytesFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"serve", "--max-request-bytes", "1000"}, strings.NewReader(""), &stdout, &stderr)
	if code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "--max-request-bytes 1000: want at least 65536") {
		t.Errorf("serve --max-request-bytes 1000: exit %d, stdout %q, stderr %q; want exit 2 and the reason", code, stdout.String(), stderr.String())
	}
	stderr.Reset()
	run([]string{"serve", "-h"}, strings.NewReader(""), &stdout, &stderr)
	if !strings.Contains(stderr.String(), "-max-request-bytes") || !strings.Contains(stderr.String(), "4194304") {
		t.Errorf("serve -h lacks -max-request-bytes and its default:\n%s", stderr.String())
	}
}
