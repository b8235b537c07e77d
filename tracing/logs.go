package tracing

import (
	"context"
	"fmt"
	"sort"

	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	otellog "go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
)

// logPipeline exports the audit records as OTel logs
// (OTEL_LOGS_EXPORTER=otlp): the SDK's logger provider and its batch
// processor, which never blocks (a full queue drops its oldest records),
// over the OTLP exporter of OTEL_EXPORTER_OTLP_LOGS_PROTOCOL (or the
// general protocol); the exporters read the OTEL_EXPORTER_OTLP_* (and
// _LOGS_*) variables themselves, the processor the OTEL_BLRP_* ones.
type logPipeline struct {
	lp     *sdklog.LoggerProvider
	logger otellog.Logger
}

func newLogPipeline(ctx context.Context, getenv func(string) string, res *resource.Resource) (*logPipeline, error) {
	proto, err := protocol(getenv, "LOGS")
	if err != nil {
		return nil, err
	}
	var exp sdklog.Exporter
	if proto == ProtocolGRPC {
		exp, err = otlploggrpc.New(ctx)
	} else {
		exp, err = otlploghttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp log exporter (%s): %w", proto, err)
	}
	opts := []sdklog.LoggerProviderOption{sdklog.WithResource(res), sdklog.WithProcessor(sdklog.NewBatchProcessor(exp))}
	if getenv("OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT") == "" && getenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT") == "" {
		opts = append(opts, sdklog.WithAttributeValueLengthLimit(MaxAttributeBytes))
	}
	lp := sdklog.NewLoggerProvider(opts...)
	return &logPipeline{lp: lp, logger: lp.Logger(auditScope)}, nil
}

// auditScope is the instrumentation scope of the audit's OTel logs.
const auditScope = "github.com/toolgate/toolgate/audit"

func (l *logPipeline) shutdown(ctx context.Context) error { return l.lp.Shutdown(ctx) }

// AuditHook is the logrus hook that exports each entry of the audit
// logger as an OTel log record, or nil when OTEL_LOGS_EXPORTER is not
// otlp: the message as the body, each field as an attribute of the same
// key, the entry's time, severity INFO, and the trace and span ids of the
// call's span when the record carries them (audit.Call.Write puts its
// span context in the entry's context). The stderr JSON lines stay as
// they are.
//
// Unless principal (serve --trace-principal), the fields that say who
// called (principalFields) are left out: the record carries the call's
// trace id, and no exported record names who called without the
// operator's word.
func (p *Provider) AuditHook(principal bool) logrus.Hook {
	if p == nil || p.logs == nil {
		return nil
	}
	return auditHook{p.logs.logger, principal}
}

// principalFields are the audit fields that say who called.
var principalFields = map[string]bool{"principal": true, "auth": true, "client": true, "peer_uid": true}

type auditHook struct {
	logger    otellog.Logger
	principal bool
}

func (auditHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h auditHook) Fire(e *logrus.Entry) error {
	var r otellog.Record
	r.SetTimestamp(e.Time)
	r.SetObservedTimestamp(e.Time)
	r.SetSeverity(severity(e.Level))
	r.SetSeverityText(e.Level.String())
	r.SetBody(attribute.StringValue(e.Message))
	keys := make([]string, 0, len(e.Data))
	for k := range e.Data {
		if h.principal || !principalFields[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	attrs := make([]attribute.KeyValue, 0, len(keys))
	for _, k := range keys {
		attrs = append(attrs, attribute.KeyValue{Key: attribute.Key(k), Value: logValue(e.Data[k])})
	}
	r.AddAttributes(attrs...)
	ctx := e.Context
	if ctx == nil {
		ctx = context.Background()
	}
	h.logger.Emit(ctx, r)
	return nil
}

func severity(l logrus.Level) otellog.Severity {
	switch l {
	case logrus.PanicLevel, logrus.FatalLevel:
		return otellog.SeverityFatal
	case logrus.ErrorLevel:
		return otellog.SeverityError
	case logrus.WarnLevel:
		return otellog.SeverityWarn
	case logrus.DebugLevel:
		return otellog.SeverityDebug
	case logrus.TraceLevel:
		return otellog.SeverityTrace
	}
	return otellog.SeverityInfo
}

// logValue is an audit field's value as an OTel log value: its own type
// where the log API has one, else its text.
func logValue(v any) attribute.Value {
	switch v := v.(type) {
	case string:
		return attribute.StringValue(v)
	case bool:
		return attribute.BoolValue(v)
	case int:
		return attribute.IntValue(v)
	case int64:
		return attribute.Int64Value(v)
	case uint16:
		return attribute.IntValue(int(v))
	case float64:
		return attribute.Float64Value(v)
	case []string:
		return attribute.StringSliceValue(v)
	case fmt.Stringer:
		return attribute.StringValue(v.String())
	}
	return attribute.StringValue(fmt.Sprint(v))
}
