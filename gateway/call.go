package gateway

// The call of a downstream tool: its handler, one audit record per call,
// and how each failure answers.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/jsonrpc"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/toolcall"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/status"
)

// Handler answers calls of one enabled tool of the server: what Register
// and later listings serve it with.
func (d *Server) Handler(tool string) mcpserver.ToolHandlerFunc { return d.handler(tool) }

// handler answers calls of one enabled tool of the server. Each call is
// one audit record, marked as external content; a credential's value is
// never in it.
func (d *Server) handler(tool string) mcpserver.ToolHandlerFunc {
	served := d.srv.ServedName(tool)
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		call := jsonrpc.CallInfoFrom(ctx)
		rec := &audit.Call{
			RequestID: call.ID, Tool: served, Kind: status.KindDownstream, Server: d.srv.ID,
			Transport: string(d.srv.Transport), Backend: d.backend, Content: "external", Call: d.deps.CallID(),
		}
		rec.Annotate(ctx, req)
		done := func(res *mcp.CallToolResult) (*mcp.CallToolResult, error) { //nolint:unparam // shaped to be the handler's return
			rec.IsError = res.IsError
			if ctx.Err() != nil {
				// notifications/cancelled (or shutdown): the transport
				// answers nothing.
				rec.Cancelled = true
			}
			d.deps.Audit(rec, "call")
			return res, nil
		}
		refuse := func(what, format string, a ...any) (*mcp.CallToolResult, error) {
			rec.Refused = what
			return done(toolcall.ErrorResult("toolgate: %s: "+format, append([]any{served}, a...)...))
		}
		if !d.srv.Enabled(tool) {
			return refuse("not enabled", "not in enabled_tools of %q", d.srv.ID)
		}
		if !d.enter() {
			return refuse("reloaded", "the downstream server %q was replaced or removed by a reload of the registry as this call arrived; not called: call it again", d.srv.ID)
		}
		defer d.calls.Done()
		if d.unavailable != nil {
			return refuse("unavailable", "the downstream server %q cannot run here: %v. It is never run unsandboxed; `toolgate doctor` says how to fix the backend.", d.srv.ID, d.unavailable)
		}
		if err := d.checkVars(); err != nil {
			return refuse("variables", "%v; not called", err)
		}
		queued := call.Arrival
		if d.slot != nil {
			qspan := telemetry.Queue(ctx, "downstream", queued)
			defer qspan.End() // ended at once below when a slot is free
			if ctx.Err() != nil {
				return refuse("cancelled", "cancelled while queued")
			}
			t := time.NewTimer(time.Until(queued.Add(d.srv.ToolTimeout)))
			select {
			case d.slot <- struct{}{}:
				t.Stop()
				qspan.End()
				defer func() { <-d.slot }()
				if ctx.Err() != nil {
					return refuse("cancelled", "cancelled while queued")
				}
			case <-t.C:
				return refuse("queue", "queued for tool_timeout_sec (%s) behind another call of %q (supports_parallel_tool_calls is false); not called", d.srv.ToolTimeout, d.srv.ID)
			case <-ctx.Done():
				t.Stop()
				return refuse("cancelled", "cancelled while queued")
			}
		}
		c, err := d.get(ctx)
		if err != nil {
			rec.Error = audit.Some(err.Error())
			d.log.WithError(err).Warn("downstream server could not be started")
			return done(toolcall.ErrorResult("toolgate: %s: the downstream server %q could not be started: %v", served, d.srv.ID, err))
		}
		switch refused, why := d.servable(tool); refused {
		case "":
		case refusedNotOffered:
			return refuse(refused, "the downstream server %q does not offer %q", d.srv.ID, tool)
		default:
			return refuse(refused, "the downstream server %q lists %q, but toolgate does not serve it: %s", d.srv.ID, tool, why)
		}
		var creq mcp.CallToolRequest
		creq.Params.Name = tool
		if args := toolcall.Args(req); args != nil {
			creq.Params.Arguments = args
		}
		cctx, cancel := context.WithTimeout(ctx, d.srv.ToolTimeout)
		defer cancel()
		cctx, span := d.requestSpan(cctx, tool, c.n)
		defer span.End()
		if meta := telemetry.Meta(cctx); meta != nil {
			// The trace context passes on in _meta (and, to an HTTP
			// server, in the W3C headers: headerTransport).
			creq.Params.Meta = &mcp.Meta{AdditionalFields: meta}
		}
		start := time.Now()
		res, err := c.client.CallTool(cctx, creq)
		rec.Start = c.n
		rec.ElapsedMS = audit.Some(time.Since(start).Milliseconds())
		rec.QueuedMS = audit.Some(start.Sub(queued).Milliseconds())
		if err != nil {
			out := d.callFailed(ctx, cctx, c, rec, served, err)
			telemetry.Fail(span, requestErrorType(rec), "the downstream call failed")
			return done(out)
		}
		if res.IsError {
			telemetry.Fail(span, "tool_error", "the downstream tool answered isError")
		}
		if !d.deps.KeepEscapes(served) {
			res = neutralizeResult(res)
		}
		out, cut := capResult(res, d.maxBytes())
		rec.Truncated = audit.Some(cut)
		return done(out)
	}
}

// callFailed turns a failed call into isError, and stops a server that ran
// past the call's budget or whose HTTP session broke; a crashed process
// was already noted by its watcher.
func (d *Server) callFailed(ctx, cctx context.Context, c *dconn, rec *audit.Call, served string, err error) *mcp.CallToolResult {
	msg := d.redact(err.Error())
	if reason, ok := c.takeDiscarded(err); ok && ctx.Err() == nil {
		rec.Truncated, rec.Error = audit.Some(true), audit.Some("oversized response")
		return toolcall.ErrorResult("toolgate: %s: the downstream server %q sent %s. Ask for less, or raise --downstream-max-bytes.", served, d.srv.ID, reason)
	}
	switch {
	case ctx.Err() != nil:
		rec.Limit = audit.Some(string(rt.LimitCancelled))
		return toolcall.ErrorResult("toolgate: %s: [cancelled] the caller cancelled the call", served)
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		rec.Limit, rec.TimedOut = audit.Some(string(rt.LimitTimeout)), audit.Some(true)
		if c.proc != nil {
			why := ""
			if reason, ended := c.ended(); ended {
				why = " (" + reason + ")" // it did not read its stdin
			} else {
				d.drop(c, fmt.Sprintf("a call of %s exceeded tool_timeout_sec (%s)", served, d.srv.ToolTimeout))
			}
			return toolcall.ErrorResult("toolgate: %s: [timeout] no result within tool_timeout_sec (%s); the downstream server %q was stopped with everything it started%s and is started again on the next call",
				served, d.srv.ToolTimeout, d.srv.ID, why)
		}
		return toolcall.ErrorResult("toolgate: %s: [timeout] no result within tool_timeout_sec (%s)", served, d.srv.ToolTimeout)
	case c.proc != nil && errors.Is(err, transport.ErrTransportClosed):
		select {
		case <-c.dead:
		case <-time.After(2 * rt.DrainGrace):
		}
		reason, _ := c.ended()
		if reason == "" {
			reason = "its stdout closed"
		}
		rec.Error = audit.Some("server ended: " + reason)
		d.log.WithFields(logrus.Fields{"start": c.n, "reason": reason}).Warn("downstream server ended during a call")
		return toolcall.ErrorResult("toolgate: %s: the downstream server %q ended during the call (%s); it is started again on the next call", served, d.srv.ID, reason)
	case isRPCError(err):
		rec.RPCError = audit.Some(msg)
		return toolcall.ErrorResult("toolgate: %s: the downstream server %q answered an error: %s", served, d.srv.ID, msg)
	}
	rec.Error = audit.Some(msg)
	if c.proc == nil {
		d.drop(c, "the HTTP session failed: "+msg)
	}
	return toolcall.ErrorResult("toolgate: %s: the call to the downstream server %q failed: %s", served, d.srv.ID, msg)
}

// isRPCError reports a JSON-RPC error answer of the server: mcp-go wraps
// every failure to send or receive in *transport.Error, and returns an
// error answer as the error its code maps to.
func isRPCError(err error) bool {
	var te *transport.Error
	return !errors.As(err, &te)
}

// requestSpan starts the span of the request to the downstream server
// (kind client): the tool's name as the server knows it, the server, its
// transport and, for an HTTP one, its address and port.
func (d *Server) requestSpan(ctx context.Context, tool string, start int) (context.Context, trace.Span) {
	ctx, span := telemetry.Start(ctx, string(mcp.MethodToolsCall)+" "+tool, trace.WithSpanKind(trace.SpanKindClient))
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(
		semconv.McpMethodNameKey.String(string(mcp.MethodToolsCall)),
		semconv.GenAIToolName(tool),
		attribute.String("toolgate.downstream.server", d.srv.ID),
		attribute.String("toolgate.downstream.transport", string(d.srv.Transport)),
		attribute.Int("toolgate.downstream.start", start),
	)
	if u, err := url.Parse(d.srv.URL); err == nil && d.srv.URL != "" {
		span.SetAttributes(semconv.ServerAddress(u.Hostname()))
		if p, err := strconv.Atoi(u.Port()); err == nil {
			span.SetAttributes(semconv.ServerPort(p))
		}
	}
	return ctx, span
}

// requestErrorType is error.type of a failed downstream request, from its
// audit record.
func requestErrorType(rec *audit.Call) string {
	if l := rec.Limit.Value(); l != "" {
		return l
	}
	if _, ok := rec.RPCError.Get(); ok {
		return "rpc_error"
	}
	if rec.Truncated.Value() {
		return "output"
	}
	return "failed"
}
