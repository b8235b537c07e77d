package egress

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Decision is what the proxy made of one connection, or Summary for the
// record that counts the connections not recorded one by one.
type Decision string

// The decisions.
const (
	Allowed Decision = "allowed"
	Refused Decision = "refused"
	Summary Decision = "summary"
)

// The bounds of the audit of one call's network. A sandboxed tool chooses
// what it asks the proxy for, so nothing it chooses reaches a record
// whole: its host is escaped and cut at MaxHost, a reason at MaxReason,
// its port is a number, and no path, method, header or user agent is
// recorded at all. What its records may take of the audit log is a
// budget (Config.AuditBytes) that each record is charged from, its
// fields' bytes as the audit writes them (Record.Size) and RecordBase for
// the fields the audit adds; past it, and for every connection refused
// past a per-call cap, one Summary record counts what was not written.
const (
	// MaxHost is the most bytes of a requested host a record carries: a
	// DNS name's own limit (RFC 1035), so that every name the proxy could
	// ever reach is recorded whole.
	MaxHost = 253
	// MaxReason is the most bytes of a record's reason: the proxy's own
	// words, an address list or a dialler's error, cut.
	MaxReason = 256
	// RecordBase is what each record is charged for the fields the audit
	// log adds to it (kind, tool, call, request id, server, principal,
	// level, message and time: about 150 bytes with short names, none of
	// them the tool's choice).
	RecordBase = 256
	// DefaultAuditBytes is the audit budget of one call: 256 KiB, what
	// the default per-call cap of 256 connections takes when every record
	// is as large as it can be (at most 1 KiB charged each, summary
	// included), so that a call within the default caps is always
	// recorded connection by connection, and no call can write more.
	DefaultAuditBytes = 256 << 10
)

// Record is one connection the proxy allowed or refused, or a Summary of
// those not recorded one by one: the audit of a sandbox's network, never
// any content. The strings of a record the proxy makes hold only
// printable ASCII that JSON writes as it is: no quote, backslash, '<',
// '>', '&' or '%' but as an escape.
type Record struct {
	// Host and Port are what the tool asked for: the host escaped (every
	// byte but a letter, digit, '-', '.', '_' or ':' as %HH, '%' itself
	// included) and cut at MaxHost bytes; HostBytes is then the length
	// of the host as asked, 0 when Host holds all of it. Addr is the
	// address dialled (empty when refused before dialling).
	Host      string
	HostBytes int
	Port      uint16
	Addr      string
	// Decision, and Reason when refused or cut (or what a summary
	// counts), of at most MaxReason bytes; never the host again.
	Decision Decision
	Reason   string
	// Up and Down are the bytes sent and received; Elapsed the
	// connection's life.
	Up, Down int64
	Elapsed  time.Duration
	// A Summary's counts: the connections not recorded one by one
	// (Suppressed), of which PastCap were refused past a per-call cap
	// (the rest did not fit the audit budget), and the bytes their
	// records would have been charged (SuppressedBytes).
	Suppressed, PastCap, SuppressedBytes int64
	// Credential is CredentialInjected when the proxy set a credential on
	// the connection's request: never which, never its value.
	Credential string
}

// CredentialInjected is Record.Credential of a connection that carried an
// injected credential.
const CredentialInjected = "injected"

// Fields are the record's keys and values as an audit log writes them:
// decision and reason; a Summary's suppressed, past_cap and
// suppressed_bytes; a connection's host, host_bytes (when cut), port,
// addr (when dialled), bytes_up, bytes_down and elapsed_ms.
func (r Record) Fields() map[string]any {
	f := make(map[string]any, 9)
	f["decision"] = string(r.Decision)
	if r.Reason != "" {
		f["reason"] = r.Reason
	}
	if r.Decision == Summary {
		f["suppressed"], f["past_cap"], f["suppressed_bytes"] = r.Suppressed, r.PastCap, r.SuppressedBytes
		return f
	}
	f["host"], f["port"] = r.Host, r.Port
	if r.HostBytes > 0 {
		f["host_bytes"] = r.HostBytes
	}
	if r.Addr != "" {
		f["addr"] = r.Addr
	}
	if r.Credential != "" {
		f["credential"] = r.Credential
	}
	f["bytes_up"], f["bytes_down"], f["elapsed_ms"] = r.Up, r.Down, r.Elapsed.Milliseconds()
	return f
}

// Size is the bytes Fields take in a JSON object, each as `"key":value,`:
// exact for a record the proxy made, whose strings JSON writes unescaped.
func (r Record) Size() int {
	n := 0
	for k, v := range r.Fields() {
		n += len(k) + 4 // the quotes, the colon, the comma
		switch v := v.(type) {
		case string:
			n += len(v) + 2
		case int64:
			n += len(strconv.FormatInt(v, 10))
		case int:
			n += len(strconv.Itoa(v))
		case uint16:
			n += len(strconv.Itoa(int(v)))
		}
	}
	return n
}

// escape writes s with every byte not in keep as %HH, cut at max bytes
// (never inside an escape); it returns len(s) too when it cut.
func escape(s string, max int, keep func(c byte) bool) (string, int) {
	clean := true
	for i := 0; i < len(s) && clean; i++ {
		clean = keep(s[i])
	}
	if clean && len(s) <= max {
		return s, 0
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(min(len(s), max))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if keep(c) {
			if b.Len()+1 > max {
				return b.String(), len(s)
			}
			b.WriteByte(c)
			continue
		}
		if b.Len()+3 > max {
			return b.String(), len(s)
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String(), 0
}

// hostByte is what a host keeps as it is: a DNS name's letters, digits,
// '-' and '.', an IPv6 literal's ':', and '_'.
func hostByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == ':'
}

// textByte is what a reason keeps as it is: printable ASCII but for what
// JSON (with its HTML escaping) or the escape itself would rewrite.
func textByte(c byte) bool {
	return c >= 0x20 && c < 0x7f && !strings.ContainsRune(`"\<>&%`, rune(c))
}

// auditHost is host as a record carries it (Record.Host, HostBytes).
func auditHost(host string) (string, int) { return escape(host, MaxHost, hostByte) }

// auditText is a reason as a record carries it.
func auditText(s string) string {
	s, _ = escape(s, MaxReason, textByte)
	return s
}

// summaryCost is the most a summary record is charged: the budget keeps
// it free for the summary that may come.
var summaryCost = Record{
	Decision: Summary, Reason: strings.Repeat("x", MaxReason),
	Suppressed: math.MaxInt64, PastCap: math.MaxInt64, SuppressedBytes: math.MaxInt64,
}.Size() + RecordBase

// auditor passes the proxy's records on within the audit budget: the
// records of connections refused past a per-call cap, and those that do
// not fit the budget, are counted, and written as one Summary record when
// the proxy closes (or, with a window, when the window they fell in is
// over and the next record comes).
type auditor struct {
	emit   func(Record)
	budget int64
	window time.Duration
	now    func() time.Time

	mu    sync.Mutex
	start time.Time // of the window
	spent int64
	sum   Record // the counts not written yet
	caps  []string
}

func newAuditor(emit func(Record), budget int64, window time.Duration, now func() time.Time) *auditor {
	if budget <= 0 {
		budget = DefaultAuditBytes
	}
	return &auditor{emit: emit, budget: budget, window: window, now: now, start: now()}
}

// record writes r, or counts it: always when pastCap names the cap that
// refused it, and when the budget has no room for it.
func (a *auditor) record(r Record, pastCap string) {
	if a.emit == nil {
		return
	}
	r.Reason, r.Addr = auditText(r.Reason), auditText(r.Addr)
	cost := int64(r.Size() + RecordBase)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.window > 0 {
		if now := a.now(); now.Sub(a.start) >= a.window {
			a.flush()
			a.start, a.spent = now, 0
		}
	}
	switch {
	case pastCap != "":
		a.sum.Suppressed++
		a.sum.PastCap++
		a.sum.SuppressedBytes += cost
		if !slices.Contains(a.caps, pastCap) {
			a.caps = append(a.caps, pastCap)
		}
	case a.spent+cost <= a.budget-int64(summaryCost):
		a.spent += cost
		a.emit(r)
	default:
		a.sum.Suppressed++
		a.sum.SuppressedBytes += cost
	}
}

// flush writes the summary of what was counted, if anything was; a.mu is
// held.
func (a *auditor) flush() {
	s := a.sum
	if s.Suppressed == 0 {
		return
	}
	var parts []string
	if s.PastCap > 0 {
		parts = append(parts, fmt.Sprintf("%d further connections refused past the cap (%s)", s.PastCap, strings.Join(a.caps, ", ")))
	}
	if over := s.Suppressed - s.PastCap; over > 0 {
		budget := fmt.Sprintf("the call's audit budget of %d bytes", a.budget)
		if a.window > 0 {
			budget = fmt.Sprintf("the audit budget of %d bytes per %s", a.budget, a.window)
		}
		parts = append(parts, fmt.Sprintf("%d records past %s", over, budget))
	}
	s.Decision = Summary
	s.Reason = auditText(strings.Join(parts, "; ") + fmt.Sprintf(": not recorded one by one (%d bytes of records)", s.SuppressedBytes))
	a.sum, a.caps = Record{}, nil
	a.emit(s)
}

// close writes the last summary.
func (a *auditor) close() {
	if a.emit == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.flush()
}
