package server

// Rate limits per principal (serve --rate PRINCIPAL_OR_*=N/s[:burst]).
//
// Each principal has a token bucket of its own (golang.org/x/time/rate):
// the rule of its name, or else the * rule, gives the bucket's rate and
// size, never one bucket shared by the principals * covers. Only
// tools/call counts, and not checkpoint_status, which seed 000 says is
// never off: a principal over its limit can still ask what is served and
// why. A call over the limit is not run: it is answered with an isError
// result naming the limit and when to retry, audited (refused "rate") and
// counted (toolgate_rate_limit_total{outcome}). Over HTTP the answer to
// a POSTed tools/call is decided before mcp-go reads the request
// (HTTP.takeRate), so that it can be 429 with Retry-After; over stdio the
// one principal is "stdio", and the answer is the isError result alone
// (limitRate, the outermost tool middleware).

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"golang.org/x/time/rate"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/internal/jsonrpc"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/policy"
)

// AnyPrincipal in a rate rule stands for every principal without a rule
// of its own; each still has a bucket of its own.
const AnyPrincipal = "*"

// StdioPrincipal is the name rate rules give stdio's one principal.
const StdioPrincipal = "stdio"

// maxBuckets bounds the buckets kept: past it the full ones (a full
// bucket is what a new one is) are let go, and when none is full, the
// fullest, so that principals without end (an OAuth issuer's subjects)
// cost bounded memory. Only 4096 principals calling within a burst's
// refill of each other lose anything: the one let go starts full.
const maxBuckets = 4096

// RateRule is one --rate value: a principal's (or *'s) rate of calls a
// second and its burst.
type RateRule struct {
	Principal string
	PerSecond float64
	Burst     int
}

// String is the rule's limit as --rate writes it: N/s:burst.
func (r RateRule) String() string {
	return strconv.FormatFloat(r.PerSecond, 'f', -1, 64) + "/s:" + strconv.Itoa(r.Burst)
}

// rateNumber is N of N/s: a decimal number, no sign, no exponent.
var rateNumber = regexp.MustCompile(`^([0-9]+(\.[0-9]*)?|\.[0-9]+)$`)

// ParseRate parses one --rate value, PRINCIPAL_OR_*=N/s[:burst]. N is
// above 0 and may be fractional (0.5/s is a call every 2 s); the burst is
// a whole number of calls, 1 or more, N rounded up when not given.
func ParseRate(v string) (RateRule, error) {
	bad := func(format string, a ...any) (RateRule, error) {
		return RateRule{}, fmt.Errorf("--rate %q: "+format+" (want PRINCIPAL=N/s[:BURST] or *=N/s[:BURST], e.g. alice=2/s:5 or *=0.5/s)", append([]any{v}, a...)...)
	}
	i := strings.LastIndexByte(v, '=')
	if i < 0 {
		return bad("no =")
	}
	who, limit := v[:i], v[i+1:]
	if who == "" {
		return bad("no principal")
	}
	if strings.IndexFunc(who, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0 {
		return bad("the principal has a space or a character that does not print")
	}
	n, burst, hasBurst := strings.Cut(limit, ":")
	n, ok := strings.CutSuffix(n, "/s")
	if !ok {
		return bad("the rate is not N/s")
	}
	if !rateNumber.MatchString(n) {
		return bad("%q is not a decimal number", n)
	}
	perSecond, err := strconv.ParseFloat(n, 64)
	if err != nil || perSecond <= 0 || math.IsInf(perSecond, 0) {
		return bad("the rate must be above 0 calls a second")
	}
	r := RateRule{Principal: who, PerSecond: perSecond, Burst: int(math.Min(math.Ceil(perSecond), math.MaxInt32))}
	if hasBurst {
		b, err := strconv.Atoi(burst)
		if err != nil || b < 1 || strings.HasPrefix(burst, "+") {
			return bad("the burst %q is not a whole number of 1 or more", burst)
		}
		r.Burst = b
	}
	return r, nil
}

// RateRules are the --rate rules by principal (AnyPrincipal for *).
type RateRules map[string]RateRule

// Add records r, refusing a second rule for the same principal.
func (m RateRules) Add(r RateRule) error {
	if old, ok := m[r.Principal]; ok {
		return fmt.Errorf("principal %q already has a rule, %s=%s: give one --rate per principal", r.Principal, old.Principal, old)
	}
	m[r.Principal] = r
	return nil
}

// rule is the rule of the principal named name: its own, or *'s.
func (m RateRules) rule(name string) (RateRule, bool) {
	if r, ok := m[name]; ok {
		return r, true
	}
	r, ok := m[AnyPrincipal]
	return r, ok
}

// rateLimits are the buckets of the principals rules cover, by
// principal key (auth.Principal.Key, or StdioPrincipal).
type rateLimits struct {
	rules RateRules
	now   func() time.Time // time.Now; tests set it
	mu    sync.Mutex
	by    map[string]*rate.Limiter
}

func newRateLimits(rules RateRules) *rateLimits {
	if len(rules) == 0 {
		return nil
	}
	return &rateLimits{rules: rules, now: time.Now, by: map[string]*rate.Limiter{}}
}

// take takes a token of the bucket of the principal named name (key is
// who it is). It returns the rule and, when the bucket is empty, how
// long until a token is back (nothing taken); ok is false when no rule
// covers the principal.
func (l *rateLimits) take(name, key string) (r RateRule, wait time.Duration, ok bool) {
	if l == nil {
		return RateRule{}, 0, false
	}
	if r, ok = l.rules.rule(name); !ok {
		return RateRule{}, 0, false
	}
	now := l.now()
	l.mu.Lock()
	lim := l.by[key]
	if lim == nil {
		if len(l.by) >= maxBuckets {
			l.sweep(now)
		}
		lim = rate.NewLimiter(rate.Limit(r.PerSecond), r.Burst)
		l.by[key] = lim
	}
	l.mu.Unlock()
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return r, d, true
	}
	return r, 0, true
}

// sweep lets go the full buckets (a full bucket is what a new one is, so
// nothing is lost) or, when none is, the fullest. l.mu is held.
func (l *rateLimits) sweep(now time.Time) {
	fullest, most := "", math.Inf(-1)
	for k, lim := range l.by {
		left := lim.TokensAt(now) - float64(lim.Burst()) // ≤ 0; 0 is full
		if left >= 0 {
			delete(l.by, k)
			continue
		}
		if left > most {
			fullest, most = k, left
		}
	}
	if len(l.by) >= maxBuckets {
		delete(l.by, fullest)
	}
}

// retryAfter is wait in whole seconds, rounded up (Retry-After).
func retryAfter(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}

// rateCounted reports whether a call of tool counts toward a rate limit:
// every tool but checkpoint_status (seed 000 says it is never off). Only
// that built-in: a tools.conf tool may be named checkpoint_*.
func rateCounted(tool string) bool { return tool != policy.StatusTool }

// rateTakenKey marks a request whose token HTTP.takeRate took.
type rateTakenKey struct{}

// rateLimited is a call's answer over the limit: its isError result and
// audit record.
func (s *Server) rateLimited(ctx context.Context, req mcp.CallToolRequest, p *auth.Principal, r RateRule, wait time.Duration) *mcp.CallToolResult {
	name := req.Params.Name
	who := StdioPrincipal
	if p != nil {
		who = p.Name
	}
	rec := &audit.Call{
		RequestID: jsonrpc.CallInfoFrom(ctx).ID, Tool: name, Kind: s.kindOf(name), Backend: s.backendOf(name),
		Refused: "rate", Rate: &audit.Rate{PerSecond: r.PerSecond, Burst: r.Burst, RetryAfter: wait}, IsError: true,
	}
	rec.Annotate(ctx, req)
	s.audit(rec, "call")
	return toolcall.ErrorResult("toolgate: %s: principal %q is over its rate limit of %s calls a second, burst %d (serve --rate); retry in %d s",
		name, bounded(who, 128), strconv.FormatFloat(r.PerSecond, 'f', -1, 64), r.Burst, retryAfter(wait))
}

// limitRate is the outermost tool middleware New installs: a call not
// already counted over HTTP (HTTP.takeRate) takes a token of its
// principal's bucket, or is answered isError without running.
func (s *Server) limitRate(next mcpserver.ToolHandlerFunc) mcpserver.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if s.rates == nil || !rateCounted(req.Params.Name) || ctx.Value(rateTakenKey{}) != nil {
			return next(ctx, req)
		}
		name, key := StdioPrincipal, StdioPrincipal
		var pp *auth.Principal
		if p, ok := auth.PrincipalFrom(ctx); ok {
			name, key, pp = p.Name, p.Key(), &p
		}
		r, wait, ok := s.rates.take(name, key)
		if !ok {
			return next(ctx, req)
		}
		s.metrics.rate(wait == 0)
		if wait > 0 {
			return s.rateLimited(ctx, req, pp, r, wait), nil
		}
		return next(ctx, req)
	}
}

// takeRate counts a POSTed tools/call before mcp-go reads it: over the
// principal's limit it is answered 429 with Retry-After and the isError
// result as its JSON-RPC response, and ok is false; otherwise the
// returned request is marked counted (limitRate lets it pass).
func (h *HTTP) takeRate(w http.ResponseWriter, r *http.Request, p auth.Principal, env envelope) (*http.Request, bool) {
	name := env.Params.Name
	if h.s.rates == nil || env.Method != string(mcp.MethodToolsCall) || !h.s.known(name) || !rateCounted(name) {
		return r, true
	}
	rule, wait, ok := h.s.rates.take(p.Name, p.Key())
	if !ok {
		return r, true
	}
	h.metrics.rate(wait == 0)
	if wait == 0 {
		return r.WithContext(context.WithValue(r.Context(), rateTakenKey{}, true)), true
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	if tp, ok := env.Params.Meta["traceparent"]; ok {
		req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{"traceparent": tp}}
	}
	ctx := auth.WithPrincipal(jsonrpc.WithCallInfo(r.Context(), jsonrpc.CallInfo{ID: jsonrpc.CanonicalID(env.ID)}), p)
	res := h.s.rateLimited(ctx, req, &p, rule, wait)
	if env.stateless(r) {
		res.ResultType = mcp.ResultTypeComplete
	}
	var id any
	_ = json.Unmarshal(env.ID, &id) // none, or not an id: null
	body, _ := json.Marshal(mcp.JSONRPCResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(id), Result: res})
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter(wait)))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(body)
	return r, false
}
