package server

// Tracing (docs/tracing.md): with Options.Tracing set, every tools/call is
// a span (traceCall, the outermost middleware), parented on the client's
// trace context (_meta.traceparent and tracestate on every transport, the
// W3C headers over HTTP), and the spans of the call's steps (queue wait,
// sandbox, process, output, helpers, egress connections, the downstream
// request) are its children, started from the context by the packages
// that do the steps (internal/telemetry). The call's audit record sets its
// outcome on it (spanOutcome), so that what the span says is what the
// audit says.

import (
	"context"
	"strconv"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/internal/jsonrpc"
	"github.com/toolgate/toolgate/internal/telemetry"
)

// The attributes of toolgate's own that no semantic convention names.
const (
	attrKind      = attribute.Key("toolgate.tool.kind")
	attrBackend   = attribute.Key("toolgate.backend")
	attrCall      = attribute.Key("toolgate.call.id")
	attrServer    = attribute.Key("toolgate.downstream.server")
	attrRefused   = attribute.Key("toolgate.refused")
	attrOutBytes  = attribute.Key("toolgate.output.bytes")
	attrTruncated = attribute.Key("toolgate.output.truncated")
	attrEgConns   = attribute.Key("toolgate.egress.connections")
	attrEgBytes   = attribute.Key("toolgate.egress.bytes")
	attrDecision  = attribute.Key("toolgate.egress.decision")
	attrReason    = attribute.Key("toolgate.egress.reason")
	attrBytesUp   = attribute.Key("toolgate.egress.bytes_up")
	attrBytesDown = attribute.Key("toolgate.egress.bytes_down")
	attrInjected  = attribute.Key("toolgate.egress.credential_injected")
)

// maxIDAttr bounds the JSON-RPC id a span carries, in bytes.
const maxIDAttr = 128

// traceCall is the middleware of Options.Tracing (the outermost): the
// call's span, of kind server, from the call's arrival (stdio) or from
// now (HTTP: the request was read before).
func (s *Server) traceCall(next mcpserver.ToolHandlerFunc) mcpserver.ToolHandlerFunc {
	tracer := s.opts.Tracing.TracerProvider().Tracer(telemetry.Scope)
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Params.Meta != nil {
			ctx = telemetry.FromMeta(ctx, req.Params.Meta.AdditionalFields)
		}
		name := req.Params.Name
		if !s.known(name) {
			name = otherLabel // a client's name never makes a span name
		}
		call := jsonrpc.CallInfoFrom(ctx)
		id := jsonrpc.BoundText(call.ID, maxIDAttr) // a client's id may be megabytes
		opts := []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(
				semconv.McpMethodNameKey.String(string(mcp.MethodToolsCall)),
				semconv.GenAIOperationNameExecuteTool,
				semconv.GenAIToolName(jsonrpc.BoundText(req.Params.Name, 128)),
				semconv.JSONRPCRequestID(id),
				semconv.GenAIToolCallID(id),
				attrKind.String(string(s.kindOf(req.Params.Name))),
				attrBackend.String(s.backendOf(req.Params.Name)),
			),
		}
		if !call.Arrival.IsZero() {
			opts = append(opts, trace.WithTimestamp(call.Arrival))
		}
		if v := mcpserver.RequestProtocolVersion(ctx); v != "" {
			opts = append(opts, trace.WithAttributes(semconv.McpProtocolVersion(v)))
		}
		// stdio is a pipe; HTTP is TCP, or a unix socket (whose
		// principal has the peer's uid).
		transport := semconv.NetworkTransportPipe
		p, hasPrincipal := auth.PrincipalFrom(ctx)
		if _, ok := servedBy(ctx); ok {
			transport = semconv.NetworkTransportTCP
			if _, unix := p.PeerUID(); unix {
				transport = semconv.NetworkTransportUnix
			}
		}
		opts = append(opts, trace.WithAttributes(transport))
		if hasPrincipal && s.opts.TracePrincipal {
			opts = append(opts, trace.WithAttributes(semconv.EnduserID(p.Name)))
		}
		ctx, span := tracer.Start(ctx, string(mcp.MethodToolsCall)+" "+name, opts...)
		defer span.End()
		res, err := next(ctx, req)
		if err != nil {
			// mcp-go answers a JSON-RPC error; an isError result's
			// outcome was set by its audit record (spanOutcome).
			span.SetAttributes(semconv.ErrorTypeKey.String("rpc_error"))
			span.SetStatus(codes.Error, err.Error())
		}
		return res, err
	}
}

// spanOutcome sets a call's outcome, from its audit record, on its span:
// the exit code, the output, the egress use, and, when it failed, the
// status error with error.type the limit that ended it (timeout,
// cancelled, pids, memory), the reason it was refused (queue, rate,
// scope, policy, ...), the egress cap it hit (egress-bytes,
// egress-connections), output (truncated), rpc_error (a downstream's
// JSON-RPC error), failed (could not run) or tool_error.
func spanOutcome(r *audit.Call) {
	span := r.Span
	if span == nil || !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	if r.Call != "" {
		attrs = append(attrs, attrCall.String(r.Call))
	}
	if r.Server != "" {
		attrs = append(attrs, attrServer.String(r.Server))
	}
	if v, ok := r.ExitCode.Get(); ok {
		attrs = append(attrs, semconv.ProcessExitCode(v))
	}
	if v, ok := r.OutputBytes.Get(); ok {
		attrs = append(attrs, attrOutBytes.Int64(v))
	}
	if r.Truncated.Value() {
		attrs = append(attrs, attrTruncated.Bool(true))
	}
	if v, ok := r.EgressConns.Get(); ok {
		attrs = append(attrs, attrEgConns.Int64(v), attrEgBytes.Int64(r.EgressBytes.Value()))
	}
	if r.Refused != "" {
		attrs = append(attrs, attrRefused.String(r.Refused))
	}
	span.SetAttributes(attrs...)
	if r.IsError || r.Cancelled {
		telemetry.Fail(span, errorType(r), errorDesc(r))
	}
}

// errorType is error.type of a failed call.
func errorType(r *audit.Call) string {
	_, rpc := r.RPCError.Get()
	_, failed := r.Error.Get()
	switch l := r.Limit.Value(); {
	case l != "":
		return l
	case r.Cancelled:
		return "cancelled"
	case r.Refused != "":
		return r.Refused
	case r.EgressLimit != "":
		return r.EgressLimit
	case r.Truncated.Value():
		return "output"
	case rpc:
		return "rpc_error"
	case failed:
		return "failed"
	}
	return "tool_error"
}

// errorDesc is the status description of a failed call: never output,
// arguments or a downstream's text.
func errorDesc(r *audit.Call) string {
	if v, ok := r.ExitCode.Get(); ok {
		return "exit " + strconv.Itoa(v)
	}
	return errorType(r)
}

// egressSpans wraps the sink of a call's egress records: each connection
// the proxy recorded is also a span of kind client under the call's span,
// from its start to its end (host, port, decision, bytes; never content,
// never a credential). The proxy's audit budget bounds them as it bounds
// the records; a summary of the connections not recorded one by one is
// an event on the call's span.
func egressSpans(ctx context.Context, sink func(egress.Record)) func(egress.Record) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return sink
	}
	tracer := span.TracerProvider().Tracer(telemetry.Scope)
	return func(e egress.Record) {
		sink(e)
		if e.Decision == egress.Summary {
			span.AddEvent("egress summary", trace.WithAttributes(
				attribute.Int64("toolgate.egress.suppressed", e.Suppressed),
				attribute.Int64("toolgate.egress.past_cap", e.PastCap)))
			return
		}
		end := time.Now()
		_, cs := tracer.Start(ctx, "egress connect", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(end.Add(-e.Elapsed)),
			trace.WithAttributes(
				semconv.ServerAddress(e.Host), semconv.ServerPort(int(e.Port)),
				attrDecision.String(string(e.Decision)),
				attrBytesUp.Int64(e.Up), attrBytesDown.Int64(e.Down),
			))
		if e.Credential != "" {
			cs.SetAttributes(attrInjected.Bool(true))
		}
		if e.Decision != egress.Allowed {
			cs.SetAttributes(attrReason.String(e.Reason))
			telemetry.Fail(cs, "egress-"+string(e.Decision), e.Reason)
		}
		cs.End(trace.WithTimestamp(end))
	}
}
