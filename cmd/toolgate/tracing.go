package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"

	"github.com/toolgate/toolgate/tracing"
)

// tracingFlags are serve's OpenTelemetry flags; every other setting is
// the standard OTEL_* variables, read by the SDK (docs/tracing.md).
type tracingFlags struct {
	exporter  string
	principal bool
}

func (f *tracingFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.exporter, "traces-exporter", "",
		"otlp or none: export a span tree of every call over OTLP (docs/tracing.md); default OTEL_TRACES_EXPORTER, else none (nothing started, no cost). The endpoint, protocol, headers, service name, resource and sampler are the standard OTEL_* variables")
	fs.BoolVar(&f.principal, "trace-principal", false,
		"record an HTTP call's principal (its name, enduser.id) on its span, and the audit's principal fields on its OTel log records; off, no exported span or record names who called")
}

// config is the pipeline the flags and the environment ask for.
func (f *tracingFlags) config(getenv func(string) string) (tracing.Config, error) {
	c := tracing.FromEnv(getenv)
	if f.exporter != "" {
		c.Traces = tracing.Exporter(f.exporter)
	}
	if _, err := tracing.ParseExporter("--traces-exporter (OTEL_TRACES_EXPORTER)", string(c.Traces)); err != nil {
		return c, err
	}
	c.Version = version
	return c, c.Check()
}

// tracingErrors is tracing.Config.Errors: the SDK's errors as warnings of
// log, its formatter escaping what a collector put in them, at most one
// a second (a collector down fails every export).
func tracingErrors(log *logrus.Logger) func(error) {
	every := rate.Sometimes{Interval: time.Second}
	return func(err error) {
		every.Do(func() { log.WithError(err).Warn("tracing: export failed (at most one such line a second)") })
	}
}

// start starts the pipeline into a's server options (tracing off: none).
// The returned stop flushes it (within tracing.ShutdownGrace) at exit.
func (f *tracingFlags) start(ctx context.Context, a *app) (func(), error) {
	c, err := f.config(os.Getenv)
	if err != nil {
		return func() {}, err
	}
	c.Errors = tracingErrors(a.log)
	p, err := tracing.Start(ctx, c)
	if err != nil {
		return func() {}, fmt.Errorf("tracing: %w", err)
	}
	a.opts.TracePrincipal = f.principal
	if p == nil {
		return func() {}, nil
	}
	a.opts.Tracing = p
	if h := p.AuditHook(f.principal); h != nil && a.opts.Audit != nil {
		a.opts.Audit.AddHook(h) // the audit records as OTel logs too
	}
	a.log.WithFields(logrus.Fields{"traces": c.Traces, "logs": c.Logs}).Info("OpenTelemetry export on")
	return func() {
		if err := p.Shutdown(context.WithoutCancel(ctx)); err != nil {
			a.log.WithError(err).Warn("tracing: flush at exit")
		}
	}, nil
}
