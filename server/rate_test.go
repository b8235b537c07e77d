package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/auth"
	rt "github.com/toolgate/toolgate/runtime"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want RateRule
	}{
		{"alice=2/s", RateRule{"alice", 2, 2}},
		{"alice=2/s:5", RateRule{"alice", 2, 5}},
		{"*=0.5/s", RateRule{"*", 0.5, 1}},
		{"*=2.5/s", RateRule{"*", 2.5, 3}},
		{"bob=.25/s:1", RateRule{"bob", 0.25, 1}},
		{"ci-bot@example.com=10/s:1", RateRule{"ci-bot@example.com", 10, 1}},
		// An OAuth principal's name may hold '=': the rule is after the last.
		{"a=b=1/s", RateRule{"a=b", 1, 1}},
		{"stdio=100/s:200", RateRule{"stdio", 100, 200}},
	} {
		got, err := ParseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"alice", "no ="},
		{"=2/s", "no principal"},
		{"al ice=2/s", "a space"},
		{"alice=2", "not N/s"},
		{"alice=2/m", "not N/s"},
		{"alice=/s", `"" is not a decimal number`},
		{"alice=-1/s", `"-1" is not a decimal number`},
		{"alice=1e3/s", `"1e3" is not a decimal number`},
		{"alice=Inf/s", `"Inf" is not a decimal number`},
		{"alice=0x10/s", `"0x10" is not a decimal number`},
		{"alice=0/s", "above 0"},
		{"alice=0.0/s", "above 0"},
		{"alice=2/s:0", `the burst "0" is not a whole number of 1 or more`},
		{"alice=2/s:", `the burst "" is not`},
		{"alice=2/s:1.5", `the burst "1.5" is not`},
		{"alice=2/s:+3", `the burst "+3" is not`},
		{"alice=2/s:-1", `the burst "-1" is not`},
	} {
		_, err := ParseRate(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), `--rate "`+tc.in+`": `) {
			t.Errorf("ParseRate(%q) = %v, want an error naming --rate and the value, with %q", tc.in, err, tc.want)
		}
	}
	rules := RateRules{}
	if err := rules.Add(RateRule{"alice", 1, 1}); err != nil {
		t.Fatal(err)
	}
	if err := rules.Add(RateRule{"alice", 2, 2}); err == nil || !strings.Contains(err.Error(), `principal "alice" already has a rule, alice=1/s:1`) {
		t.Errorf("a second rule for alice: %v", err)
	}
}

// fakeClock is the time the rate buckets see.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func limitsAt(rules RateRules) (*rateLimits, *fakeClock) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := newRateLimits(rules)
	l.now = clock.now
	return l, clock
}

// takeN takes n tokens of key's bucket and returns how many were allowed
// and the wait the first refusal named.
func takeN(l *rateLimits, name, key string, n int) (allowed int, wait time.Duration) {
	for range n {
		_, d, _ := l.take(name, key)
		if d == 0 {
			allowed++
		} else if wait == 0 {
			wait = d
		}
	}
	return allowed, wait
}

// TestRateBurst: a full bucket allows its burst at once, then one call
// per 1/N s; a refused call takes nothing; the bucket never holds more
// than its burst.
func TestRateBurst(t *testing.T) {
	l, clock := limitsAt(RateRules{"alice": {"alice", 2, 3}, "*": {"*", 0.5, 1}})
	steps := []struct {
		advance     time.Duration
		tries, want int
		wait        time.Duration
	}{
		{0, 5, 3, 500 * time.Millisecond}, // the burst, then refused
		{250 * time.Millisecond, 1, 0, 250 * time.Millisecond},
		{250 * time.Millisecond, 2, 1, 500 * time.Millisecond}, // one token back, refusals took none
		{time.Hour, 10, 3, 500 * time.Millisecond},             // full again: 3, not 7200
	}
	for i, s := range steps {
		clock.add(s.advance)
		if got, wait := takeN(l, "alice", "token/alice", s.tries); got != s.want || wait != s.wait {
			t.Errorf("step %d: %d of %d allowed, wait %v; want %d, wait %v", i, got, s.tries, wait, s.want, s.wait)
		}
	}
	// bob (no rule of his own) and carol share *'s rule, not its bucket.
	for _, key := range []string{"token/bob", "token/carol"} {
		if got, wait := takeN(l, strings.TrimPrefix(key, "token/"), key, 3); got != 1 || wait != 2*time.Second {
			t.Errorf("%s under *=0.5/s: %d of 3 allowed, wait %v; want 1, wait 2s", key, got, wait)
		}
	}
	if r := retryAfter(2 * time.Second); r != 2 {
		t.Errorf("retryAfter(2s) = %d, want 2", r)
	}
	if r := retryAfter(1500 * time.Millisecond); r != 2 {
		t.Errorf("retryAfter(1.5s) = %d, want 2 (rounded up)", r)
	}
	if r := retryAfter(time.Millisecond); r != 1 {
		t.Errorf("retryAfter(1ms) = %d, want 1", r)
	}
	// No rule for dave when there is no *: nothing counted.
	l2, _ := limitsAt(RateRules{"alice": {"alice", 1, 1}})
	if _, _, ok := l2.take("dave", "token/dave"); ok {
		t.Error("dave has no rule and there is no *, yet a bucket counted his call")
	}
}

// TestRateBucketsSwept: past maxBuckets, the full buckets are let go
// and the others kept.
func TestRateBucketsSwept(t *testing.T) {
	l, clock := limitsAt(RateRules{"*": {"*", 1, 1}})
	for i := range maxBuckets {
		l.take("p", fmt.Sprint("token/p", i)) // each bucket emptied
	}
	clock.add(10 * time.Second) // every bucket full again
	l.take("held", "held")      // a bucket over the bound: the full ones go
	l.take("new", "new")
	if n := len(l.by); n != 2 {
		t.Errorf("%d buckets after the sweep, want 2 (held, new)", n)
	}
	if _, wait, _ := l.take("held", "held"); wait == 0 {
		t.Error("held's empty bucket was swept: its next call was allowed")
	}
}

// TestRateBucketsBounded: principals without end, each calling (no
// bucket ever full), are held to maxBuckets buckets; the one let go is
// the fullest, never the one just emptied.
func TestRateBucketsBounded(t *testing.T) {
	l, clock := limitsAt(RateRules{"*": {"*", 1, 5}})
	for i := range 3 * maxBuckets {
		key := fmt.Sprint("oauth/sub", i)
		l.take("p", key)
		clock.add(time.Microsecond)
	}
	if n := len(l.by); n > maxBuckets {
		t.Errorf("%d buckets for %d principals, want at most %d", n, 3*maxBuckets, maxBuckets)
	}
	if _, ok := l.by[fmt.Sprint("oauth/sub", 3*maxBuckets-1)]; !ok {
		t.Error("the last principal's bucket, just emptied, was let go")
	}
}

// TestStdioRateLimit: over stdio the one principal is "stdio": its rule
// limits tools/call with an isError result naming the limit and when to
// retry, audited and counted; checkpoint_status, tools/list and
// initialize never count.
func TestStdioRateLimit(t *testing.T) {
	var audit bytes.Buffer
	var mu sync.Mutex
	alog := logrus.New()
	alog.SetFormatter(&logrus.JSONFormatter{})
	alog.SetOutput(&lockedWriter{mu: &mu, w: &audit})
	direct := &fakeRunner{res: rt.Result{Output: []byte("ok\n")}}
	s := New(Options{
		Conf: loadConf(t, twoTools), Direct: direct, Audit: alog, Metrics: true,
		Rates: RateRules{"stdio": {"stdio", 0.01, 2}, "alice": {"alice", 1000, 1000}},
	})
	w := serveWire(t, s)
	w.send(initLine)
	w.next(5 * time.Second)
	for i := range 3 {
		w.send(`{"jsonrpc":"2.0","id":"l` + string(rune('0'+i)) + `","method":"tools/list"}`)
		w.next(5 * time.Second)
	}
	isError := func(m map[string]any) (bool, string) {
		res, _ := m["result"].(map[string]any)
		content, _ := res["content"].([]any)
		text := ""
		if len(content) > 0 {
			text, _ = content[0].(map[string]any)["text"].(string)
		}
		return res["isError"] == true, text
	}
	for i, want := range []bool{false, false, true, true} {
		w.send(`{"jsonrpc":"2.0","id":` + string(rune('1'+i)) + `,"method":"tools/call","params":{"name":"zeta"}}`)
		got, text := isError(w.next(5 * time.Second))
		if got != want {
			t.Fatalf("zeta call %d: isError %v (%q), want %v", i+1, got, text, want)
		}
		if want && text != `toolgate: zeta: principal "stdio" is over its rate limit of 0.01 calls a second, burst 2 (serve --rate); retry in 100 s` {
			t.Errorf("zeta call %d: %q", i+1, text)
		}
		// checkpoint_status is never limited.
		w.send(`{"jsonrpc":"2.0","id":"c` + string(rune('1'+i)) + `","method":"tools/call","params":{"name":"checkpoint_status"}}`)
		if got, text := isError(w.next(5 * time.Second)); got {
			t.Fatalf("checkpoint_status after zeta call %d: %q", i+1, text)
		}
	}
	if n := len(direct.invocations()); n != 2 {
		t.Errorf("%d runs of zeta, want 2", n)
	}
	m := s.Metrics()
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"rate_limit{allowed}", testutil.ToFloat64(m.rates.WithLabelValues("allowed")), 2},
		{"rate_limit{limited}", testutil.ToFloat64(m.rates.WithLabelValues("limited")), 2},
		{"limits_hit{rate}", testutil.ToFloat64(m.limits.WithLabelValues("rate")), 2},
		{"calls{zeta,refused}", testutil.ToFloat64(m.calls.WithLabelValues("zeta", "direct", OutcomeRefused)), 2},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var limited []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(audit.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["refused"] == "rate" {
			limited = append(limited, rec)
		}
	}
	if len(limited) != 2 {
		t.Fatalf("%d audit records refused=rate, want 2:\n%s", len(limited), audit.String())
	}
	rec := limited[0]
	for k, v := range map[string]any{"request_id": "3", "tool": "zeta", "kind": "external", "backend": "direct", "rate": 0.01, "rate_burst": 2.0, "is_error": true} {
		if rec[k] != v {
			t.Errorf("audit %s = %v, want %v", k, rec[k], v)
		}
	}
	if ms, _ := rec["retry_after_ms"].(float64); ms <= 90_000 || ms > 100_000 {
		t.Errorf("audit retry_after_ms = %v, want just under 100000", rec["retry_after_ms"])
	}
	if _, ok := rec["principal"]; ok {
		t.Errorf("a stdio record names a principal: %v", rec)
	}
}

// TestRateMiddlewareCountsOnce: a call HTTP.takeRate already counted is
// not counted again by the middleware; one it did not count (no HTTP
// transport in front: the isError answer alone) is, in its principal's
// own bucket.
func TestRateMiddlewareCountsOnce(t *testing.T) {
	s := New(Options{Conf: loadConf(t, twoTools), Direct: &fakeRunner{}, Metrics: true, Rates: RateRules{"*": {"*", 0.01, 1}}})
	ran := 0
	h := s.limitRate(func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ran++
		return toolResult("ran", nil, false), nil
	})
	req := mcp.CallToolRequest{}
	req.Params.Name = "zeta"
	alice := auth.WithPrincipal(context.Background(), auth.Principal{Name: "alice", Method: auth.MethodToken})
	bob := auth.WithPrincipal(context.Background(), auth.Principal{Name: "bob", Method: auth.MethodToken})
	counted := context.WithValue(alice, rateTakenKey{}, true)
	for i, tc := range []struct {
		ctx     context.Context
		isError bool
	}{
		{alice, false}, {alice, true}, {counted, false}, {counted, false}, {bob, false}, {bob, true},
	} {
		res, err := h(tc.ctx, req)
		if err != nil || res.IsError != tc.isError {
			t.Errorf("call %d: %v %v, want isError %v", i, res, err, tc.isError)
		}
		if tc.isError && !strings.Contains(resultText(res), `principal "`) {
			t.Errorf("call %d: %q names no principal", i, resultText(res))
		}
	}
	if ran != 4 {
		t.Errorf("%d calls ran, want 4", ran)
	}
	if got := testutil.ToFloat64(s.metrics.rates.WithLabelValues("allowed")); got != 2 {
		t.Errorf("rate_limit{allowed} = %v, want 2 (the counted ones are HTTP's)", got)
	}
}

// limitedBody is a tools/call of hello, in the stateless 2026-07-28
// revision or the 2025-11-25 one.
func limitedBody(id string, modern bool) string {
	meta := ""
	if modern {
		meta = `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	}
	return `{"jsonrpc":"2.0","id":"` + id + `","method":"tools/call","params":{"name":"hello"` + meta + `}}`
}

const aliceLimited = `toolgate: hello: principal "alice" is over its rate limit of 0.01 calls a second, burst 2 (serve --rate); retry in 100 s`

// checkPosted429 posts alice's call over her rate as a client of that
// era would: 429, Retry-After, and the isError result as the JSON-RPC
// answer (resultType complete in 2026-07-28).
func checkPosted429(t *testing.T, f *httpFixture, legacy bool) {
	t.Helper()
	headers := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "hello"}
	wantType := mcp.ResultTypeComplete
	if legacy {
		init := f.post(t, rpcReq{token: aliceToken, body: initBody})
		headers = map[string]string{"Mcp-Protocol-Version": "2025-11-25", "Mcp-Session-Id": init.header.Get("Mcp-Session-Id")}
		wantType = ""
	}
	got := f.post(t, rpcReq{token: aliceToken, body: limitedBody("r4", !legacy), headers: headers})
	if got.status != 429 || got.header.Get("Retry-After") != "100" || got.header.Get("Content-Type") != "application/json" {
		t.Errorf("alice over her rate: %d, Retry-After %q, Content-Type %q; want 429, 100, application/json",
			got.status, got.header.Get("Retry-After"), got.header.Get("Content-Type"))
	}
	var answer struct {
		JSONRPC string             `json:"jsonrpc"`
		ID      string             `json:"id"`
		Result  mcp.CallToolResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(got.body), &answer); err != nil {
		t.Fatalf("the 429's body %q: %v", got.body, err)
	}
	if answer.JSONRPC != "2.0" || answer.ID != "r4" || !answer.Result.IsError || resultText(&answer.Result) != aliceLimited || answer.Result.ResultType != wantType {
		t.Errorf("the 429's body = %s\nwant the isError result %q for id r4, resultType %q", got.body, aliceLimited, wantType)
	}
}

// callsAtOnce makes n calls of hello at once and returns the first
// failure.
func callsAtOnce(t *testing.T, c *client.Client, n int) error {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			res, err := callTool(t, c, "hello", nil)
			if err == nil && res.IsError {
				err = errors.New(resultText(res))
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// TestHTTPRateLimitPerPrincipal: alice and bob connected at once, in
// each era, under one * rule: alice over her rate gets 429 with
// Retry-After and the isError result as the JSON-RPC answer, while bob,
// with a bucket of his own, is not held up; checkpoint_status stays
// callable; nothing over the limit runs; the metrics count outcomes, no
// principal.
func TestHTTPRateLimitPerPrincipal(t *testing.T) {
	for _, legacy := range []bool{true, false} {
		t.Run(map[bool]string{true: "2025-11-25", false: "2026-07-28"}[legacy], func(t *testing.T) {
			f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken, "bob "+bobToken))},
				func(o *Options) { o.Rates = RateRules{"*": {"*", 0.01, 2}} })
			alice := mcpClient(t, f.url, aliceToken, legacy)
			bob := mcpClient(t, f.url, bobToken, legacy)
			if err := callsAtOnce(t, alice, 2); err != nil {
				t.Fatalf("alice's calls within her burst: %v", err)
			}
			// Through mcp-go's client, which reads a JSON-RPC answer of any
			// status: the isError result.
			if res, err := callTool(t, alice, "hello", nil); err != nil || !res.IsError || resultText(res) != aliceLimited {
				t.Fatalf("alice's third call: %v %v, want isError %q", res, err, aliceLimited)
			}
			checkPosted429(t, f, legacy)
			if res, err := callTool(t, alice, "checkpoint_status", nil); err != nil || res.IsError {
				t.Errorf("alice's checkpoint_status over her rate: %v %v, want it served", res, err)
			}
			// bob, at once, is untouched by alice's bucket, and has his own.
			if err := callsAtOnce(t, bob, 2); err != nil {
				t.Errorf("bob's calls while alice is limited: %v", err)
			}
			if res, err := callTool(t, bob, "hello", nil); err != nil || !strings.Contains(resultText(res), `principal "bob" is over its rate limit`) {
				t.Errorf("bob's third call: %v %v, want his own limit", res, err)
			}
			if n := len(f.direct.invocations()); n != 4 {
				t.Errorf("%d runs of hello, want 4 (two each)", n)
			}
			checkRateCounted(t, f)
		})
	}
}

// checkRateCounted checks the metrics and audit of
// TestHTTPRateLimitPerPrincipal: 4 allowed, 3 limited (alice's two,
// bob's one), by outcome alone.
func checkRateCounted(t *testing.T, f *httpFixture) {
	t.Helper()
	m := f.h.metrics
	if got, want := series(t, m.rates), []string{"outcome=allowed 4", "outcome=limited 3"}; !slices.Equal(got, want) {
		t.Errorf("toolgate_rate_limit_total = %q, want %q", got, want)
	}
	if got := testutil.ToFloat64(m.limits.WithLabelValues("rate")); got != 3 {
		t.Errorf("limits_hit{rate} = %v, want 3", got)
	}
	var limited []map[string]any
	for _, rec := range f.auditRecords(t) {
		if rec["refused"] == "rate" {
			limited = append(limited, rec)
		}
	}
	if len(limited) != 3 || limited[1]["request_id"] != `"r4"` || limited[1]["principal"] != "alice" || limited[1]["auth"] != "token" ||
		limited[1]["rate"] != 0.01 || limited[1]["rate_burst"] != 2.0 || limited[2]["principal"] != "bob" {
		t.Errorf("audit refused=rate: %v", limited)
	}
}

// TestRateCountsEveryToolButStatus: only the built-in checkpoint_status is
// exempt; a tools.conf tool may be named checkpoint_* and counts.
func TestRateCountsEveryToolButStatus(t *testing.T) {
	for tool, want := range map[string]bool{"checkpoint_status": false, "checkpoint_x": true, "hello": true, "srv__checkpoint_status": true} {
		if got := rateCounted(tool); got != want {
			t.Errorf("rateCounted(%q) = %v, want %v", tool, got, want)
		}
	}
}
