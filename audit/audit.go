// Package audit is toolgate's audit log: one typed record per kind (a
// tool call's, Call; a connection through an egress proxy, Egress; a pin
// check that changed what is served, Pin; a tool a policy hid from a
// tools/list, Policy; a refused tools.conf line, Conf), each written by this package alone (one writer) as one entry of the audit
// logger (serve's writes JSON lines) under the keys its fields name.
// Never output content, arguments or environment values. Operators'
// tooling, the e2e suites, docs/calls.md and docs/registry.md read these
// keys: server/audit_test.go pins every kind byte for byte.
package audit

import (
	"context"
	"maps"
	"regexp"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/status"
)

// Call is the audit record of one tool call: what ran and how it ended.
// Each field is written under the key its comment names. A string or int
// field is written when it is not zero, a bool one when it is true, a
// Principal when set; an Opt field when it was set, zero or not.
type Call struct {
	RequestID string      // request_id: the JSON-RPC id as JSON; always written
	Tool      string      // tool: always written
	Kind      status.Kind // kind: none for a call cancelled before it began
	Class     conf.Class  // class: an external's
	Backend   string      // backend
	Server    string      // server: a downstream call's
	Transport string      // transport: a downstream call's
	Content   string      // content: "external" for a downstream call's result
	Call      string      // call: the call's id (an external once it has a slot)
	Start     int         // start: which start of the downstream server served it

	Principal          *auth.Principal // principal, auth, client (when not empty) and peer_uid (a unix socket's): an HTTP call's
	Traceparent        string          // traceparent: a valid one of the request's _meta
	TraceparentInvalid bool            // traceparent_invalid: the _meta had one that is not

	Refused   string      // refused: why the call was not run (or not passed on)
	Rate      *Rate       // rate, rate_burst, retry_after_ms: the limit a call refused "rate" was over
	Cancelled bool        // cancelled: by notifications/cancelled or shutdown
	Error     Opt[string] // error: why it could not run, or failed
	RPCError  Opt[string] // rpc_error: a downstream server's JSON-RPC error
	// Policies are the ids of the policies that denied the call (serve
	// --policy), in file order, or ["no permit"] when none permitted it
	// (policies; written when not empty).
	Policies []string

	ExitCode    Opt[int]    // exit_code
	ElapsedMS   Opt[int64]  // elapsed_ms
	QueuedMS    Opt[int64]  // queued_ms: from the call's arrival
	OutputBytes Opt[int64]  // output_bytes
	Truncated   Opt[bool]   // truncated
	TimedOut    Opt[bool]   // timed_out
	Limit       Opt[string] // limit: the rt.Limit that ended it ("" written for an external that ran to its end)
	// A call of a tool with an egress allowlist: its connections through
	// the proxy, allowed or refused (egress_connections), the bytes both
	// ways (egress_bytes), and the egress cap it hit (egress_limit).
	EgressConns Opt[int64]
	EgressBytes Opt[int64]
	EgressLimit string
	IsError     bool // is_error: always written

	// Span is the call's span (Annotate takes it from the handler's
	// context; the API's no-op one when tracing is off): the server sets
	// the call's outcome on it, and the OTel log of the record carries its
	// trace and span ids. Never written to the audit log.
	Span trace.Span
}

// Rate is the rate limit (serve --rate) a call was refused for: the
// principal's tokens a second (rate), its burst (rate_burst), and how long
// until one token is back (retry_after_ms).
type Rate struct {
	PerSecond  float64
	Burst      int
	RetryAfter time.Duration
}

// Opt is a value a record carries only once it is set, whatever it is:
// an external's exit_code 0 is written, a refused call has none.
type Opt[T any] struct {
	v  T
	ok bool
}

// Some is v, set.
func Some[T any](v T) Opt[T] { return Opt[T]{v, true} }

// Get returns the value and whether it was set.
func (o Opt[T]) Get() (T, bool) { return o.v, o.ok }

// Value returns the value, zero when it was not set.
func (o Opt[T]) Value() T { return o.v }

func (o Opt[T]) put(f logrus.Fields, key string) {
	if o.ok {
		f[key] = o.v
	}
}

// Annotate adds who made the call (over HTTP: the principal's name, how
// it authenticated, its OAuth client) and the traceparent the client sent
// in the request's _meta, when it is a valid one (one that is not is
// noted, never copied).
func (r *Call) Annotate(ctx context.Context, req mcp.CallToolRequest) {
	r.Span = trace.SpanFromContext(ctx)
	if p, ok := auth.PrincipalFrom(ctx); ok {
		r.Principal = &p
	}
	if req.Params.Meta == nil {
		return
	}
	v, ok := req.Params.Meta.AdditionalFields["traceparent"]
	if !ok {
		return
	}
	if tp, _ := v.(string); ValidTraceparent(tp) {
		r.Traceparent = tp
	} else {
		r.TraceparentInvalid = true
	}
}

// traceparentRe is a W3C Trace Context traceparent: version, trace id,
// parent id, flags, in lowercase hex; the all-zero ids are invalid.
var traceparentRe = regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// ValidTraceparent reports whether tp is a valid W3C traceparent.
func ValidTraceparent(tp string) bool {
	return traceparentRe.MatchString(tp) && tp[:2] != "ff" &&
		tp[3:35] != "00000000000000000000000000000000" && tp[36:52] != "0000000000000000"
}

// fields are the record's keys and values as the audit log writes them.
func (r *Call) fields() logrus.Fields {
	f := logrus.Fields{"request_id": r.RequestID, "tool": r.Tool, "is_error": r.IsError}
	str := func(key, v string) {
		if v != "" {
			f[key] = v
		}
	}
	str("kind", string(r.Kind))
	if r.Class != "" {
		f["class"] = r.Class
	}
	str("backend", r.Backend)
	str("server", r.Server)
	str("transport", r.Transport)
	str("content", r.Content)
	str("call", r.Call)
	if r.Start != 0 {
		f["start"] = r.Start
	}
	if p := r.Principal; p != nil {
		f["principal"] = p.Name
		f["auth"] = p.Method
		str("client", p.Client)
		if uid, ok := p.PeerUID(); ok {
			f["peer_uid"] = uid
		}
	}
	str("traceparent", r.Traceparent)
	if r.TraceparentInvalid {
		f["traceparent_invalid"] = true
	}
	str("refused", r.Refused)
	if len(r.Policies) > 0 {
		f["policies"] = r.Policies
	}
	if rt := r.Rate; rt != nil {
		f["rate"], f["rate_burst"], f["retry_after_ms"] = rt.PerSecond, rt.Burst, rt.RetryAfter.Milliseconds()
	}
	if r.Cancelled {
		f["cancelled"] = true
	}
	r.Error.put(f, "error")
	r.RPCError.put(f, "rpc_error")
	r.ExitCode.put(f, "exit_code")
	r.ElapsedMS.put(f, "elapsed_ms")
	r.QueuedMS.put(f, "queued_ms")
	r.OutputBytes.put(f, "output_bytes")
	r.Truncated.put(f, "truncated")
	r.TimedOut.put(f, "timed_out")
	r.Limit.put(f, "limit")
	r.EgressConns.put(f, "egress_connections")
	r.EgressBytes.put(f, "egress_bytes")
	str("egress_limit", r.EgressLimit)
	return f
}

// Write writes the record to l with msg ("call", or "call could not
// run").
func (r *Call) Write(l *logrus.Logger, msg string) {
	if r.Span == nil || !r.Span.SpanContext().IsValid() {
		write(l, r.fields(), msg)
		return
	}
	// The entry's context carries the call's span context, for a hook
	// that exports the record as an OTel log (package tracing).
	ctx := trace.ContextWithSpanContext(context.Background(), r.Span.SpanContext())
	l.WithContext(ctx).WithFields(r.fields()).Info(msg)
}

// Egress is the audit record of one connection through an egress proxy,
// or of a summary of those not recorded one by one (kind "egress", msg
// "egress"): the call it belongs to (a tool call, or a downstream
// server's life), then the proxy's own record. Never content.
type Egress struct {
	RequestID string // request_id: the call's JSON-RPC id; "" not written (a server's life has none)
	Tool      string // tool: the call's tool, or the downstream server; always written
	Call      string // call: the call's id (a server's start); "" not written
	Server    string // server: a downstream server's id; "" not written
	Principal string // principal: the HTTP caller's name; "" not written
	// Conn is what the proxy recorded, under the keys of
	// egress.Record.Fields: the destination asked for, escaped and cut,
	// the address dialled, the decision and its reason, the bytes up and
	// down and the connection's duration; or a summary's counts. The proxy
	// bounds what these records take (egress.DefaultAuditBytes a call):
	// egress.Record.Size charges each its fields, and egress.RecordBase
	// the call's fields above.
	Conn egress.Record
}

// Write writes the record to l.
func (r Egress) Write(l *logrus.Logger) {
	conn := r.Conn.Fields()
	f := make(logrus.Fields, len(conn)+5)
	f["kind"], f["tool"] = "egress", r.Tool
	for k, v := range map[string]string{"request_id": r.RequestID, "call": r.Call, "server": r.Server, "principal": r.Principal} {
		if v != "" {
			f[k] = v
		}
	}
	maps.Copy(f, conn)
	write(l, f, "egress")
}

// EgressRecorder returns what receives the egress proxy's record of each
// connection of call: each is written as one Egress record naming call's
// tool (or server), request id, call id and principal.
func EgressRecorder(l *logrus.Logger, call *Call) func(egress.Record) {
	base := Egress{RequestID: call.RequestID, Tool: call.Tool, Call: call.Call, Server: call.Server}
	if p := call.Principal; p != nil {
		base.Principal = p.Name
	}
	return func(e egress.Record) {
		r := base
		r.Conn = e
		r.Write(l)
	}
}

// Pin is the audit record of a pin check that changed what toolgate
// serves of one downstream tool (kind "pin", msg "pin"): written when a
// listing withholds a tool (its definition drifted from its pin, it has
// no pin where one is required, it holds text a reviewer cannot see),
// serves one without a pin, or serves again one it had withheld. Never
// arguments or results; the definitions are the server's own.
type Pin struct {
	Tool      string // tool: the served name; always written
	Server    string // server: always written
	Transport string // transport: always written
	Start     int    // start: which start of the server listed it (1: at start-up); 0 not written
	Decision  string // decision: "served" or "withheld"; always written
	Pin       string // pin: how the definition compared with its pin: match, drift, none; "" not written
	Reason    string // reason: why; always written
	SHA256    string // sha256: the listed definition's digest
	Pinned    string // pinned_sha256: the pin's
	Diff      string // diff: a drift's unified diff (at most registry.MaxPinDiff bytes)
}

// Write writes the record to l.
func (r Pin) Write(l *logrus.Logger) {
	f := logrus.Fields{"kind": "pin", "tool": r.Tool, "server": r.Server, "transport": r.Transport, "decision": r.Decision, "reason": r.Reason}
	if r.Start != 0 {
		f["start"] = r.Start
	}
	for k, v := range map[string]string{"pin": r.Pin, "sha256": r.SHA256, "pinned_sha256": r.Pinned, "diff": r.Diff} {
		if v != "" {
			f[k] = v
		}
	}
	write(l, f, "pin")
}

// Policy is the audit record of a tool a policy hid from a principal's
// tools/list (kind "policy", msg "policy denied"); a denied call is its
// Call record (refused "policy"). Never arguments.
type Policy struct {
	Action    string          // action: "list"; always written
	Tool      string          // tool: always written
	Principal *auth.Principal // principal, auth, client (when not empty), peer_uid (a unix socket's); nil: principal "stdio"
	Policies  []string        // policies: the deciding policies' ids, or ["no permit"]; always written
	Reason    string          // reason: why, for a decision no policy made; "" not written
}

// Write writes the record to l.
func (r Policy) Write(l *logrus.Logger) {
	f := logrus.Fields{"kind": "policy", "action": r.Action, "tool": r.Tool, "policies": r.Policies}
	if p := r.Principal; p != nil {
		f["principal"], f["auth"] = p.Name, p.Method
		if p.Client != "" {
			f["client"] = p.Client
		}
		if uid, ok := p.PeerUID(); ok {
			f["peer_uid"] = uid
		}
	} else {
		f["principal"] = "stdio"
	}
	if r.Reason != "" {
		f["reason"] = r.Reason
	}
	write(l, f, "policy denied")
}

// Conf is the audit record of one refused line of a tools.conf (kind
// "conf", msg "conf refused"): where and why, never more of the file.
// Every field is always written.
type Conf struct {
	Conf   string     // conf: the file's path
	State  conf.State // state: the conf's (refused)
	Line   int        // line: the refused line's number
	Field  string     // field: the field of the line refused
	Reason string     // reason: why
}

// Write writes the record to l.
func (r Conf) Write(l *logrus.Logger) {
	write(l, logrus.Fields{"kind": "conf", "conf": r.Conf, "state": r.State, "line": r.Line, "field": r.Field, "reason": r.Reason}, "conf refused")
}

// Reload is the audit record of one reload of the configuration (kind
// "reload", msg "reload"): its generation, its trigger, the files changed
// and refused, the tools added, removed and replaced. Every field is
// always written.
type Reload struct {
	Generation int              // generation
	Trigger    string           // trigger: "sighup" or "watch"
	Changed    []string         // changed: the files re-read with new contents
	Refused    []status.Refusal // refused: "file: reason (effect)" each
	Added      []string         // added
	Removed    []string         // removed
	Replaced   []string         // replaced
}

// Write writes the record to l.
func (r Reload) Write(l *logrus.Logger) {
	refused := make([]string, 0, len(r.Refused))
	for _, f := range r.Refused {
		refused = append(refused, f.File+": "+f.Reason+" ("+f.Effect+")")
	}
	write(l, logrus.Fields{
		"kind": "reload", "generation": r.Generation, "trigger": r.Trigger, "changed": nonNil(r.Changed),
		"refused": refused, "added": nonNil(r.Added), "removed": nonNil(r.Removed), "replaced": nonNil(r.Replaced),
	}, "reload")
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// write is the one writer of every record: one entry of l at level info.
func write(l *logrus.Logger, f logrus.Fields, msg string) {
	l.WithFields(f).Info(msg)
}
