// Package tracing is toolgate's OpenTelemetry setup: the trace (and audit
// log) pipeline configured by the standard OTEL_* variables, read by the
// SDK and its exporters themselves (the OTLP endpoint, headers, timeout
// and TLS, the service name and resource attributes, the sampler, the
// batch processor's sizes). What toolgate decides is only which exporter
// runs (OTEL_TRACES_EXPORTER, OTEL_LOGS_EXPORTER, OTEL_SDK_DISABLED) and
// with which OTLP protocol, and that no export ever blocks a call: spans
// leave through the SDK's batch processor into a bounded hand-off whose
// drops are counted (Provider.Stats).
//
// Only cmd/toolgate imports this package and the SDK; the packages on a
// call's path use the API alone (internal/telemetry), so that with
// tracing off every span is the API's no-op one.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Exporter is a value of OTEL_TRACES_EXPORTER (and OTEL_LOGS_EXPORTER).
type Exporter string

// The exporters toolgate runs.
const (
	ExporterNone Exporter = "none"
	ExporterOTLP Exporter = "otlp"
)

// KnownExporters are the values OTEL_TRACES_EXPORTER may take.
func KnownExporters() []Exporter { return []Exporter{ExporterNone, ExporterOTLP} }

// Protocol is a value of OTEL_EXPORTER_OTLP_PROTOCOL.
type Protocol string

// The OTLP protocols toolgate speaks.
const (
	ProtocolHTTP Protocol = "http/protobuf"
	ProtocolGRPC Protocol = "grpc"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME (or
// service.name in OTEL_RESOURCE_ATTRIBUTES) does not set it.
const DefaultServiceName = "toolgate"

// Config is what toolgate decides of the pipeline; everything else is the
// SDK's own reading of the OTEL_* variables.
type Config struct {
	// Traces is the trace exporter: OTEL_TRACES_EXPORTER, or serve's
	// --traces-exporter when given. "" is none.
	Traces Exporter
	// Logs is the exporter of the audit records as OTel logs
	// (OTEL_LOGS_EXPORTER); "" is none.
	Logs Exporter
	// Version is service.version.
	Version string
	// Getenv reads the environment; nil is os.Getenv. The SDK and the
	// exporters read the process environment themselves.
	Getenv func(string) string
	// Errors receives the SDK's errors (a failed export: its text may
	// hold what a collector answered); nil drops them. The SDK's own
	// fallback writes them unescaped to stderr, where the audit lines
	// go, and is never used.
	Errors func(error)
}

// FromEnv is the Config the environment asks for: the exporters of
// OTEL_TRACES_EXPORTER and OTEL_LOGS_EXPORTER, both none when
// OTEL_SDK_DISABLED is true.
func FromEnv(getenv func(string) string) Config {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Config{Getenv: getenv}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		c.Traces, c.Logs = ExporterNone, ExporterNone
		return c
	}
	c.Traces = Exporter(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	c.Logs = Exporter(strings.TrimSpace(getenv("OTEL_LOGS_EXPORTER")))
	return c
}

// ParseExporter checks an exporter's value; "" is none. A list (the
// spec allows "otlp,console") is refused: toolgate runs one.
func ParseExporter(name, v string) (Exporter, error) {
	switch e := Exporter(v); e {
	case "", ExporterNone:
		return ExporterNone, nil
	case ExporterOTLP:
		return e, nil
	}
	return "", fmt.Errorf("%s %q: want one of %q", name, v, KnownExporters())
}

// protocol is the OTLP protocol of a signal: its own variable
// (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL), else the general one, else
// http/protobuf (the specification's default).
func protocol(getenv func(string) string, signal string) (Protocol, error) {
	name := "OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		name = "OTEL_EXPORTER_OTLP_PROTOCOL"
		v = strings.TrimSpace(getenv(name))
	}
	switch p := Protocol(v); p {
	case "":
		return ProtocolHTTP, nil
	case ProtocolHTTP, ProtocolGRPC:
		return p, nil
	}
	return "", fmt.Errorf("%s %q: want %q or %q", name, v, ProtocolHTTP, ProtocolGRPC)
}

// Check refuses what Start would: an exporter toolgate does not run, or
// an OTLP protocol it does not speak for a signal that is exported.
func (c Config) Check() error {
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	traces, err := ParseExporter("OTEL_TRACES_EXPORTER", string(c.Traces))
	if err != nil {
		return err
	}
	logs, err := ParseExporter("OTEL_LOGS_EXPORTER", string(c.Logs))
	if err != nil {
		return err
	}
	for signal, e := range map[string]Exporter{"TRACES": traces, "LOGS": logs} {
		if e != ExporterOTLP {
			continue
		}
		if _, err := protocol(getenv, signal); err != nil {
			return err
		}
		for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_" + signal + "_HEADERS"} {
			if err := checkHeaders(name, getenv(name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// headerName is an HTTP header field name (RFC 9110 token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// checkHeaders refuses an OTEL_EXPORTER_OTLP_*HEADERS value (name) that
// the exporters would half read: they skip a bad pair and print the
// variable, secrets and all. The refusal names the entry, and its key
// when it has one, never a value.
func checkHeaders(name, v string) error {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	for i, pair := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(pair, "=")
		key, err := url.PathUnescape(strings.TrimSpace(k))
		if !ok || err != nil || !headerName.MatchString(key) {
			return fmt.Errorf("%s: entry %d is not NAME=VALUE with NAME a header name (want name=url-encoded-value,...)", name, i+1)
		}
		if _, err := url.PathUnescape(strings.TrimSpace(val)); err != nil {
			return fmt.Errorf("%s: the value of %s is not URL-encoded (a %% must start %%XX)", name, key)
		}
	}
	return nil
}

// MaxAttributeBytes is the longest attribute value exported when the
// OTEL_*ATTRIBUTE_VALUE_LENGTH_LIMIT variables set none (the SDK's own
// default is no limit): whatever a client or a tool puts in a value, a
// span or a log record stays small, and so do the queues holding them.
const MaxAttributeBytes = 1024

// Provider is the running pipeline. A nil *Provider is tracing off: its
// TracerProvider is the API's no-op one and its methods do nothing.
type Provider struct {
	tp       *sdktrace.TracerProvider
	borrowed bool // Over's: not ours to shut down
	handoff  *handoff
	logs     *logPipeline
}

// Start starts the pipeline c asks for; with both exporters none it
// returns nil (tracing off) and starts nothing. An exporter or protocol
// toolgate does not run is an error, so that a misspelt setting never
// leaves an operator believing calls are traced.
func Start(ctx context.Context, c Config) (*Provider, error) {
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	if err := c.Check(); err != nil {
		return nil, err
	}
	traces, err := ParseExporter("OTEL_TRACES_EXPORTER", string(c.Traces))
	if err != nil {
		return nil, err
	}
	logs, err := ParseExporter("OTEL_LOGS_EXPORTER", string(c.Logs))
	if err != nil {
		return nil, err
	}
	if traces == ExporterNone && logs == ExporterNone {
		return nil, nil
	}
	errs := c.Errors
	if errs == nil {
		errs = func(error) {}
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(errs))
	otel.SetLogger(logr.Discard())
	res, err := newResource(ctx, c.Version)
	if err != nil {
		return nil, err
	}
	p := &Provider{}
	if traces == ExporterOTLP {
		exp, err := newSpanExporter(ctx, c.Getenv)
		if err != nil {
			return nil, err
		}
		p.handoff = newHandoff(exp, handoffBatches)
		// The SDK's batch processor (OTEL_BSP_* sizes), never blocking
		// on a full queue; the sampler is the SDK's reading of
		// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default
		// parentbased_always_on).
		limits := sdktrace.NewSpanLimits() // OTEL_SPAN_* and OTEL_ATTRIBUTE_* first
		if limits.AttributeValueLengthLimit < 0 {
			limits.AttributeValueLengthLimit = MaxAttributeBytes
		}
		p.tp = sdktrace.NewTracerProvider(
			sdktrace.WithResource(res),
			sdktrace.WithRawSpanLimits(limits),
			sdktrace.WithSpanProcessor(sdktrace.NewBatchSpanProcessor(p.handoff)),
		)
	}
	if logs == ExporterOTLP {
		lp, err := newLogPipeline(ctx, c.Getenv, res)
		if err != nil {
			return nil, errors.Join(err, p.Shutdown(ctx))
		}
		p.logs = lp
	}
	return p, nil
}

// newResource is the resource of every span and log: service.name
// toolgate and service.version, then what OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME say (they win), then the SDK's own attributes.
func newResource(ctx context.Context, version string) (*resource.Resource, error) {
	own := []attribute.KeyValue{semconv.ServiceName(DefaultServiceName)}
	if version != "" {
		own = append(own, semconv.ServiceVersion(version))
	}
	// Each detector overrides the ones before it.
	res, err := resource.New(ctx, resource.WithAttributes(own...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("otel resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	return res, nil
}

// newSpanExporter is the OTLP exporter of the protocol asked for; it
// reads its endpoint, headers, timeout, compression and TLS from the
// OTEL_EXPORTER_OTLP_* variables itself. Nothing connects here: the
// first export does.
func newSpanExporter(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	proto, err := protocol(getenv, "TRACES")
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	if proto == ProtocolGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter (%s): %w", proto, err)
	}
	return exp, nil
}

// TracerProvider is where the server starts a call's span: the SDK's, or
// the API's no-op one when p is nil.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p == nil || p.tp == nil {
		return noop.NewTracerProvider()
	}
	return p.tp
}

// Stats are the span counts of the pipeline.
type Stats struct {
	// Exported spans reached the collector; Dropped did not: the
	// hand-off was full (the collector slow or unreachable) or the export
	// failed.
	Exported, DroppedFull, DroppedFailed uint64
}

// Stats are p's counts so far; zero when p is nil.
func (p *Provider) Stats() Stats {
	if p == nil || p.handoff == nil {
		return Stats{}
	}
	return p.handoff.stats()
}

// ShutdownGrace bounds the flush at exit: what a collector has not taken
// by then is dropped, and toolgate exits.
const ShutdownGrace = 2 * time.Second

// Shutdown flushes and stops the pipeline, within ctx and ShutdownGrace.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, ShutdownGrace)
	defer cancel()
	var errs []error
	if p.tp != nil && !p.borrowed {
		errs = append(errs, p.tp.Shutdown(ctx))
	}
	if p.logs != nil {
		errs = append(errs, p.logs.shutdown(ctx))
	}
	return errors.Join(errs...)
}

// Over is a Provider over a tracer provider the caller made and owns
// (tests: the SDK's tracetest span recorder); its Stats are zero and its
// Shutdown leaves tp running.
func Over(tp *sdktrace.TracerProvider) *Provider {
	return &Provider{tp: tp, borrowed: true}
}
