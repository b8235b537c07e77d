//go:build e2e

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHTTPReadyzRefused: the binary's /readyz (on the metrics listener,
// as the kubelet probes it) is 503 with the reason for as long as
// tools.conf or the registry is refused — the server keeps serving its
// built-ins, but a rollout of it stops — and 200 once the sandbox is ready
// with the conf and the registry absent (built-ins only, a valid
// deployment).
func TestHTTPReadyzRefused(t *testing.T) {
	writable := writeConf(t, "")
	if err := os.Chmod(writable, 0o666); err != nil {
		t.Fatal(err)
	}
	badReg := t.TempDir()
	if err := os.WriteFile(filepath.Join(badReg, "10-bad.toml"), []byte("schema_version = 8\nbogus = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		conf  string
		extra []string
		code  int
		want  []string // in the body
	}{
		{"conf refused", writable, nil, 503, []string{
			`"conf":"refused"`, `"ready":false`,
			`"conf_reason":"tools.conf ` + writable + ` refused: ` + writable + `: file: group- or world-writable (mode 0666)`,
		}},
		{"registry refused", filepath.Join(t.TempDir(), "absent.conf"), []string{"--tool-mcp-dir", badReg}, 503, []string{
			`"conf":"absent"`, `"registry":"refused"`, `"ready":false`,
			`"registry_reason":"the tool-MCP registry ` + badReg + ` refused: ` + badReg + `/10-bad.toml:2: bogus: unknown field`,
		}},
		{"conf and registry absent", filepath.Join(t.TempDir(), "absent.conf"), []string{"--tool-mcp-dir", filepath.Join(t.TempDir(), "absent.d")}, 200, []string{
			`"conf":"absent"`, `"registry":"absent"`, `"ready":true`, `"sandbox":{"backend":"bwrap","state":"ready"}`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mport := freePort(t)
			args := append([]string{"--auth-tokens", writeTokens(t, "ci "+e2eToken), "--metrics-listen", "127.0.0.1:" + mport}, tc.extra...)
			s := startHTTPServer(t, tc.conf, args...)
			var code int
			var body string
			// Wait out the sandbox self-test: the answer must not change
			// after it.
			waitFor(t, 30*time.Second, func() bool {
				resp, err := http.Get("http://127.0.0.1:" + mport + "/readyz")
				if err != nil {
					return false
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				code, body = resp.StatusCode, string(b)
				return strings.Contains(body, `"state":"ready"`)
			})
			var st map[string]any
			if err := json.Unmarshal([]byte(body), &st); err != nil {
				t.Fatalf("/readyz body %q: %v", body, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("/readyz body lacks %s:\n%s", w, body)
				}
			}
			if code != tc.code {
				t.Errorf("/readyz = %d, want %d: %s\n%s", code, tc.code, body, s.stderr)
			}
		})
	}
}
