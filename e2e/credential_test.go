//go:build e2e

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/internal/testbin"
)

// testCA makes a CA and a certificate for 127.0.0.1 signed by it: the
// TLS of the scripted model, which toolgate's proxy verifies (the CA is in
// SSL_CERT_FILE of toolgate alone; the sandbox never trusts it).
func testCA(t *testing.T) (caFile string, cert tls.Certificate) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "toolgate e2e model CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	leaf, err := x509.CreateCertificate(rand.Reader, leafTpl, ca, &leafKey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return caFile, tls.Certificate{Certificate: [][]byte{leaf, der}, PrivateKey: leafKey}
}

// secretFile writes the credential as an operator does: root-owned, 0600,
// in a 0700 directory no sandbox binds.
func secretFile(t *testing.T, value string) string {
	t.Helper()
	d, err := os.MkdirTemp("", "toolgate-e2e-secrets-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	p := filepath.Join(d, "key")
	if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// gitWorkspace is a repository with one uncommitted change, readable by
// every sandbox id.
func gitWorkspace(t *testing.T) string {
	t.Helper()
	ws := testbin.Dir(t)
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"-c", "user.email=e2e@toolgate", "-c", "user.name=e2e", "commit", "-q", "--allow-empty", "-m", "init"}} {
		if out, err := exec.Command("git", append([]string{"-C", ws}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	writeFile(t, filepath.Join(ws, "greet.c"), "char *greet(char *n) { char b[8]; sprintf(b, \"hi %s\", n); return b; }\n")
	if err := exec.Command("chmod", "-R", "a+rX", ws).Run(); err != nil {
		t.Fatal(err)
	}
	return ws
}

// sandboxedAgent is an agent CLI as a test-class tool with a credential:
// its tools.conf lines and the header its model must get.
type sandboxedAgent struct {
	client agentClient
	wire   wire
	tool   string
	// native finds the CLI's native binary from its npm bin (the npm
	// bins are Node launchers, and node is on the executable denylist).
	native string
	lines  func(exe, ws, dest, secret string) string
	// files are written into the workspace first (dest replaced).
	files map[string]string
}

var sandboxedAgents = []sandboxedAgent{
	{
		client: agentClients[0], wire: wireResponses, tool: "codex_review",
		native: "../codex-linux-x64/vendor/*/bin/codex",
		// Codex's provider set by -c on its fixed argv (no config file):
		// no env_key, so Codex holds no key and sends none of its own;
		// the proxy sets Authorization.
		lines: func(exe, ws, dest, secret string) string {
			return fmt.Sprintf(`tool codex_review %[1]s test 120 65536 on %[2]s -- exec --ephemeral --skip-git-repo-check -c model_provider=tg -c model_providers.tg.name=tg -c model_providers.tg.base_url=https://%[3]s/v1 -c model_providers.tg.wire_api=responses -m toolgate-scripted review --uncommitted
egress codex_review %[3]s
credential codex_review %[3]s Authorization %[4]s
env codex_review HOME=/tmp CODEX_HOME=/tmp
`, exe, ws, dest, secret)
		},
	},
	{
		client: agentClients[2], wire: wireChat, tool: "opencode_review",
		native: "../opencode-ai/bin/opencode.exe",
		// OpenCode's provider in a config file of the workspace, its
		// apiKey a dummy that the proxy's credential replaces.
		files: map[string]string{"opencode.json": `{
  "$schema": "https://opencode.ai/config.json",
  "provider": {"tg": {"npm": "@ai-sdk/openai-compatible", "name": "tg",
    "options": {"baseURL": "https://DEST/v1", "apiKey": "dummy"},
    "models": {"toolgate-scripted": {"name": "toolgate-scripted"}}}},
  "model": "tg/toolgate-scripted",
  "autoupdate": false,
  "share": "disabled"
}
`},
		lines: func(exe, ws, dest, secret string) string {
			return fmt.Sprintf(`tool opencode_review %[1]s test 120 65536 on %[2]s -- run review
egress opencode_review %[3]s
credential opencode_review %[3]s Authorization %[4]s
env opencode_review HOME=/tmp OPENCODE_CONFIG=%[2]s/opencode.json
`, exe, ws, dest, secret)
		},
	},
}

// TestSandboxedAgentCredential: an agent CLI as a test-class tool, with
// egress, credential and env lines, reaches its model (TLS on 127.0.0.1,
// in a network namespace with only lo) through toolgate's proxy; the
// model gets the real key in the header; the agent's answer is the tool's
// output; the key is in nothing the tool printed.
func TestSandboxedAgentCredential(t *testing.T) {
	onlyBinary(t) // the agent CLIs are the host's npm installs
	for _, a := range sandboxedAgents {
		t.Run(a.client.name, func(t *testing.T) {
			exe := agentExe(t, a.client)
			if real, err := filepath.EvalSymlinks(exe); err == nil {
				exe = real
			}
			matches, _ := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(exe)), a.native))
			if len(matches) == 0 {
				missingDep(t, "the native binary of %s (%s) is not next to %s", a.client.name, a.native, exe)
			}
			exe, _ = filepath.Abs(matches[0])
			ns := newNetns(t)
			caFile, cert := testCA(t)
			l := ns.listen(t)
			dest := l.Addr().String()
			marker := fmt.Sprintf("tg-review-%08x", mrand.Uint32())
			m := &model{wire: a.wire, prefix: "", final: marker, results: map[int]callResult{}, called: map[int]string{}}
			var mu sync.Mutex
			var auth []string
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				auth = append(auth, r.Header.Values("Authorization")...)
				mu.Unlock()
				m.ServeHTTP(w, r)
			}), ReadHeaderTimeout: 10 * time.Second}
			go srv.Serve(tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}}))
			t.Cleanup(func() { srv.Close() })

			secret := fmt.Sprintf("Bearer sk-e2e-%016x", mrand.Uint64())
			ws := gitWorkspace(t)
			for name, text := range a.files {
				writeFile(t, filepath.Join(ws, name), strings.ReplaceAll(text, "DEST", dest))
			}
			conf := writeConf(t, a.lines(exe, ws, dest, secretFile(t, secret)))
			// OpenCode's runtime (Bun) takes more than the default 512 MiB
			// of a call: the operator raises --sandbox-memory for it.
			sv := serveCmd(t, conf, "--sandbox-memory", "2147483648")
			cmd := exec.Command(sv.argv[0], sv.argv[1:]...)
			cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+caFile)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			logs := &logWatch{}
			stderr, _ := cmd.StderrPipe()
			if err := ns.start(cmd); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			go logs.copy(stderr)
			c := client.NewClient(transport.NewIO(stdout, stdin, nil))
			ctx := t.Context()
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			ireq := mcp.InitializeRequest{}
			ireq.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
			ireq.Params.ClientInfo = mcp.Implementation{Name: "toolgate-e2e", Version: "1"}
			if _, err := c.Initialize(ctx, ireq); err != nil {
				t.Fatalf("initialize: %v\n%s", err, logs)
			}
			req := mcp.CallToolRequest{}
			req.Params.Name = a.tool
			res, err := c.CallTool(ctx, req)
			if err != nil {
				t.Fatalf("call: %v\n%s", err, logs)
			}
			out := text(res)
			t.Logf("the tool's output:\n%s", out)
			mu.Lock()
			defer mu.Unlock()
			if res.IsError || !strings.Contains(out, marker) {
				t.Errorf("the sandboxed agent's answer: isError %v, want the model's %q:\n%s\nlogs:\n%s", res.IsError, marker, out, logs)
			}
			if len(auth) == 0 {
				t.Errorf("the model got no request with Authorization")
			}
			for _, v := range auth {
				if v != secret {
					t.Errorf("the model got Authorization %q, want the credential", v)
				}
			}
			if strings.Contains(out, secret) || strings.Contains(out, strings.TrimPrefix(secret, "Bearer ")) {
				t.Errorf("the tool's output holds the key:\n%s", out)
			}
		})
	}
}
