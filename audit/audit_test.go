package audit

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/egress"
)

// jsonAudit is an audit logger writing JSON lines, as serve's does.
func jsonAudit() (*logrus.Logger, *bytes.Buffer) {
	buf := &bytes.Buffer{}
	l := logrus.New()
	l.SetFormatter(&logrus.JSONFormatter{})
	l.SetOutput(buf)
	return l, buf
}

var timeMask = regexp.MustCompile(`"time":"[^"]*"`)

// checkAudit compares the lines written to buf, their time masked, with
// want, byte for byte.
func checkAudit(t *testing.T, buf *bytes.Buffer, want ...string) {
	t.Helper()
	got := strings.Split(strings.TrimSpace(timeMask.ReplaceAllString(buf.String(), `"time":"*"`)), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d audit records, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("audit record %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

// TestEgressRecordKeys pins the egress audit record byte for byte: a
// connection's, one whose host was cut (host_bytes), and a summary's.
func TestEgressRecordKeys(t *testing.T) {
	alog, buf := jsonAudit()
	rec := EgressRecorder(alog, &Call{RequestID: "7", Tool: "net", Call: "c3", Principal: &auth.Principal{Name: "alice", Method: "token"}})
	rec(egress.Record{Host: "api.example.com", Port: 443, Addr: "192.0.2.7:443", Decision: egress.Allowed, Up: 10, Down: 20, Elapsed: 1500 * time.Millisecond})
	rec(egress.Record{Host: "evil%22.example.com", HostBytes: 70000, Port: 443, Decision: egress.Refused, Reason: "not in the allowlist"})
	rec(egress.Record{
		Decision: egress.Summary, Reason: "2 further connections refused past the cap (egress-connections): not recorded one by one (1200 bytes of records)",
		Suppressed: 2, PastCap: 2, SuppressedBytes: 1200,
	})
	checkAudit(t, buf,
		`{"addr":"192.0.2.7:443","bytes_down":20,"bytes_up":10,"call":"c3","decision":"allowed","elapsed_ms":1500,"host":"api.example.com","kind":"egress","level":"info","msg":"egress","port":443,"principal":"alice","request_id":"7","time":"*","tool":"net"}`,
		`{"bytes_down":0,"bytes_up":0,"call":"c3","decision":"refused","elapsed_ms":0,"host":"evil%22.example.com","host_bytes":70000,"kind":"egress","level":"info","msg":"egress","port":443,"principal":"alice","reason":"not in the allowlist","request_id":"7","time":"*","tool":"net"}`,
		`{"call":"c3","decision":"summary","kind":"egress","level":"info","msg":"egress","past_cap":2,"principal":"alice","reason":"2 further connections refused past the cap (egress-connections): not recorded one by one (1200 bytes of records)","request_id":"7","suppressed":2,"suppressed_bytes":1200,"time":"*","tool":"net"}`)
}

// TestConfRecordKeys pins the record of a refused tools.conf line: every
// field written, an empty one too.
func TestConfRecordKeys(t *testing.T) {
	alog, buf := jsonAudit()
	Conf{Conf: "/etc/tools.conf", State: "refused", Line: 3, Field: "exe", Reason: "not absolute"}.Write(alog)
	Conf{Conf: "/etc/tools.conf", State: "refused", Line: 0, Reason: "cannot read"}.Write(alog)
	checkAudit(t, buf,
		`{"conf":"/etc/tools.conf","field":"exe","kind":"conf","level":"info","line":3,"msg":"conf refused","reason":"not absolute","state":"refused","time":"*"}`,
		`{"conf":"/etc/tools.conf","field":"","kind":"conf","level":"info","line":0,"msg":"conf refused","reason":"cannot read","state":"refused","time":"*"}`)
}

// TestPinRecordKeys pins the record of a pin check: the empty optional
// fields are not written.
func TestPinRecordKeys(t *testing.T) {
	alog, buf := jsonAudit()
	Pin{
		Tool: "probe__echo", Server: "probe", Transport: "stdio", Start: 2, Decision: "withheld", Pin: "drift",
		Reason: "drifted", SHA256: "ab", Pinned: "cd", Diff: "-a\n+b\n",
	}.Write(alog)
	Pin{Tool: "probe__echo", Server: "probe", Transport: "stdio", Decision: "served", Reason: "no pin"}.Write(alog)
	checkAudit(t, buf,
		`{"decision":"withheld","diff":"-a\n+b\n","kind":"pin","level":"info","msg":"pin","pin":"drift","pinned_sha256":"cd","reason":"drifted","server":"probe","sha256":"ab","start":2,"time":"*","tool":"probe__echo","transport":"stdio"}`,
		`{"decision":"served","kind":"pin","level":"info","msg":"pin","reason":"no pin","server":"probe","time":"*","tool":"probe__echo","transport":"stdio"}`)
}

// TestPolicyRecordKeys pins the record of a tool a policy hid from a
// tools/list, over HTTP and over stdio, and the policies key of a call a
// policy refused.
func TestPolicyRecordKeys(t *testing.T) {
	alog, buf := jsonAudit()
	bob := auth.Principal{Name: "bob", Method: auth.MethodOAuth, Client: "agent-1"}
	Policy{Action: "list", Tool: "sbx", Principal: &bob, Policies: []string{"no-sbx", "f2"}}.Write(alog)
	Policy{Action: "list", Tool: "hello", Policies: []string{"no permit"}, Reason: "the tool is not served"}.Write(alog)
	local := auth.Local(1000)
	Policy{Action: "list", Tool: "hello", Principal: &local, Policies: []string{"no permit"}}.Write(alog)
	(&Call{RequestID: "3", Tool: "sbx", Kind: "external", Refused: "policy", Policies: []string{"no permit"}, IsError: true}).Write(alog, "call")
	(&Call{RequestID: "4", Tool: "sbx", Kind: "external", IsError: false}).Write(alog, "call")
	checkAudit(t, buf,
		`{"action":"list","auth":"oauth","client":"agent-1","kind":"policy","level":"info","msg":"policy denied","policies":["no-sbx","f2"],"principal":"bob","time":"*","tool":"sbx"}`,
		`{"action":"list","kind":"policy","level":"info","msg":"policy denied","policies":["no permit"],"principal":"stdio","reason":"the tool is not served","time":"*","tool":"hello"}`,
		`{"action":"list","auth":"local","kind":"policy","level":"info","msg":"policy denied","peer_uid":1000,"policies":["no permit"],"principal":"local","time":"*","tool":"hello"}`,
		`{"is_error":true,"kind":"external","level":"info","msg":"call","policies":["no permit"],"refused":"policy","request_id":"3","time":"*","tool":"sbx"}`,
		`{"is_error":false,"kind":"external","level":"info","msg":"call","request_id":"4","time":"*","tool":"sbx"}`)
}

// TestCallRateKeys pins what a call refused for its rate adds (rate,
// rate_burst, retry_after_ms), and that a call without one adds none.
func TestCallRateKeys(t *testing.T) {
	alog, buf := jsonAudit()
	p := &auth.Principal{Name: "alice", Method: "token"}
	(&Call{
		RequestID: "4", Tool: "hello", Kind: "external", Backend: "direct", Principal: p, Refused: "rate",
		Rate: &Rate{PerSecond: 0.5, Burst: 2, RetryAfter: 1999 * time.Millisecond}, IsError: true,
	}).Write(alog, "call")
	(&Call{RequestID: "5", Tool: "hello", Principal: p, Refused: "scope", IsError: true}).Write(alog, "call")
	checkAudit(t, buf,
		`{"auth":"token","backend":"direct","is_error":true,"kind":"external","level":"info","msg":"call","principal":"alice","rate":0.5,"rate_burst":2,"refused":"rate","request_id":"4","retry_after_ms":1999,"time":"*","tool":"hello"}`,
		`{"auth":"token","is_error":true,"level":"info","msg":"call","principal":"alice","refused":"scope","request_id":"5","time":"*","tool":"hello"}`)
}
