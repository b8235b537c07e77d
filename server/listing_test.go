package server

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/auth"
	rt "github.com/toolgate/toolgate/runtime"
)

// modernMeta is the _meta every stateless 2026-07-28 request carries.
const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

// modernHeaders are the headers of a stateless 2026-07-28 request of
// method.
func modernHeaders(method string) map[string]string {
	return map[string]string{"Mcp-Protocol-Version": mcp.ProtocolVersion20260728, "Mcp-Method": method}
}

// hints is what a result says of caching: its ttlMs and cacheScope as
// sent, and which of the two it has at all.
type hints struct {
	ttlMs    int64
	scope    string
	hasTTL   bool
	hasScope bool
}

// resultHints decodes the hints of a JSON-RPC answer's result.
func resultHints(t *testing.T, body string) hints {
	t.Helper()
	var answer struct {
		Result map[string]json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &answer); err != nil || answer.Result == nil {
		t.Fatalf("answer %.300q: not a result (%v)", body, err)
	}
	var h hints
	if raw, ok := answer.Result["ttlMs"]; ok {
		h.hasTTL = true
		if err := json.Unmarshal(raw, &h.ttlMs); err != nil {
			t.Fatalf("ttlMs %s: %v", raw, err)
		}
	}
	if raw, ok := answer.Result["cacheScope"]; ok {
		h.hasScope = true
		if err := json.Unmarshal(raw, &h.scope); err != nil {
			t.Fatalf("cacheScope %s: %v", raw, err)
		}
	}
	return h
}

func withListTTL(d time.Duration) fixtureOpt { return func(o *Options) { o.ListTTL = d } }

// TestHTTPListCacheHints: over HTTP, a stateless 2026-07-28 tools/list
// and server/discover carry ttlMs (--list-ttl, an explicit 0 included)
// and cacheScope: private for an authenticated request and for a
// listing a policy or --tool-scope decides, public on a unix socket
// without authentication and without a policy (discover there even with
// a policy: it says the same to every caller). A 2025-11-25 tools/list
// has neither field.
func TestHTTPListCacheHints(t *testing.T) {
	tokens := func(t *testing.T) HTTPOptions {
		return HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken+" tools.read"))}
	}
	scoped := func(t *testing.T) HTTPOptions {
		o := tokens(t)
		o.Scopes = ToolScopes{}
		o.Scopes.Add("tools.read", []string{"*"})
		return o
	}
	unix := func(*testing.T) HTTPOptions { return HTTPOptions{} }
	for _, tc := range []struct {
		name     string
		hopts    func(*testing.T) HTTPOptions
		fopts    []fixtureOpt
		list     hints
		discover hints
	}{
		{
			"tokens", tokens,
			[]fixtureOpt{withListTTL(90 * time.Second)},
			hints{90000, "private", true, true},
			hints{90000, "private", true, true},
		},
		{
			"tokens, --list-ttl 0", tokens,
			[]fixtureOpt{withListTTL(0)},
			hints{0, "private", true, true},
			hints{0, "private", true, true},
		},
		{
			"tokens and --tool-scope", scoped,
			[]fixtureOpt{withListTTL(time.Minute)},
			hints{60000, "private", true, true},
			hints{60000, "private", true, true},
		},
		{
			"unix socket", unix,
			[]fixtureOpt{withListTTL(1500 * time.Millisecond)},
			hints{1500, "public", true, true},
			hints{1500, "public", true, true},
		},
		{
			"unix socket and a policy", unix,
			[]fixtureOpt{withListTTL(time.Minute), withPolicy(teamEngine(t))},
			hints{60000, "private", true, true},
			hints{60000, "public", true, true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hopts := tc.hopts(t)
			f := startHTTP(t, hopts, tc.fopts...)
			token := ""
			if hopts.Auth != nil {
				token = aliceToken
			}
			got := f.post(t, rpcReq{token: token, body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + modernMeta + `}}`, headers: modernHeaders("tools/list")})
			if h := resultHints(t, got.body); h != tc.list {
				t.Errorf("2026-07-28 tools/list hints = %+v, want %+v", h, tc.list)
			}
			got = f.post(t, rpcReq{token: token, body: `{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{` + modernMeta + `}}`, headers: modernHeaders("server/discover")})
			if h := resultHints(t, got.body); h != tc.discover {
				t.Errorf("server/discover hints = %+v, want %+v", h, tc.discover)
			}
			init := f.post(t, rpcReq{token: token, body: initBody})
			got = f.post(t, rpcReq{token: token, body: `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, headers: map[string]string{
				"Mcp-Protocol-Version": mcp.ProtocolVersion20251125, "Mcp-Session-Id": init.header.Get("Mcp-Session-Id"),
			}})
			if h := resultHints(t, got.body); h != (hints{}) {
				t.Errorf("2025-11-25 tools/list hints = %+v, want none", h)
			}
		})
	}
}

// TestHTTPListCacheHintsReachTheClient: mcp-go's client, in the
// stateless era, reads the TTL and the scope toolgate sent: what a
// client that honours them acts on. In the session era it reads none.
func TestHTTPListCacheHintsReachTheClient(t *testing.T) {
	f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken))}, withListTTL(2*time.Minute))
	for _, legacy := range []bool{false, true} {
		res, err := mcpClient(t, f.url, aliceToken, legacy).ListTools(context.Background(), mcp.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ttl, ok := res.TTL()
		switch {
		case !legacy && (!ok || ttl != 120000 || res.CacheScope != mcp.CacheScopePrivate):
			t.Errorf("2026-07-28: TTL %d (%v), scope %q; want 120000 ms, private", ttl, ok, res.CacheScope)
		case legacy && (ok || res.CacheScope != ""):
			t.Errorf("2025-11-25: TTL %d (%v), scope %q; want none", ttl, ok, res.CacheScope)
		}
	}
}

// TestStdioListCacheHints: over stdio a 2025-06-18 session's tools/list
// has no hints; a 2026-07-28 request's has the TTL and is public (one
// principal, no policy) or private (a policy decides the listing).
func TestStdioListCacheHints(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fopts  []fixtureOpt
		modern hints
	}{
		{"no policy", nil, hints{30000, "public", true, true}},
		{"a policy", []fixtureOpt{withPolicy(teamEngine(t))}, hints{30000, "private", true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{
				Version: "test", Conf: loadConf(t, httpConf), Direct: &fakeRunner{}, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{}),
				ListTTL: 30 * time.Second,
			}
			for _, o := range tc.fopts {
				o(&opts)
			}
			w := serveWire(t, New(opts))
			w.send(initLine)
			w.next(5 * time.Second)
			w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
			if h := resultHints(t, encode(t, w.next(5*time.Second))); h != (hints{}) {
				t.Errorf("2025-06-18 tools/list hints = %+v, want none", h)
			}
			w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{` + modernMeta + `}}`)
			if h := resultHints(t, encode(t, w.next(5*time.Second))); h != tc.modern {
				t.Errorf("2026-07-28 tools/list hints = %+v, want %+v", h, tc.modern)
			}
		})
	}
}

// TestListTTLWhileListing: while the start-up listing of the downstream
// servers is under way, a tools/list answered all the same (its client
// gave up waiting) says 0: its client keeps no list known to be
// incomplete. Once it is done, the TTL is --list-ttl's.
func TestListTTLWhileListing(t *testing.T) {
	quiet := logrus.New()
	quiet.SetOutput(discard{})
	s := New(Options{Version: "test", Log: quiet, ListTTL: time.Minute})
	s.listed = make(chan struct{})
	ctx := mcpserver.WithRequestProtocolInfo(context.Background(), &mcpserver.RequestProtocolInfo{Modern: true, ProtocolVersion: mcp.ProtocolVersion20260728})
	var res mcp.ListToolsResult
	s.cacheHints(ctx, &res.CacheableResult, true)
	if ttl, ok := res.TTL(); !ok || ttl != 0 || res.CacheScope != mcp.CacheScopePublic {
		t.Errorf("while listing: TTL %d (%v), scope %q; want 0, public", ttl, ok, res.CacheScope)
	}
	var discover mcp.DiscoverResult
	s.cacheHints(ctx, &discover.CacheableResult, false)
	if ttl, _ := discover.TTL(); ttl != 60000 {
		t.Errorf("server/discover while listing: TTL %d, want 60000 (the listing does not change it)", ttl)
	}
	close(s.listed)
	res = mcp.ListToolsResult{}
	s.cacheHints(ctx, &res.CacheableResult, true)
	if ttl, _ := res.TTL(); ttl != 60000 {
		t.Errorf("listed: TTL %d, want 60000", ttl)
	}
}

// encode is a message read from the wire, as JSON again.
func encode(t *testing.T, m map[string]any) string {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHTTPListenToldOfReload: a stateless 2026-07-28 client that holds a
// subscriptions/listen stream for toolsListChanged is told of a reload
// at once, as a session is: the TTL bounds only what a client without
// one keeps. Its next tools/list is the new one.
func TestHTTPListenToldOfReload(t *testing.T) {
	f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken))}, withListTTL(time.Hour))
	c := mcpClient(t, f.url, aliceToken, false)
	told := make(chan string, 8)
	c.OnNotification(func(n mcp.JSONRPCNotification) { told <- n.Method })
	stop, err := c.ListenAsync(context.Background(), mcp.SubscriptionFilter{ToolsListChanged: true}, func(err error) { t.Errorf("listen: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop) // before the server stops: a stream open holds its drain
	await := func(method mcp.MCPMethod) {
		t.Helper()
		for {
			select {
			case m := <-told:
				if m == string(method) {
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no %s on the listen stream within 10 s", method)
			}
		}
	}
	await(mcp.MethodNotificationSubscriptionsAcknowledged)
	f.srv.Reload(Snapshot{Conf: loadConf(t, "tool hello EXE read 1 100 off DIR --\ntool fresh EXE read 1 100 off DIR --\n"), Trigger: "sighup"})
	await(mcp.MethodNotificationToolsListChanged)
	if got := listNames(t, c); !slices.Equal(got, []string{"checkpoint_status", "hello", "fresh"}) {
		t.Errorf("tools/list after the reload = %v, want [checkpoint_status hello fresh]", got)
	}
}
