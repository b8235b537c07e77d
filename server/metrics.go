package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/toolgate/toolgate/audit"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tracing"
)

// Metrics are the Prometheus metrics of a server, in a registry of their
// own (served at /metrics over HTTP). No label takes a value a client
// chose: tool names are the served ones (any other is counted as
// "other"), HTTP methods outside net/http's nine are "other", backends,
// outcomes, limits, reasons and listeners are closed sets, principals are
// never a label.
type Metrics struct {
	reg       *prometheus.Registry
	known     func(tool string) bool
	calls     *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	queueWait *prometheus.HistogramVec
	inFlight  prometheus.Gauge
	limits    *prometheus.CounterVec
	auth      *prometheus.CounterVec
	requests  *prometheus.CounterVec
	conns     *prometheus.GaugeVec
	connsMax  *prometheus.GaugeVec
	refused   *prometheus.CounterVec
	rates     *prometheus.CounterVec
}

// otherLabel stands for every label value outside a closed set.
const otherLabel = "other"

// The outcomes of a call (toolgate_calls_total's outcome label).
const (
	OutcomeOK        = "ok"        // ran, exit 0
	OutcomeError     = "error"     // ran and failed (non-zero exit, a built-in's or downstream's error)
	OutcomeTimeout   = "timeout"   // killed at its timeout
	OutcomeCancelled = "cancelled" // cancelled by the client or shutdown
	OutcomeLimit     = "limit"     // ended by a pids or memory limit
	OutcomeRefused   = "refused"   // not run: arguments, no sandbox, a queue, a scope, a rate
	OutcomeFailed    = "failed"    // could not run at all
)

// durationBuckets span a direct call (about 2 ms) to a long test run.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600}

// newMetrics registers the metrics of s, including the sandbox backend's
// state, read at each scrape.
func newMetrics(s *Server) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), known: s.known}
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_calls_total",
		Help: "Tool calls by tool, backend and outcome (ok, error, timeout, cancelled, limit, refused, failed).",
	}, []string{"tool", "backend", "outcome"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "toolgate_call_duration_seconds",
		Help:    "Wall-clock time of a tool call in the server, queueing included.",
		Buckets: durationBuckets,
	}, []string{"tool", "backend"})
	m.queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "toolgate_call_queue_wait_seconds",
		Help:    "Time a call waited for a slot: queue=server (--max-concurrent) or principal (--max-concurrent-per-principal).",
		Buckets: []float64{.0001, .001, .01, .1, .5, 1, 5, 30, 60, 300},
	}, []string{"queue"})
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "toolgate_calls_in_flight",
		Help: "Tool calls being served now (queued ones included).",
	})
	m.limits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_limits_hit_total",
		Help: "Limits that ended or refused a call or request: timeout, pids, memory, output, max_concurrent, principal_concurrent, rate, request_body, scope.",
	}, []string{"limit"})
	m.auth = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_http_auth_failures_total",
		Help: "HTTP requests refused before MCP: missing (no token), invalid (refused token), unavailable (issuer keys not loaded), origin (Origin not allowed), host (Host not allowed: DNS rebinding).",
	}, []string{"reason"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_http_requests_total",
		Help: "HTTP requests to the MCP endpoint by method (GET, POST, ...; other for any other) and status code.",
	}, []string{"method", "code"})
	m.conns = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolgate_http_connections",
		Help: "HTTP connections open now, by listener (mcp: --listen, metrics: --metrics-listen).",
	}, []string{"listener"})
	m.connsMax = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolgate_http_connections_max",
		Help: "The bound of open HTTP connections, by listener and per (listener: --max-connections, client: --max-connections-per-client); 0 is no bound.",
	}, []string{"listener", "per"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_http_connections_refused_total",
		Help: "HTTP connections closed as soon as accepted, by listener and the bound they were over (max_connections, max_connections_per_client).",
	}, []string{"listener", "limit"})
	m.rates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_rate_limit_total",
		Help: "Tool calls a --rate rule covers, by outcome: allowed (a token taken) or limited (refused, not run).",
	}, []string{"outcome"})
	if s.rates != nil {
		m.rates.WithLabelValues(rateAllowed)
		m.rates.WithLabelValues(rateLimitedOutcome)
	}
	sandbox := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "toolgate_sandbox_ready",
		Help:        "1 when the sandbox backend's self-test passed, 0 while it runs or when it failed (see toolgate_sandbox_state).",
		ConstLabels: prometheus.Labels{"backend": s.opts.Sandbox.Name()},
	}, func() float64 {
		if st, _ := s.opts.Sandbox.State(); st == rt.SandboxReady {
			return 1
		}
		return 0
	})
	m.reg.MustRegister(m.calls, m.duration, m.queueWait, m.inFlight, m.limits, m.auth, m.requests,
		m.conns, m.connsMax, m.refused, m.rates, sandbox,
		&sandboxState{s: s, desc: prometheus.NewDesc("toolgate_sandbox_state",
			"The sandbox backend's probe state: 1 for the current one of pending, ready, unavailable.",
			[]string{"backend", "state"}, nil)},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "toolgate_build_info",
			Help:        "toolgate's version.",
			ConstLabels: prometheus.Labels{"version": s.opts.Version},
		}, func() float64 { return 1 }),
	)
	if tp := s.opts.Tracing; tp != nil {
		m.reg.MustRegister(traceSpans(tp))
	}
	return m
}

// traceSpans are the spans of the trace pipeline by outcome: exported
// (the collector took them), dropped_full (the hand-off to the exporter
// was full: a slow or unreachable collector; the call never waited), and
// dropped_failed (the export failed).
func traceSpans(tp *tracing.Provider) prometheus.Collector {
	return &traceCollector{tp: tp, desc: prometheus.NewDesc("toolgate_trace_spans_total",
		"Spans of the trace pipeline (OTEL_TRACES_EXPORTER=otlp) by outcome: exported, dropped_full (the export queue was full: a slow or unreachable collector; no call waits for it), dropped_failed (the export failed).",
		[]string{"outcome"}, nil)}
}

type traceCollector struct {
	tp   *tracing.Provider
	desc *prometheus.Desc
}

func (c *traceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *traceCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.tp.Stats()
	for outcome, v := range map[string]uint64{"exported": st.Exported, "dropped_full": st.DroppedFull, "dropped_failed": st.DroppedFailed} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v), outcome)
	}
}

// sandboxState exports the probe state as one series per state.
type sandboxState struct {
	s    *Server
	desc *prometheus.Desc
}

func (c *sandboxState) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *sandboxState) Collect(ch chan<- prometheus.Metric) {
	st, _ := c.s.opts.Sandbox.State()
	for _, state := range []rt.SandboxState{rt.SandboxPending, rt.SandboxReady, rt.SandboxUnavailable} {
		v := 0.0
		if st == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, c.s.opts.Sandbox.Name(), string(state))
	}
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Registry is the registry (tests).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// observe counts a call in m (nil: no metrics) from its audit record:
// outcome, queue wait at --max-concurrent, and the limit that ended it.
func (m *Metrics) observe(r *audit.Call) {
	if m == nil || r.Tool == "" {
		return
	}
	if ms, ok := r.QueuedMS.Get(); ok {
		m.queueWait.WithLabelValues("server").Observe(float64(ms) / 1000)
	}
	outcome := OutcomeOK
	_, failed := r.Error.Get()
	limit := r.Limit.Value()
	switch {
	case r.Refused != "":
		outcome = OutcomeRefused
		switch r.Refused {
		case "queue":
			m.limits.WithLabelValues("max_concurrent").Inc()
		case "principal_queue":
			m.limits.WithLabelValues("principal_concurrent").Inc()
		case "rate":
			m.limits.WithLabelValues("rate").Inc()
		}
	case r.Cancelled:
		outcome = OutcomeCancelled
	case failed:
		outcome = OutcomeFailed
	case r.TimedOut.Value() || limit == string(rt.LimitTimeout):
		outcome = OutcomeTimeout
		m.limits.WithLabelValues("timeout").Inc()
	case limit == string(rt.LimitPids) || limit == string(rt.LimitMemory):
		outcome = OutcomeLimit
		m.limits.WithLabelValues(limit).Inc()
	case r.IsError:
		outcome = OutcomeError
	}
	if r.Truncated.Value() {
		m.limits.WithLabelValues("output").Inc()
	}
	// A record of a call refused before it began may have no backend.
	m.calls.WithLabelValues(m.tool(r.Tool), r.Backend, outcome).Inc()
}

// tool is the tool label of name: a served tool's name, or "other".
func (m *Metrics) tool(name string) string {
	if m.known != nil && !m.known(name) {
		return otherLabel
	}
	return name
}

func (m *Metrics) observeCall(tool, backend string, d time.Duration) {
	if m == nil {
		return
	}
	m.duration.WithLabelValues(m.tool(tool), backend).Observe(d.Seconds())
}

// request counts an HTTP request to the MCP endpoint: its method when it
// is one of net/http's, "other" when not (a client may send any token as
// a method), and its status code.
func (m *Metrics) request(method string, code int) {
	if m == nil {
		return
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
	default:
		method = otherLabel
	}
	c := otherLabel
	if code >= 100 && code <= 599 {
		c = strconv.Itoa(code)
	}
	m.requests.WithLabelValues(method, c).Inc()
}

// connBounds publishes a listener's connection bounds, and starts its
// series at 0.
func (m *Metrics) connBounds(listener string, max, perClient int) {
	if m == nil {
		return
	}
	m.connsMax.WithLabelValues(listener, "listener").Set(float64(max))
	m.connsMax.WithLabelValues(listener, "client").Set(float64(perClient))
	m.conns.WithLabelValues(listener)
	m.refused.WithLabelValues(listener, limitConns)
	m.refused.WithLabelValues(listener, limitConnsPerClient)
}

func (m *Metrics) connOpened(listener string, delta float64) {
	if m != nil {
		m.conns.WithLabelValues(listener).Add(delta)
	}
}

func (m *Metrics) connRefused(listener, limit string) {
	if m != nil {
		m.refused.WithLabelValues(listener, limit).Inc()
	}
}

func (m *Metrics) authFailure(reason string) {
	if m != nil {
		m.auth.WithLabelValues(reason).Inc()
	}
}

// The outcomes of toolgate_rate_limit_total.
const (
	rateAllowed        = "allowed"
	rateLimitedOutcome = "limited"
)

// rate counts a call a --rate rule covers: allowed or limited.
func (m *Metrics) rate(allowed bool) {
	if m == nil {
		return
	}
	if allowed {
		m.rates.WithLabelValues(rateAllowed).Inc()
	} else {
		m.rates.WithLabelValues(rateLimitedOutcome).Inc()
	}
}

func (m *Metrics) limit(name string) {
	if m != nil {
		m.limits.WithLabelValues(name).Inc()
	}
}
