package server

// What the HTTP transport decides of a tool call once the request is
// authenticated: the middleware every Server installs (gateCall) hands a
// call served over HTTP to its transport (gate: the scopes, the
// per-principal concurrency), and the 2025-11-25 requests in flight are
// kept by principal and session so that a cancel reaches only its own.

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/jsonrpc"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/toolcall"
)

// httpKey is the context key of the HTTP transport serving a request.
type httpKey struct{}

func withHTTP(ctx context.Context, h *HTTP) context.Context {
	return context.WithValue(ctx, httpKey{}, h)
}

// servedBy returns the HTTP transport serving ctx's request; ok is false
// over stdio.
func servedBy(ctx context.Context) (h *HTTP, ok bool) {
	h, ok = ctx.Value(httpKey{}).(*HTTP)
	return h, ok
}

// gateCall is the middleware New installs around every tool handler: a
// call the policy file does not permit is refused (authorizeCall); then
// a call over HTTP goes through its transport's gate (HTTP.gate); one
// over stdio is only timed, when metrics are on.
func (s *Server) gateCall(next mcpserver.ToolHandlerFunc) mcpserver.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if res := s.authorizeCall(ctx, req); res != nil {
			return res, nil
		}
		if h, ok := servedBy(ctx); ok {
			return h.gate(ctx, req, next)
		}
		if s.metrics == nil {
			return next(ctx, req)
		}
		start := time.Now()
		res, err := next(ctx, req)
		s.metrics.observeCall(req.Params.Name, s.backendOf(req.Params.Name), time.Since(start))
		return res, err
	}
}

// inflight are the 2025-11-25 requests being served over HTTP, by
// principal, session and request id: all a notifications/cancelled can
// reach. A principal's cancel names its own session (one of another's is
// answered 404 before), so it never reaches another principal's request.
type inflight struct {
	mu sync.Mutex
	m  map[inflightKey][]*inflightCall
}

type inflightKey struct{ principal, session, id string }

type inflightCall struct{ cancel context.CancelFunc }

// add registers a request; done forgets it.
func (f *inflight) add(ctx context.Context, principal, session string, id json.RawMessage) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	k := inflightKey{principal, session, jsonrpc.CanonicalID(id)}
	c := &inflightCall{cancel: cancel}
	f.mu.Lock()
	f.m[k] = append(f.m[k], c)
	f.mu.Unlock()
	return ctx, func() {
		cancel()
		f.mu.Lock()
		defer f.mu.Unlock()
		list := slices.DeleteFunc(f.m[k], func(x *inflightCall) bool { return x == c })
		if len(list) == 0 {
			delete(f.m, k)
		} else {
			f.m[k] = list
		}
	}
}

// cancel cancels the requests of principal's session with that id.
func (f *inflight) cancel(principal, session string, id json.RawMessage) {
	if len(id) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.m[inflightKey{principal, session, jsonrpc.CanonicalID(id)}] {
		c.cancel()
	}
}

// refuseScope answers a tools/call of a tool the principal's scopes do
// not open: 403 insufficient_scope naming the scopes that would (the MCP
// authorization spec's step-up), audited, nothing run.
func (h *HTTP) refuseScope(w http.ResponseWriter, p auth.Principal, env envelope) {
	scopes := strings.Join(h.opts.Scopes.ScopesFor(env.Params.Name), " ")
	rec := &audit.Call{
		RequestID: string(env.ID), Tool: env.Params.Name, Kind: h.s.kindOf(env.Params.Name),
		Backend: h.s.backendOf(env.Params.Name), Refused: "scope", IsError: true, Principal: &p,
	}
	if tp, _ := env.Params.Meta["traceparent"].(string); audit.ValidTraceparent(tp) {
		rec.Traceparent = tp
	}
	h.s.audit(rec, "call")
	h.metrics.limit("scope")
	h.challenge(w, "insufficient_scope", "the token's scopes do not open this tool", scopes)
	writeAuthError(w, http.StatusForbidden, "insufficient_scope", "the token's scopes do not open tool "+strconv.Quote(bounded(env.Params.Name, 128))+"; it needs one of: "+scopes)
}

// gate runs a call over HTTP: it checks the principal's scope again
// (gateTools already hid the tool), holds a slot of the principal's
// --max-concurrent-per-principal, and times the call. A request without
// a principal (none reaches here: serveMCP sets both) is refused.
func (h *HTTP) gate(ctx context.Context, req mcp.CallToolRequest, next mcpserver.ToolHandlerFunc) (*mcp.CallToolResult, error) {
	name := req.Params.Name
	backend := h.s.backendOf(name)
	p, ok := auth.PrincipalFrom(ctx)
	if !ok {
		return toolcall.ErrorResult("toolgate: %s: the request has no principal", name), nil
	}
	h.calls.Add(1)
	defer h.calls.Done()
	h.inFlight.Add(1)
	defer h.inFlight.Add(-1)
	if h.metrics != nil {
		h.metrics.inFlight.Inc()
		defer h.metrics.inFlight.Dec()
	}
	start := time.Now()
	if !h.scopeAllows(p, name) {
		return toolcall.ErrorResult("toolgate: tool %q is not opened by the token's scopes", name), nil
	}
	qspan := telemetry.Queue(ctx, "principal", start)
	release, waited, err := h.limits.acquire(ctx, p.Key(), h.s.callTimeout(name))
	qspan.End()
	if waited > 0 && h.metrics != nil {
		h.metrics.queueWait.WithLabelValues("principal").Observe(waited.Seconds())
	}
	if err != nil {
		rec := &audit.Call{
			RequestID: jsonrpc.CallInfoFrom(ctx).ID, Tool: name, Kind: h.s.kindOf(name), Backend: backend,
			Refused: "principal_queue", IsError: true, QueuedMS: audit.Some(waited.Milliseconds()),
		}
		rec.Annotate(ctx, req)
		h.s.audit(rec, "call")
		return toolcall.ErrorResult("toolgate: %s: %v", name, err), nil
	}
	defer release()
	res, err := next(ctx, req)
	h.metrics.observeCall(name, backend, time.Since(start))
	return res, err
}

// callTimeout is how long a call of name may wait for a principal's slot:
// its own timeout for an external, builtinQueueTimeout otherwise.
func (s *Server) callTimeout(name string) time.Duration {
	if c := s.conf.Load(); c != nil && c.State == conf.StateLoaded {
		for _, t := range c.Tools {
			if t.Name == name {
				return t.Timeout
			}
		}
	}
	return builtinQueueTimeout
}

// kindOf and backendOf read the served tool's status line.
