package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/auth/authtest"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/mcptest"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
)

// The HTTP transport's tests run the real handler on a real listener on
// 127.0.0.1, against a real issuer (an httptest server on 127.0.0.1
// serving RFC 8414 metadata and a JWKS of keys made here, signing tokens
// with them). Execution is a fakeRunner: what is under test is what
// reaches it, and that nothing does when a request is refused.

const httpConf = `tool hello EXE read 1 100 off DIR --
tool sbx EXE test 1 100 on DIR --
tool other EXE read 1 100 off DIR --
`

type httpFixture struct {
	url     string
	base    string
	sock    string // the unix socket served on (a fixture without authentication)
	metrics string // the base URL of the metrics listener, when started
	h       *HTTP
	srv     *Server
	direct  *fakeRunner
	sandbox *fakeRunner
	log     *testbin.Buffer
	audit   *testbin.Buffer
	stop    context.CancelFunc
	done    chan error
}

type fixtureOpt func(*Options)

// unixSocketPath is a socket path in a fresh directory of root's (short:
// a socket path has at most 107 bytes).
func unixSocketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "mcp.sock")
}

// unixClients are the HTTP clients of the unix sockets the tests serve
// on, by the made-up host of their base URL.
var (
	unixClients sync.Map // host → *http.Client
	unixSeq     atomic.Int64
)

// registerUnixSocket returns a base URL whose requests testHTTPClient
// sends through the socket at path.
func registerUnixSocket(path string) string {
	host := fmt.Sprintf("sock%d.localhost", unixSeq.Add(1))
	unixClients.Store(host, &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}})
	return "http://" + host
}

// testHTTPClient is the client for rawURL: through its unix socket when a
// fixture registered one, otherwise net/http's default.
func testHTTPClient(rawURL string) *http.Client {
	if u, err := url.Parse(rawURL); err == nil {
		if c, ok := unixClients.Load(u.Host); ok {
			return c.(*http.Client)
		}
	}
	return http.DefaultClient
}

func startHTTP(t *testing.T, hopts HTTPOptions, fopts ...fixtureOpt) *httpFixture {
	t.Helper()
	return startHTTPWith(t, hopts, false, fopts...)
}

// startHTTPWith is startHTTP, also serving a metrics listener (the
// --metrics-listen one) on 127.0.0.1 when metrics is set.
func startHTTPWith(t *testing.T, hopts HTTPOptions, metrics bool, fopts ...fixtureOpt) *httpFixture {
	t.Helper()
	f := &httpFixture{
		direct:  &fakeRunner{res: rt.Result{Output: []byte("hi\n")}},
		sandbox: &fakeRunner{res: rt.Result{Output: []byte("sandboxed\n")}},
		log:     &testbin.Buffer{},
		audit:   &testbin.Buffer{},
	}
	log := logrus.New()
	log.SetOutput(f.log)
	log.SetLevel(logrus.DebugLevel)
	audit := logrus.New()
	audit.SetOutput(f.audit)
	audit.SetFormatter(&logrus.JSONFormatter{})
	opts := Options{
		Version: "test", Conf: loadConf(t, httpConf), Direct: f.direct,
		Sandbox: rt.ReadySandbox("bwrap", f.sandbox), MaxConcurrent: 8, Log: log, Audit: audit, Metrics: true,
	}
	for _, o := range fopts {
		o(&opts)
	}
	f.srv = New(opts)
	h, err := NewHTTP(f.srv, hopts)
	if err != nil {
		t.Fatal(err)
	}
	f.h = h
	// Without authentication Serve takes only a unix socket.
	var ln net.Listener
	if hopts.Auth == nil {
		f.sock = unixSocketPath(t)
		ln, err = ListenUnix(f.sock, -1)
		f.base = registerUnixSocket(f.sock)
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			f.base = "http://" + ln.Addr().String()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	f.url = f.base + MCPPath
	ctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	f.done = make(chan error, 1)
	var mln net.Listener
	if metrics {
		if mln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		f.metrics = "http://" + mln.Addr().String()
	}
	go func() { f.done <- h.Serve(ctx, ln, mln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-f.done:
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return after its context ended")
		}
	})
	return f
}

func (f *httpFixture) ran() int { return len(f.direct.invocations()) + len(f.sandbox.invocations()) }

// auditRecords returns the audit log's call records.
func (f *httpFixture) auditRecords(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(f.audit.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// rpc posts one JSON-RPC message to the MCP endpoint.
type rpcReq struct {
	token   string
	body    string
	headers map[string]string
	method  string
}

type rpcResp struct {
	status int
	header http.Header
	body   string
}

func (f *httpFixture) post(t *testing.T, r rpcReq) rpcResp {
	t.Helper()
	resp := mcptest.Post(t, testHTTPClient(f.url), f.url, mcptest.Request{Method: r.method, Token: r.token, Body: r.body, Header: r.headers})
	return rpcResp{status: resp.Status, header: resp.Header, body: resp.Body}
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

func callBody(tool string) string {
	return `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + tool + `"}}`
}

// mcpClient connects mcptest's client with token through testHTTPClient,
// in the 2025-11-25 session era (legacy) or the stateless 2026-07-28 one.
func mcpClient(t *testing.T, url, token string, legacy bool) *client.Client {
	t.Helper()
	return mcptest.Connect(t, url, mcptest.Options{Token: token, Legacy: legacy, HTTP: testHTTPClient(url), Name: "http-test", Timeout: 10 * time.Second})
}

// tokenFile writes a token file of name → token (scopes after a space).
func tokenFile(t *testing.T, lines ...string) *conf.Tokens {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "tokens")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	toks, err := conf.LoadTokens(p)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

const (
	aliceToken = "alice-0123456789abcdef0123456789abcdef"
	bobToken   = "bob-0123456789abcdef0123456789abcdef00"
)

func TestHTTPServesBothEras(t *testing.T) {
	f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken))})
	for _, tc := range []struct {
		name   string
		legacy bool
		want   string
	}{
		{"2025-11-25 session", true, mcp.ProtocolVersion20251125},
		{"2026-07-28 stateless", false, mcp.ProtocolVersion20260728},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mcpClient(t, f.url, aliceToken, tc.legacy)
			if got := c.GetSessionId(); tc.legacy == (got == "") {
				t.Errorf("session id %q: want one only in the session era", got)
			}
			if v := c.ProtocolVersion(); v != tc.want {
				t.Errorf("negotiated %q, want %q", v, tc.want)
			}
			res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range res.Tools {
				names = append(names, tl.Name)
			}
			for _, want := range []string{"checkpoint_status", "hello", "sbx", "other"} {
				if !slices.Contains(names, want) {
					t.Errorf("tools/list = %v, want %s in it", names, want)
				}
			}
			req := mcp.CallToolRequest{}
			req.Params.Name = "sbx"
			req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
			out, err := c.CallTool(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if txt := resultText(out); !strings.HasPrefix(txt, "sandboxed\n[exit=0") || out.IsError {
				t.Errorf("sbx answered %q (isError %v)", txt, out.IsError)
			}
		})
	}
	recs := f.auditRecords(t)
	calls := 0
	for _, r := range recs {
		if r["tool"] != "sbx" {
			continue
		}
		calls++
		if r["principal"] != "alice" || r["auth"] != auth.MethodToken || r["traceparent"] != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
			t.Errorf("audit record %v: want principal alice, auth token and the traceparent", r)
		}
	}
	if calls != 2 || len(f.sandbox.invocations()) != 2 {
		t.Errorf("%d audit records and %d sandbox runs of sbx, want 2 each", calls, len(f.sandbox.invocations()))
	}
}

func TestHTTPStaticTokens(t *testing.T) {
	f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t,
		"alice "+aliceToken,
		"bob sha256:"+hexSHA(bobToken)))})
	for _, tc := range []struct {
		name, token string
		header      string // raw Authorization
		status      int
		challenge   string
	}{
		{name: "no token", status: 401, challenge: `Bearer realm="toolgate"`},
		{name: "unknown token", token: "x" + aliceToken, status: 401, challenge: `error="invalid_token"`},
		{name: "a prefix of a token", token: aliceToken[:32], status: 401, challenge: `error="invalid_token"`},
		{name: "basic auth", header: "Basic YWxpY2U6cHc=", status: 400, challenge: `error="invalid_request"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rpcReq{token: tc.token, body: callBody("hello")}
			if tc.header != "" {
				r.headers = map[string]string{"Authorization": tc.header}
			}
			got := f.post(t, r)
			if got.status != tc.status || !strings.Contains(got.header.Get("WWW-Authenticate"), tc.challenge) {
				t.Errorf("status %d, WWW-Authenticate %q; want %d and %q", got.status, got.header.Get("WWW-Authenticate"), tc.status, tc.challenge)
			}
		})
	}
	if n := f.ran(); n != 0 {
		t.Fatalf("%d tool runs after refused tokens, want 0", n)
	}
	for _, tok := range []string{aliceToken, bobToken} {
		c := mcpClient(t, f.url, tok, true)
		if _, err := callTool(t, c, "hello", nil); err != nil {
			t.Fatal(err)
		}
	}
	var principals []string
	for _, r := range f.auditRecords(t) {
		principals = append(principals, fmt.Sprint(r["principal"]))
	}
	if !slices.Equal(principals, []string{"alice", "bob"}) {
		t.Errorf("audit principals %v, want [alice bob]", principals)
	}
	for _, secret := range []string{aliceToken, bobToken, aliceToken[:32]} {
		if strings.Contains(f.log.String()+f.audit.String(), secret) {
			t.Errorf("a token is in the logs")
		}
	}
}

func hexSHA(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func startOAuth(t *testing.T, is *authtest.Issuer, scopes ToolScopes) (*httpFixture, string) {
	t.Helper()
	// The resource URL is this server's own; its port is not known before
	// it listens, and the audience need only match what the server is
	// told, so a fixed canonical URL stands for it.
	resource := "https://toolgate.test/mcp"
	o, err := auth.NewOAuth(auth.OAuthOptions{Issuer: is.URL(), Resource: resource, MinRefresh: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	f := startHTTP(t, HTTPOptions{Auth: o, OAuth: o, Resource: resource, Scopes: scopes})
	return f, resource
}

func TestHTTPOAuthRefusesBadTokens(t *testing.T) {
	is := authtest.NewIssuer(t)
	f, resource := startOAuth(t, is, nil)
	with := func(edit func(map[string]any)) map[string]any {
		c := is.Claims(resource)
		edit(c)
		return c
	}
	rsaPub, _ := x509.MarshalPKIXPublicKey(is.Public("rsa1"))
	foreign, _ := rsa.GenerateKey(rand.Reader, 2048)
	huge := strings.Repeat("a", 100<<10)
	for _, tc := range []struct {
		name   string
		token  string
		status int
		desc   string // in WWW-Authenticate
	}{
		{"no token", "", 401, ""},
		{"wrong audience", is.Sign(t, "rsa1", with(func(c map[string]any) { c["aud"] = "https://other.test/mcp" })), 401, "not issued for this resource"},
		{"no audience", is.Sign(t, "rsa1", with(func(c map[string]any) { delete(c, "aud") })), 401, "not issued for this resource"},
		{"expired", is.Sign(t, "rsa1", with(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() })), 401, "expired"},
		{"no exp", is.Sign(t, "rsa1", with(func(c map[string]any) { delete(c, "exp") })), 401, "no exp claim"},
		{"not valid yet", is.Sign(t, "rsa1", with(func(c map[string]any) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), 401, "not valid yet"},
		{"another issuer", is.Sign(t, "rsa1", with(func(c map[string]any) { c["iss"] = "https://evil.test" })), 401, "another issuer"},
		{"alg none", authtest.Unsigned(is.Claims(resource)), 401, "not a JWT signed with an accepted algorithm"},
		{"HS256 keyed with the public key", authtest.SignWith(t, jose.SigningKey{Algorithm: jose.HS256, Key: rsaPub}, "rsa1", is.Claims(resource)), 401, "not a JWT signed with an accepted algorithm"},
		{"a key the JWKS does not have", authtest.SignWith(t, jose.SigningKey{Algorithm: jose.RS256, Key: foreign}, "rogue", is.Claims(resource)), 401, "a key the issuer's key set does not have"},
		{"a known kid, another key", authtest.SignWith(t, jose.SigningKey{Algorithm: jose.RS256, Key: foreign}, "rsa1", is.Claims(resource)), 401, "signature does not verify"},
		{"garbage", "not.a.jwt", 401, "not a JWT"},
		{"a token over 8 KiB", strings.Repeat("a", 9<<10), 401, "over"},
		{"a huge header", huge, 431, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := f.post(t, rpcReq{token: tc.token, body: callBody("hello")})
			if got.status != tc.status {
				t.Fatalf("status %d (%s), want %d", got.status, got.body, tc.status)
			}
			if tc.status == 431 {
				return // answered by net/http before any handler
			}
			ch := got.header.Get("WWW-Authenticate")
			wantMeta := `resource_metadata="https://toolgate.test/.well-known/oauth-protected-resource/mcp"`
			if !strings.HasPrefix(ch, "Bearer ") || !strings.Contains(ch, wantMeta) || !strings.Contains(ch, tc.desc) {
				t.Errorf("WWW-Authenticate %q: want Bearer, %s and %q", ch, wantMeta, tc.desc)
			}
			if tc.token != "" && !strings.Contains(ch, `error="invalid_token"`) {
				t.Errorf("WWW-Authenticate %q: want error=\"invalid_token\"", ch)
			}
		})
	}
	if n := f.ran(); n != 0 {
		t.Fatalf("%d tool runs after refused tokens, want 0", n)
	}
	// And the good token works, with its principal in the audit record.
	c := mcpClient(t, f.url, is.Sign(t, "ec1", is.Claims(resource)), true)
	if _, err := callTool(t, c, "hello", nil); err != nil {
		t.Fatal(err)
	}
	recs := f.auditRecords(t)
	if len(recs) != 1 || recs[0]["principal"] != "alice" || recs[0]["auth"] != auth.MethodOAuth || recs[0]["client"] != "agent-1" {
		t.Errorf("audit %v, want one record of principal alice (oauth, client agent-1)", recs)
	}
}

func TestHTTPOAuthKeyRotation(t *testing.T) {
	is := authtest.NewIssuer(t)
	f, resource := startOAuth(t, is, nil)
	old := is.Sign(t, "rsa1", is.Claims(resource))
	if got := f.post(t, rpcReq{token: old, body: initBody}); got.status != 200 {
		t.Fatalf("the first key's token: %d %s", got.status, got.body)
	}
	// The issuer rotates: a new key, the old one withdrawn.
	is.AddEC(t, "ec2")
	is.Withdraw("rsa1")
	time.Sleep(5 * time.Millisecond) // past MinRefresh
	if got := f.post(t, rpcReq{token: is.Sign(t, "ec2", is.Claims(resource)), body: initBody}); got.status != 200 {
		t.Fatalf("the new key's token: %d %s", got.status, got.body)
	}
	if got := f.post(t, rpcReq{token: old, body: initBody}); got.status != 401 {
		t.Fatalf("the withdrawn key's token: %d, want 401", got.status)
	}
}

func TestHTTPScopes(t *testing.T) {
	is := authtest.NewIssuer(t)
	scopes := ToolScopes{}
	scopes.Add("tools.read", []string{"hello", "checkpoint_status"})
	scopes.Add("tools.test", []string{"sbx"})
	f, resource := startOAuth(t, is, scopes)
	claims := is.Claims(resource)
	claims["scope"] = "tools.read openid"
	tok := is.Sign(t, "rsa1", claims)
	for _, legacy := range []bool{true, false} {
		c := mcpClient(t, f.url, tok, legacy)
		if names := listNames(t, c); !slices.Equal(names, []string{"checkpoint_status", "hello"}) {
			t.Errorf("tools/list with scope tools.read = %v, want [checkpoint_status hello]", names)
		}
	}
	got := f.post(t, rpcReq{token: tok, body: callBody("sbx")})
	ch := got.header.Get("WWW-Authenticate")
	if got.status != 403 || !strings.Contains(ch, `error="insufficient_scope"`) || !strings.Contains(ch, `scope="tools.test"`) {
		t.Errorf("calling sbx without its scope: %d, WWW-Authenticate %q; want 403 insufficient_scope naming tools.test", got.status, ch)
	}
	// A tool no scope opens is served to no one.
	if got := f.post(t, rpcReq{token: tok, body: callBody("other")}); got.status != 403 {
		t.Errorf("calling other (no scope opens it): %d, want 403", got.status)
	}
	if n := f.ran(); n != 0 {
		t.Fatalf("%d runs of tools the token's scopes do not open, want 0", n)
	}
	recs := f.auditRecords(t)
	if len(recs) != 2 || recs[0]["refused"] != "scope" || recs[0]["tool"] != "sbx" || recs[0]["principal"] != "alice" {
		t.Errorf("audit %v: want the two refusals, refused=scope, principal alice", recs)
	}
	c := mcpClient(t, f.url, tok, true)
	if res, err := callTool(t, c, "hello", nil); err != nil || res.IsError {
		t.Fatalf("hello with its scope: %v %v", res, err)
	}
}

func TestHTTPProtectedResourceMetadata(t *testing.T) {
	is := authtest.NewIssuer(t)
	scopes := ToolScopes{}
	scopes.Add("tools.read", []string{"hello"})
	f, resource := startOAuth(t, is, scopes)
	for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(f.base + path)
		if err != nil {
			t.Fatal(err)
		}
		var md map[string]any
		err = json.NewDecoder(resp.Body).Decode(&md)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		want := map[string]any{
			"resource": resource, "authorization_servers": []any{is.URL()},
			"scopes_supported": []any{"tools.read"}, "bearer_methods_supported": []any{"header"}, "resource_name": "toolgate",
		}
		if fmt.Sprint(md) != fmt.Sprint(want) {
			t.Errorf("GET %s = %v, want %v", path, md, want)
		}
	}
}

// TestCheckListen: without authentication, Serve takes no TCP listener,
// loopback included (every local user could connect), and says what to
// do; a unix socket serves without.
func TestCheckListen(t *testing.T) {
	const local = "every local user, and every sandboxed server given network access, could run every tool; give --auth-tokens or --oauth-issuer, or serve local clients on a unix socket only your user may open (--listen unix:/run/toolgate/mcp.sock; --listen-group for a group)"
	const anyone = "anyone who can reach it could run every tool; give --auth-tokens or --oauth-issuer, or serve local clients on a unix socket"
	for _, tc := range []struct {
		addr string
		auth bool
		want string // "" for accepted
	}{
		{"127.0.0.1:8080", false, local},
		{"[::1]:8080", false, local},
		{"127.0.0.2:8080", false, local},
		{"0.0.0.0:8080", false, anyone},
		{"[::]:8080", false, anyone},
		{"10.1.2.3:8080", false, anyone},
		{"127.0.0.1:8080", true, ""},
		{"0.0.0.0:8080", true, ""},
	} {
		a, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckListen(a, tc.auth)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), "refusing to serve MCP over HTTP on "+a.String()+" without authentication: "+tc.want)) {
			t.Errorf("CheckListen(%s, auth %v) = %v, want %q", tc.addr, tc.auth, err, tc.want)
		}
	}
	if err := CheckListen(&net.UnixAddr{Name: "/run/toolgate/mcp.sock", Net: "unix"}, false); err != nil {
		t.Errorf("CheckListen(unix socket, no auth) = %v, want accepted", err)
	}
	// Serve itself refuses, whatever its caller checked: loopback too.
	s := New(Options{Conf: loadConf(t, httpConf)})
	h, err := NewHTTP(s, HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0.0.0.0:0", "127.0.0.1:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Serve(context.Background(), ln, nil); err == nil || !strings.Contains(err.Error(), "without authentication") {
			t.Fatalf("Serve on %s without auth = %v, want refused", ln.Addr(), err)
		}
		ln.Close()
	}
}

func TestHTTPOrigin(t *testing.T) {
	f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken)), AllowOrigins: []string{"https://agents.example.com"}})
	port := strings.TrimPrefix(f.base, "http://127.0.0.1:")
	for _, tc := range []struct {
		name    string
		headers map[string]string
		status  int
	}{
		{"no Origin", nil, 200},
		{"loopback Origin", map[string]string{"Origin": "http://127.0.0.1:" + port}, 200},
		{"localhost Origin", map[string]string{"Origin": "http://localhost:" + port}, 200},
		{"allowed Origin", map[string]string{"Origin": "https://agents.example.com"}, 200},
		{"another Origin", map[string]string{"Origin": "http://evil.example.com"}, 403},
		{"null Origin", map[string]string{"Origin": "null"}, 403},
		{"DNS rebinding: Host and Origin", map[string]string{"Host": "evil.example.com:" + port, "Origin": "http://evil.example.com:" + port}, 403},
		{"DNS rebinding: Host only", map[string]string{"Host": "evil.example.com:" + port}, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := f.post(t, rpcReq{token: aliceToken, body: initBody, headers: tc.headers}); got.status != tc.status {
				t.Errorf("status %d (%s), want %d", got.status, got.body, tc.status)
			}
		})
	}
}

func TestHTTPBodyCap(t *testing.T) {
	f := startHTTP(t, HTTPOptions{MaxBodyBytes: MinMaxRequestBytes})
	big := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"hello","arguments":{"x":"` + strings.Repeat("a", MinMaxRequestBytes) + `"}}}`
	if got := f.post(t, rpcReq{body: big}); got.status != http.StatusRequestEntityTooLarge || !strings.Contains(got.body, "over the limit") {
		t.Errorf("a body over the cap: %d %q, want 413", got.status, got.body)
	}
	// Chunked: no Content-Length, cut as it is read.
	req, _ := http.NewRequest(http.MethodPost, f.url, io.MultiReader(strings.NewReader(big)))
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = -1
	resp, err := testHTTPClient(f.url).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a chunked body over the cap: %d, want 413", resp.StatusCode)
	}
	if n := f.ran(); n != 0 {
		t.Fatalf("%d runs, want 0", n)
	}
	if got := f.post(t, rpcReq{body: initBody}); got.status != 200 {
		t.Errorf("a small body after: %d", got.status)
	}
}

func TestHTTPSessionsBoundToPrincipal(t *testing.T) {
	f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken, "bob "+bobToken))})
	init := f.post(t, rpcReq{token: aliceToken, body: initBody})
	sid := init.header.Get("Mcp-Session-Id")
	if init.status != 200 || len(sid) != 32 {
		t.Fatalf("initialize: %d, session %q", init.status, sid)
	}
	h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	if got := f.post(t, rpcReq{token: bobToken, body: callBody("hello"), headers: h}); got.status != 404 {
		t.Errorf("bob using alice's session: %d, want 404", got.status)
	}
	if got := f.post(t, rpcReq{token: bobToken, method: http.MethodDelete, headers: h}); got.status != 404 {
		t.Errorf("bob ending alice's session: %d, want 404", got.status)
	}
	if got := f.post(t, rpcReq{token: aliceToken, body: callBody("hello"), headers: map[string]string{"Mcp-Session-Id": "0123456789abcdef0123456789abcdef", "Mcp-Protocol-Version": "2025-11-25"}}); got.status != 404 {
		t.Errorf("a made-up session: %d, want 404", got.status)
	}
	if n := f.ran(); n != 0 {
		t.Fatalf("%d runs, want 0", n)
	}
	if got := f.post(t, rpcReq{token: aliceToken, body: callBody("hello"), headers: h}); got.status != 200 || !strings.Contains(got.body, "hi") {
		t.Errorf("alice in her session: %d %s", got.status, got.body)
	}
	if got := f.post(t, rpcReq{token: aliceToken, method: http.MethodDelete, headers: h}); got.status != 200 {
		t.Errorf("alice ending her session: %d", got.status)
	}
	if got := f.post(t, rpcReq{token: aliceToken, body: callBody("hello"), headers: h}); got.status != 404 {
		t.Errorf("an ended session: %d, want 404", got.status)
	}
}

func TestHTTPPrincipalLimit(t *testing.T) {
	f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken, "bob "+bobToken)), MaxPerPrincipal: 1})
	f.direct.block = make(chan struct{})
	alice := mcpClient(t, f.url, aliceToken, false)
	first := make(chan error, 1)
	go func() {
		_, err := callTool(t, alice, "hello", nil)
		first <- err
	}()
	waitFor(t, func() bool { return len(f.direct.invocations()) == 1 })
	// alice's second call queues behind her first for its 1 s timeout.
	res, err := callTool(t, alice, "hello", nil)
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "--max-concurrent-per-principal") {
		t.Fatalf("alice's second call = %v %v, want refused by her queue", res, err)
	}
	// bob is not held up by alice.
	bob := mcpClient(t, f.url, bobToken, false)
	bobDone := make(chan error, 1)
	go func() {
		_, err := callTool(t, bob, "hello", nil)
		bobDone <- err
	}()
	waitFor(t, func() bool { return len(f.direct.invocations()) == 2 })
	close(f.direct.block)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-bobDone; err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(f.h.metrics.limits.WithLabelValues("principal_concurrent")); got != 1 {
		t.Errorf("limits_hit{principal_concurrent} = %v, want 1", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func getStatus(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := testHTTPClient(url).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTPHealthReadyMetrics(t *testing.T) {
	setup := make(chan struct{})
	sandbox := &fakeRunner{res: rt.Result{Output: []byte("ok\n")}}
	sb := rt.NewSandbox("bwrap", func(ctx context.Context) (rt.Runner, error) {
		<-setup
		return sandbox, nil
	})
	f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken))}, func(o *Options) { o.Sandbox = sb })
	if code, body := getStatus(t, f.base+"/healthz", ""); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := getStatus(t, f.base+"/readyz", ""); code != 503 || !strings.Contains(body, `"state":"pending"`) {
		t.Errorf("/readyz while the sandbox self-test runs = %d %s, want 503 pending", code, body)
	}
	close(setup)
	waitFor(t, func() bool { st, _ := sb.State(); return st == rt.SandboxReady })
	if code, body := getStatus(t, f.base+"/readyz", ""); code != 200 || !strings.Contains(body, `"ready":true`) {
		t.Errorf("/readyz once ready = %d %s", code, body)
	}
	if code, _ := getStatus(t, f.base+"/metrics", ""); code != 401 {
		t.Errorf("/metrics without a token = %d, want 401", code)
	}
	c := mcpClient(t, f.url, aliceToken, true)
	for range 2 {
		if _, err := callTool(t, c, "sbx", nil); err != nil {
			t.Fatal(err)
		}
	}
	f.direct.res = rt.Result{ExitCode: 1, Output: []byte("no\n")}
	if _, err := callTool(t, c, "hello", nil); err != nil {
		t.Fatal(err)
	}
	f.post(t, rpcReq{token: "wrong-0123456789abcdef0123456789abcdef", body: initBody})
	code, body := getStatus(t, f.base+"/metrics", aliceToken)
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{
		`toolgate_calls_total{backend="bwrap",outcome="ok",tool="sbx"} 2`,
		`toolgate_calls_total{backend="direct",outcome="error",tool="hello"} 1`,
		`toolgate_call_duration_seconds_count{backend="bwrap",tool="sbx"} 2`,
		`toolgate_call_queue_wait_seconds_count{queue="server"} 3`,
		`toolgate_calls_in_flight 0`,
		`toolgate_sandbox_ready{backend="bwrap"} 1`,
		`toolgate_sandbox_state{backend="bwrap",state="ready"} 1`,
		`toolgate_sandbox_state{backend="bwrap",state="pending"} 0`,
		`toolgate_http_auth_failures_total{reason="invalid"} 1`,
		`toolgate_http_auth_failures_total{reason="missing"} 1`,
		`toolgate_build_info{version="test"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestHTTPGracefulShutdown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		grace  time.Duration
		finish bool // the call ends by itself within the grace
	}{
		{"the call finishes within the grace", 10 * time.Second, true},
		{"the grace passes: the call is killed", 200 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startHTTP(t, HTTPOptions{ShutdownGrace: tc.grace})
			f.direct.block = make(chan struct{})
			type answer struct {
				res *mcp.CallToolResult
				err error
			}
			c := mcpClient(t, f.url, "", false)
			got := make(chan answer, 1)
			go func() {
				req := mcp.CallToolRequest{}
				req.Params.Name = "hello"
				res, err := c.CallTool(context.Background(), req)
				got <- answer{res, err}
			}()
			waitFor(t, func() bool { return f.h.InFlight() == 1 })
			f.stop()
			waitFor(t, func() bool { return f.h.draining.Load() })
			// No new connection is accepted.
			waitFor(t, func() bool {
				c, err := net.DialTimeout("unix", f.sock, time.Second)
				if err == nil {
					c.Close()
				}
				return err != nil
			})
			if tc.finish {
				close(f.direct.block)
			}
			a := <-got
			select {
			case err := <-f.done:
				if err != nil {
					t.Fatalf("Serve = %v", err)
				}
				f.done <- nil
			case <-time.After(20 * time.Second):
				t.Fatal("Serve did not return")
			}
			if tc.finish && (a.err != nil || !strings.HasPrefix(resultText(a.res), "hi\n")) {
				t.Errorf("the in-flight call answered %v %v, want its result", a.res, a.err)
			}
			if !tc.finish && a.err == nil {
				t.Errorf("the killed call answered %v, want no answer", a.res)
			}
			recs := f.auditRecords(t)
			if len(recs) != 1 || (recs[0]["cancelled"] == true) == tc.finish {
				t.Errorf("audit %v: want one record, cancelled %v", recs, !tc.finish)
			}
		})
	}
}

func TestHTTPCancelWithoutSessionIsIgnored(t *testing.T) {
	f := startHTTP(t, HTTPOptions{})
	f.direct.block = make(chan struct{})
	defer close(f.direct.block)
	c := mcpClient(t, f.url, "", false) // 2026-07-28: no session
	go callTool(t, c, "hello", nil)
	waitFor(t, func() bool { return f.h.InFlight() == 1 })
	// Another client's cancellation of "the same" request id.
	for _, id := range []string{"0", "1", "2", "3"} {
		got := f.post(t, rpcReq{body: `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `}}`})
		if got.status != 202 {
			t.Fatalf("notifications/cancelled: %d", got.status)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if f.h.InFlight() != 1 {
		t.Fatal("a sessionless notifications/cancelled ended another client's call")
	}
}

// TestHTTPProgressAndCancel: over HTTP a call with a progressToken gets
// notifications/progress on its response stream, and a client that gives
// up on the call (its request ends) cancels it: the runner sees its
// context end and the audit record says cancelled.
func TestHTTPProgressAndCancel(t *testing.T) {
	f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken))})
	f.direct.block = make(chan struct{})
	defer close(f.direct.block)
	for _, legacy := range []bool{true, false} {
		c := mcpClient(t, f.url, aliceToken, legacy)
		progress := make(chan mcp.JSONRPCNotification, 8)
		c.OnNotification(func(n mcp.JSONRPCNotification) {
			if n.Method == string(mcp.MethodNotificationProgress) {
				progress <- n
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			req := mcp.CallToolRequest{}
			req.Params.Name = "hello"
			req.Params.Meta = &mcp.Meta{ProgressToken: "p1"}
			_, err := c.CallTool(ctx, req)
			done <- err
		}()
		select {
		case n := <-progress:
			if n.Params.AdditionalFields["progressToken"] != "p1" {
				t.Errorf("legacy %v: progress %v, want token p1", legacy, n.Params.AdditionalFields)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("legacy %v: no notifications/progress within 10 s", legacy)
		}
		cancel()
		if err := <-done; err == nil {
			t.Errorf("legacy %v: the cancelled call answered", legacy)
		}
		waitFor(t, func() bool { return f.h.InFlight() == 0 })
	}
	recs := f.auditRecords(t)
	if len(recs) != 2 || recs[0]["cancelled"] != true || recs[1]["cancelled"] != true {
		t.Errorf("audit %v: want two cancelled calls", recs)
	}
}

// TestAuditTraceparentWithoutHTTP: over stdio (no principal) the audit
// record carries the _meta traceparent too, and an invalid one is noted,
// never copied.
func TestAuditTraceparentWithoutHTTP(t *testing.T) {
	audit := &testbin.Buffer{}
	alog := logrus.New()
	alog.SetOutput(audit)
	alog.SetFormatter(&logrus.JSONFormatter{})
	s := New(Options{Conf: loadConf(t, httpConf), Direct: &fakeRunner{res: rt.Result{Output: []byte("hi\n")}}, Audit: alog})
	c := session(t, s)
	for _, tp := range []string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-zz\n-forged"} {
		req := mcp.CallToolRequest{}
		req.Params.Name = "hello"
		req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{"traceparent": tp}}
		if _, err := c.CallTool(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSpace(audit.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d audit lines, want 2", len(lines))
	}
	var first, second map[string]any
	json.Unmarshal([]byte(lines[0]), &first)
	json.Unmarshal([]byte(lines[1]), &second)
	if first["traceparent"] != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" || first["principal"] != nil {
		t.Errorf("first record %v: want the traceparent and no principal", first)
	}
	if second["traceparent"] != nil || second["traceparent_invalid"] != true || strings.Contains(lines[1], "forged") {
		t.Errorf("second record %s: want traceparent_invalid and nothing of the value", lines[1])
	}
}

// TestHTTPPrincipalsOfTwoMethods: a token file's name and an OAuth subject
// that are equal are two principals: neither can use the other's session.
func TestHTTPPrincipalsOfTwoMethods(t *testing.T) {
	is := authtest.NewIssuer(t)
	resource := "https://toolgate.test/mcp"
	o, err := auth.NewOAuth(auth.OAuthOptions{Issuer: is.URL(), Resource: resource})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	f := startHTTP(t, HTTPOptions{Auth: auth.Chain(auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken)), o), OAuth: o, Resource: resource})
	init := f.post(t, rpcReq{token: aliceToken, body: initBody})
	sid := init.header.Get("Mcp-Session-Id")
	jwtAlice := is.Sign(t, "rsa1", is.Claims(resource)) // sub: alice
	h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	if got := f.post(t, rpcReq{token: jwtAlice, body: callBody("hello"), headers: h}); got.status != 404 {
		t.Errorf("OAuth subject alice in token alice's session: %d, want 404", got.status)
	}
	if got := f.post(t, rpcReq{token: aliceToken, body: callBody("hello"), headers: h}); got.status != 200 {
		t.Errorf("token alice in her session: %d", got.status)
	}
}

// TestHTTPTLS: with a certificate and key, Serve speaks HTTPS only: a
// client that trusts the certificate initializes; plain HTTP is refused.
func TestHTTPTLS(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "toolgate test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)

	s := New(Options{Conf: loadConf(t, httpConf), Direct: &fakeRunner{}})
	h, err := NewHTTP(s, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken)), TLSCert: certFile, TLSKey: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, ln, nil) }()
	defer func() { cancel(); <-done }()
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest(http.MethodPost, "https://"+ln.Addr().String()+MCPPath, strings.NewReader(initBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("HTTPS initialize: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Errorf("HTTPS initialize: %d (TLS %v)", resp.StatusCode, resp.TLS != nil)
	}
	plain, err := http.Post("http://"+ln.Addr().String()+MCPPath, "application/json", strings.NewReader(initBody))
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode == 200 {
			t.Errorf("plain HTTP to the TLS listener: %d, want refused", plain.StatusCode)
		}
	}
}
