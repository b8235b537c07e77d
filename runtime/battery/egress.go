package battery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/egress"
	rt "github.com/toolgate/toolgate/runtime"
)

// The egress cases: a tool with an allowlist reaches what is listed
// through toolgate's proxy and nothing else. Every destination is a
// listener this process starts on 127.0.0.1, or a name and address the
// proxy refuses before dialling: no packet leaves the machine, even where
// a guarantee is broken.

// callEgress runs the probe with an egress allowlist and returns the
// proxy's records of the call too.
func (e *Env) callEgress(ctx context.Context, allow []string, args ...string) (rt.Result, []egress.Record, error) {
	return e.callCredential(ctx, allow, nil, args...)
}

// target is an HTTP server on 127.0.0.1 that counts its requests.
type target struct {
	srv  *http.Server
	addr string
	hits atomic.Int64
}

func startTarget(body string) (*target, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("battery: listener: %w", err)
	}
	t := &target{addr: l.Addr().String()}
	t.srv = &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			t.hits.Add(1)
			fmt.Fprintln(w, body)
		}),
	}
	go func() { _ = t.srv.Serve(l) }()
	return t, nil
}

func (t *target) port() string {
	_, p, _ := net.SplitHostPort(t.addr)
	return p
}

func (t *target) close() { _ = t.srv.Close() }

// caseEgressReached: a listed destination is reached through the proxy,
// by plain HTTP and by CONNECT, and the tool's environment gains exactly
// the proxy variables.
func caseEgressReached(ctx context.Context, e *Env) error {
	body := "toolgate-egress-ok-" + e.tag[4:12]
	t, err := startTarget(body)
	if err != nil {
		return err
	}
	defer t.close()
	res, recs, err := e.callEgress(ctx, []string{t.addr},
		"egress", "get:http://"+t.addr+"/", "connect:"+t.addr)
	if err != nil {
		return err
	}
	if err := want(res.Output,
		"env HTTP_PROXY=http://127.0.0.1:3128",
		"env HTTPS_PROXY=http://127.0.0.1:3128",
		"get http://"+t.addr+"/: 200 "+body,
		"connect "+t.addr+": 200"); err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("the probe exited %d:\n%s", res.ExitCode, clip(res.Output))
	}
	allowed := 0
	for _, r := range recs {
		if r.Decision == egress.Allowed && r.Addr == t.addr {
			allowed++
		}
	}
	if allowed != 2 || t.hits.Load() != 1 {
		return fmt.Errorf("want 2 allowed connections to %s and 1 request served; got %d allowed, %d served (records %+v)", t.addr, allowed, t.hits.Load(), recs)
	}
	if res.Egress.Conns != 2 || res.Egress.Bytes == 0 {
		return fmt.Errorf("the result counts %d connections and %d bytes: want 2 and some", res.Egress.Conns, res.Egress.Bytes)
	}
	return nil
}

// caseEgressRefused: an unlisted name, an unlisted IP literal, a
// metadata address and a listed name that resolves to loopback are each
// refused by the proxy (403, one refused record each, nothing dialled);
// a connection that ignores the proxy, a name lookup and a DNS datagram
// reach nothing.
func caseEgressRefused(ctx context.Context, e *Env) error {
	t, err := startTarget("must-not-be-reached")
	if err != nil {
		return err
	}
	defer t.close()
	dns, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("battery: udp listener: %w", err)
	}
	defer dns.Close()
	var datagrams atomic.Int64
	go func() {
		buf := make([]byte, 512)
		for {
			if _, _, err := dns.ReadFrom(buf); err != nil {
				return
			}
			datagrams.Add(1)
		}
	}()
	listed := "localhost:" + t.port()
	refusals := []string{"unlisted.example.com:443", t.addr, "169.254.169.254:80", listed}
	args := []string{"egress"}
	for _, r := range refusals {
		args = append(args, "connect:"+r)
	}
	args = append(args, "get:http://"+listed+"/", "direct:"+t.addr, "direct:"+e.listener.Addr().String(),
		"dns:example.com", "udp:"+dns.LocalAddr().String())
	res, recs, err := e.callEgress(ctx, []string{listed}, args...)
	if err != nil {
		return err
	}
	loopback := "get http://" + listed + "/: 403 toolgate egress: " + listed + ": resolves only to addresses that are never reached unless listed: [127.0.0.1 ("
	if !strings.Contains(string(res.Output), loopback) {
		return fmt.Errorf("expected %q in the probe's report:\n%s", loopback, clip(res.Output))
	}
	lines := []string{
		"direct " + t.addr + ": denied ECONNREFUSED",
		"direct " + e.listener.Addr().String() + ": denied ECONNREFUSED",
		"dns example.com: failed",
		"udp " + dns.LocalAddr().String() + ": no answer",
	}
	for _, r := range refusals {
		lines = append(lines, "connect "+r+": 403")
	}
	if err := want(res.Output, lines...); err != nil {
		return err
	}
	if n := t.hits.Load(); n != 0 {
		return fmt.Errorf("the unlisted server was reached %d times", n)
	}
	if n := datagrams.Load(); n != 0 {
		return fmt.Errorf("the host's DNS listener got %d datagrams", n)
	}
	var refused []string
	for _, r := range recs {
		if r.Decision != egress.Refused || r.Addr != "" {
			return fmt.Errorf("a connection was allowed or dialled: %+v", r)
		}
		refused = append(refused, fmt.Sprintf("%s:%d", r.Host, r.Port))
	}
	if len(recs) != len(refusals)+1 {
		return fmt.Errorf("want %d refused records, got %d: %s", len(refusals)+1, len(recs), strings.Join(refused, " "))
	}
	return nil
}

// caseEgressLimits: the call's connection and byte caps hold, and the
// result names the one hit. Each half runs when its cap is small enough to
// reach in seconds (the battery's test limits are; a deployed host's
// defaults are too).
func caseEgressLimits(ctx context.Context, e *Env) error {
	conns, bytes := e.Limits.EgressConns, e.Limits.EgressBytes
	if (conns == 0 || conns > 1024) && (bytes == 0 || bytes > 512<<20) {
		return fmt.Errorf("%w: the egress caps (%d connections, %d bytes) are off or too high to reach in a test", errSkip, conns, bytes)
	}
	big := bytes + 1<<20
	t, err := startSized(big)
	if err != nil {
		return err
	}
	defer t.close()
	if conns > 0 && conns <= 1024 {
		res, _, err := e.callEgress(ctx, []string{t.addr}, "egress", fmt.Sprintf("connects:%d:%s", conns+2, t.addr))
		if err != nil {
			return err
		}
		if err := want(res.Output, fmt.Sprintf("connects %s: 200=%d 403=2", t.addr, conns)); err != nil {
			return err
		}
		if res.Egress.Limit != egress.LimitConns {
			return fmt.Errorf("the result names egress limit %q, want %q", res.Egress.Limit, egress.LimitConns)
		}
	}
	if bytes > 0 && bytes <= 512<<20 {
		res, _, err := e.callEgress(ctx, []string{t.addr}, "egress", "size:http://"+t.addr+"/")
		if err != nil {
			return err
		}
		m := regexp.MustCompile(`size \S+: 200 read (\d+) bytes: cut\n`).FindSubmatch(res.Output)
		if m == nil {
			return fmt.Errorf("a %d-byte body was not cut at the call's %d bytes:\n%s", big, bytes, clip(res.Output))
		}
		if n, _ := strconv.ParseInt(string(m[1]), 10, 64); n > bytes {
			return fmt.Errorf("the tool read %d bytes, more than the call's %d", n, bytes)
		}
		if res.Egress.Limit != egress.LimitBytes {
			return fmt.Errorf("the result names egress limit %q, want %q", res.Egress.Limit, egress.LimitBytes)
		}
	}
	return nil
}

// startSized is a target whose every answer is n bytes.
func startSized(n int64) (*target, error) {
	t, err := startTarget("")
	if err != nil {
		return nil, err
	}
	chunk := make([]byte, 64<<10)
	t.srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.hits.Add(1)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for left := n; left > 0; {
			k := min(left, int64(len(chunk)))
			if _, err := w.Write(chunk[:k]); err != nil {
				return
			}
			left -= k
		}
	})
	return t, nil
}

// caseEgressAuditBounded: a tool that asks the proxy for hundreds of
// destinations, each a 64 KiB name, is refused each time, and what its
// call writes to the audit is bounded: every record's host escaped and
// cut at egress.MaxHost bytes, no more than egress.DefaultAuditBytes
// charged in all, and whatever was not recorded one by one (the
// refusals past the connection cap, or past the budget) counted in one
// summary record, the call's last.
func caseEgressAuditBounded(ctx context.Context, e *Env) error {
	const n, size = 512, 64 << 10
	conns := e.Limits.EgressConns
	if conns > n/2 {
		return fmt.Errorf("%w: the connection cap (%d) is too high to pass with %d connections", errSkip, conns, n)
	}
	t, err := startTarget("must-not-be-reached")
	if err != nil {
		return err
	}
	defer t.close()
	res, recs, err := e.callEgress(ctx, []string{t.addr}, "egress", fmt.Sprintf("hosts:%d:%d", n, size))
	if err != nil {
		return err
	}
	if err := want(res.Output, fmt.Sprintf("hosts %dx%d: 403=%d", n, size, n)); err != nil {
		return err
	}
	if len(recs) == 0 {
		return errors.New("no egress record")
	}
	charged, each := 0, 0
	for _, r := range recs[:len(recs)-1] {
		charged += r.Size() + egress.RecordBase
		if r.Decision == egress.Summary || len(r.Host) > egress.MaxHost || r.HostBytes != size {
			return fmt.Errorf("a record of the flood is not one refusal with its host cut at %d bytes (of %d): %.400v", egress.MaxHost, size, r)
		}
		each++
	}
	s := recs[len(recs)-1]
	charged += s.Size() + egress.RecordBase
	pastCap := 0
	if conns > 0 {
		pastCap = n - conns
		if each != conns {
			return fmt.Errorf("%d connections recorded one by one, want the cap's %d", each, conns)
		}
	}
	if s.Decision != egress.Summary || s.Suppressed != int64(n-each) || s.PastCap != int64(pastCap) {
		return fmt.Errorf("the call's last record %+v: want a summary of %d connections not recorded, %d of them past the cap", s, n-each, pastCap)
	}
	if charged > egress.DefaultAuditBytes {
		return fmt.Errorf("the call's %d egress records are charged %d bytes, more than the audit budget's %d", len(recs), charged, egress.DefaultAuditBytes)
	}
	return nil
}
