// Package telemetry is what the packages on a call's path use of
// OpenTelemetry: the API alone, never the SDK (package tracing sets that
// up in cmd/toolgate). A span's child is started with the tracer provider
// of the span in its context (Start), so that nothing is passed down but
// the context, and with tracing off every span is the API's no-op one.
// The trace context crosses MCP in a request's _meta (traceparent,
// tracestate: FromMeta, Meta) and HTTP in the W3C headers.
package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of toolgate's spans.
const Scope = "github.com/toolgate/toolgate"

// Start starts a child of the span in ctx, with that span's tracer
// provider: a no-op span when ctx has none, or when tracing is off.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(Scope).Start(ctx, name, opts...)
}

// Fail marks span failed with errType (error.type: timeout, output,
// egress-bytes, ...) and a description.
func Fail(span trace.Span, errType, desc string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(semconv.ErrorTypeKey.String(errType))
	span.SetStatus(codes.Error, desc)
}

// propagator is W3C Trace Context: traceparent and tracestate.
var propagator = propagation.TraceContext{}

// metaCarrier reads and writes the trace context in an MCP _meta.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	s, _ := m[key].(string)
	return s
}

func (m metaCarrier) Set(key, value string) { m[key] = value }

func (m metaCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// FromMeta returns ctx with the remote span context of an MCP request's
// _meta (its traceparent and tracestate), when it has a valid one; else
// ctx as it is (which may hold one the HTTP headers gave).
func FromMeta(ctx context.Context, meta map[string]any) context.Context {
	if meta == nil {
		return ctx
	}
	if _, ok := meta["traceparent"]; !ok {
		return ctx
	}
	if sc := trace.SpanContextFromContext(propagator.Extract(context.Background(), metaCarrier(meta))); sc.IsValid() {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}

// FromHeaders returns ctx with the remote span context of an HTTP
// request's W3C headers, when it has a valid one.
func FromHeaders(ctx context.Context, h propagation.HeaderCarrier) context.Context {
	if h.Get("traceparent") == "" {
		return ctx
	}
	return propagator.Extract(ctx, h)
}

// Meta returns the _meta fields (traceparent, tracestate) that pass on
// the span context of ctx, or nil when it has no valid one.
func Meta(ctx context.Context) map[string]any {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	m := metaCarrier{}
	propagator.Inject(ctx, m)
	return m
}

// Headers sets the W3C headers that pass on the span context of ctx.
func Headers(ctx context.Context, h propagation.HeaderCarrier) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagator.Inject(ctx, h)
	}
}

// Attrs sets attributes on span only when it records: callers build them
// lazily where they cost anything.
func Attrs(span trace.Span, attrs ...attribute.KeyValue) {
	if span.IsRecording() {
		span.SetAttributes(attrs...)
	}
}

// Queue starts the span of a call's wait for a slot (queue: server,
// principal, downstream) under the call's span, from the call's arrival
// when it is known (else from now). The caller ends it when the wait
// does.
func Queue(ctx context.Context, queue string, arrived time.Time) trace.Span {
	opts := []trace.SpanStartOption{trace.WithAttributes(attribute.String("toolgate.queue", queue))}
	if !arrived.IsZero() {
		opts = append(opts, trace.WithTimestamp(arrived))
	}
	_, span := Start(ctx, "queue wait", opts...)
	return span
}
