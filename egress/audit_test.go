package egress

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/egress/allowlist"
)

// TestAuditHost: a requested host is recorded escaped (every byte but a
// letter, digit, '-', '.', '_' or ':' as %HH) and cut at MaxHost bytes,
// never inside an escape; HostBytes says how long it was when cut.
func TestAuditHost(t *testing.T) {
	long := strings.Repeat("a", 300)
	for _, tc := range []struct {
		name, in, want string
		wantBytes      int
	}{
		{"a DNS name", "api.example.com", "api.example.com", 0},
		{"case kept", "API.Example.com", "API.Example.com", 0},
		{"an IPv6 literal", "2001:db8::1", "2001:db8::1", 0},
		{"an underscore", "_srv.example.com", "_srv.example.com", 0},
		{"a zone's percent", "fe80::1%eth0", "fe80::1%25eth0", 0},
		{"a quote and a '<'", `a"b<c`, "a%22b%3Cc", 0},
		{"a newline and a carriage return", "a\nb\r\nc", "a%0Ab%0D%0Ac", 0},
		{"control characters", "a\x00b\x1bc\x7f", "a%00b%1Bc%7F", 0},
		{"bytes that are not UTF-8", "a\xff\xfeb", "a%FF%FEb", 0},
		{"UTF-8", "é.example", "%C3%A9.example", 0},
		{"a space and a backslash", `a b\c`, "a%20b%5Cc", 0},
		{"253 bytes whole", long[:253], long[:253], 0},
		{"254 bytes cut", long[:254], long[:253], 254},
		{"300 bytes cut", long, long[:253], 300},
		{"an escape is not split", long[:251] + "\n", long[:251], 252},
		{"an escape that fits", long[:250] + "\n", long[:250] + "%0A", 0},
		{"64 KiB of newlines", strings.Repeat("\n", 64<<10), strings.Repeat("%0A", 84), 64 << 10},
	} {
		got, n := auditHost(tc.in)
		if got != tc.want || n != tc.wantBytes {
			t.Errorf("%s: auditHost(%.40q) = %.60q, %d; want %.60q, %d", tc.name, tc.in, got, n, tc.want, tc.wantBytes)
		}
		if len(got) > MaxHost {
			t.Errorf("%s: %d bytes, more than %d", tc.name, len(got), MaxHost)
		}
	}
	// A reason keeps spaces and punctuation, escapes what JSON rewrites,
	// and is cut at MaxReason.
	if got := auditText(`resolve: "x" <&> 100% ` + "\n"); got != "resolve: %22x%22 %3C%26%3E 100%25 %0A" {
		t.Errorf("auditText = %q", got)
	}
	if got := auditText(strings.Repeat("r", 1000)); len(got) != MaxReason {
		t.Errorf("a 1000-byte reason is kept as %d bytes, want %d", len(got), MaxReason)
	}
}

// TestRecordSize: Size is exactly the bytes of Fields in a JSON object,
// `{` and `}` aside, less the last comma; and a record as large as the
// proxy can make one, charged RecordBase more, lets the default cap's 256
// records and the summary fit DefaultAuditBytes.
func TestRecordSize(t *testing.T) {
	maxHost, _ := auditHost(strings.Repeat("\xff", 1<<20))
	biggest := Record{
		Host: maxHost, HostBytes: math.MaxInt, Port: 65535,
		Addr: "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535", Decision: Refused, Reason: strings.Repeat("r", MaxReason),
		Up: math.MaxInt64, Down: math.MaxInt64, Elapsed: math.MaxInt64,
	}
	for _, r := range []Record{
		{Host: "api.example.com", Port: 443, Addr: "192.0.2.7:443", Decision: Allowed, Up: 10, Down: 20, Elapsed: 1500 * time.Millisecond},
		{Host: "a%22b", HostBytes: 70000, Port: 1, Decision: Refused, Reason: "not in the allowlist"},
		{Decision: Summary, Reason: "3 further connections refused past the cap (egress-connections)", Suppressed: 3, PastCap: 3, SuppressedBytes: 1800},
		biggest,
	} {
		b, err := json.Marshal(r.Fields())
		if err != nil {
			t.Fatal(err)
		}
		if r.Size() != len(b)-1 {
			t.Errorf("Size() = %d, JSON %s is %d bytes: want %d", r.Size(), b, len(b), len(b)-1)
		}
	}
	perRecord := biggest.Size() + RecordBase
	t.Logf("the largest record is charged %d bytes, a summary %d", perRecord, summaryCost)
	if perRecord > 1<<10 || 256*perRecord+summaryCost > DefaultAuditBytes {
		t.Errorf("the largest record is charged %d bytes, a summary %d: 256 records and a summary (%d) do not fit %d",
			perRecord, summaryCost, 256*perRecord+summaryCost, DefaultAuditBytes)
	}
}

// floodConnect sends n CONNECTs naming host through the proxy at addr,
// from 8 connections at a time, and counts the answers by status.
func floodConnect(t *testing.T, addr, host string, n int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	got := map[int]int{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Error(err)
					return
				}
				fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n", host)
				status := 0
				if resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect}); err == nil {
					resp.Body.Close()
					status = resp.StatusCode
				}
				c.Close()
				mu.Lock()
				got[status]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return got
}

// TestProxyAuditFlood: thousands of CONNECTs naming a 64 KiB host are
// each refused (403), yet what they are recorded as is charged at most
// DefaultAuditBytes: under a connection cap, every connection within it
// is one record and those past it are counted in one summary at Close;
// with no cap, records go on until the budget and the rest are counted.
// Every record's host is escaped and cut, and is not repeated in the
// reason; the 403 the tool reads names it cut too.
func TestProxyAuditFlood(t *testing.T) {
	const n = 2048
	// The request line's host: a quote as it is, "%ff" for a byte that is
	// not UTF-8; 64 KiB long.
	wire := `evil"%ff` + strings.Repeat("a", 64<<10) + ".example.com:443"
	for _, tc := range []struct {
		name  string
		lim   Limits
		each  int // records one by one; -1: as many as the budget holds
		cap   int64
		tells string
	}{
		{"a connection cap", Limits{Conns: 100}, 100, n - 100, fmt.Sprintf("%d further connections refused past the cap (egress-connections): not recorded one by one (", n-100)},
		{"no cap", Limits{}, -1, 0, " records past the call's audit budget of 262144 bytes: not recorded one by one ("},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(f *fixture) []string { return []string{"api.test.example:443"} }, tc.lim)
			got := floodConnect(t, f.url.Host, wire, n)
			if got[http.StatusForbidden] != n {
				t.Errorf("answers %v, want %d 403s", got, n)
			}
			f.proxy.Close()
			f.mu.Lock()
			defer f.mu.Unlock()
			charged, each := 0, 0
			wantHost := "evil%22%FF" + strings.Repeat("a", MaxHost-len("evil%22%FF"))
			const hostBytes = len(`evil"`) + 1 + 64<<10 + len(".example.com")
			for i, r := range f.records {
				charged += r.Size() + RecordBase
				if r.Decision == Summary {
					if i != len(f.records)-1 {
						t.Errorf("summary %d of %d records, want it last", i, len(f.records))
					}
					continue
				}
				each++
				if r.Host != wantHost || r.HostBytes != hostBytes || r.Port != 443 || r.Reason != "not in the allowlist" {
					t.Fatalf("record %d: %.300v; want host %q (%d bytes), port 443, reason \"not in the allowlist\"", i, r, wantHost, hostBytes)
				}
			}
			t.Logf("%d records (%d one by one), %d bytes charged", len(f.records), each, charged)
			if charged > DefaultAuditBytes {
				t.Errorf("the records are charged %d bytes, more than the budget %d", charged, DefaultAuditBytes)
			}
			if tc.each >= 0 && each != tc.each {
				t.Errorf("%d records one by one, want %d", each, tc.each)
			}
			s := f.records[len(f.records)-1]
			if s.Decision != Summary || s.Suppressed != int64(n-each) || s.PastCap != tc.cap || s.SuppressedBytes <= 0 || !strings.Contains(s.Reason, tc.tells) {
				t.Errorf("summary %+v: want suppressed %d, past_cap %d, a reason with %q", s, n-each, tc.cap, tc.tells)
			}
		})
	}
	// The tool's own 403 names the host as the record does.
	f := newFixture(t, func(f *fixture) []string { return []string{"api.test.example:443"} }, Limits{})
	if status, body := f.get(t, "http://"+strings.Repeat("b", 1000)+".example.com/"); status != 403 ||
		body != "toolgate egress: "+strings.Repeat("b", MaxHost)+":80: not in the allowlist\n" {
		t.Errorf("a refusal of a 1000-byte host answers %d %.400q", status, body)
	}
}

// TestAuditWindow: with a window (a downstream server's proxy), the
// budget is renewed each window; what a window could not hold is one
// summary, written before the first record of the next window, and the
// last window's at close.
func TestAuditWindow(t *testing.T) {
	var got []Record
	now := time.Unix(1000, 0)
	rec := Record{Host: "api.example.com", Port: 443, Decision: Refused, Reason: "not in the allowlist"}
	cost := rec.Size() + RecordBase
	a := newAuditor(func(r Record) { got = append(got, r) }, int64(summaryCost+3*cost), time.Minute, func() time.Time { return now })
	for range 5 {
		a.record(rec, "")
	}
	if len(got) != 3 {
		t.Fatalf("%d records written in the first window, want 3 (its budget)", len(got))
	}
	now = now.Add(time.Minute)
	a.record(rec, "")
	a.record(rec, LimitConns)
	if len(got) != 5 || got[3].Decision != Summary || got[3].Suppressed != 2 || got[3].PastCap != 0 || got[4].Decision != Refused ||
		got[3].Reason != fmt.Sprintf("2 records past the audit budget of %d bytes per 1m0s: not recorded one by one (%d bytes of records)", summaryCost+3*cost, 2*cost) {
		t.Fatalf("the next window began with %+v, want the first window's summary (2 records) then the record", got[3:])
	}
	a.close()
	if len(got) != 6 || got[5].Decision != Summary || got[5].Suppressed != 1 || got[5].PastCap != 1 {
		t.Fatalf("close wrote %+v, want the summary of the one refusal past the cap", got[5:])
	}
	a.close()
	if len(got) != 6 {
		t.Errorf("a second close wrote %+v", got[6:])
	}
}

// TestLongNameNotResolved: only a "*." rule can match a name longer than
// a DNS name may be; the proxy refuses it without asking the resolver,
// and a resolver's error is kept without the name it names.
func TestLongNameNotResolved(t *testing.T) {
	allow, err := allowlist.ParseList([]string{"*.example.com:443"})
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	p := New(Config{Allow: allow, Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
		asked++
		return nil, &net.DNSError{Err: "no such host", Name: host}
	}})
	long := strings.Repeat("a", 300) + ".example.com:443"
	if _, err := p.check(context.Background(), long); err == nil || err.Error() != "a name longer than 253 bytes" || asked != 0 {
		t.Errorf("check(a %d-byte name) = %v, the resolver asked %d times; want refused unasked", len(long), err, asked)
	}
	if _, err := p.check(context.Background(), "x.example.com:443"); err == nil || err.Error() != "resolve: no such host" || asked != 1 {
		t.Errorf("check(x.example.com:443) = %v, want \"resolve: no such host\"", err)
	}
}
