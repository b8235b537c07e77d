package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/egress/allowlist"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
	"github.com/toolgate/toolgate/runtime/cgroup"
)

// TestEgressCall: a test-class tool with an egress line, called through
// the MCP server on the real bwrap sandbox, reaches its listed server;
// beyond the call's connection cap the result names the limit (text
// marker and structuredContent), the call's audit record counts the
// connections, and every connection within the cap is one egress audit
// record naming the tool and the call, those past it one summary record. The description says the
// tool's network.
func TestEgressCall(t *testing.T) {
	if _, err := bwrap.Find(); err != nil {
		testbin.Missing(t, "%v", err)
	}
	var hits atomic.Int64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		fmt.Fprintln(w, "hello from the listed host")
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	addr := l.Addr().String()

	cg := cgroup.Setup()
	t.Cleanup(cg.Close)
	limits := rt.DefaultSandboxLimits()
	limits.EgressConns = 3
	r, err := bwrap.New(context.Background(), bwrap.Config{Shim: testbin.Shim(t), Cgroups: cg, Limits: limits})
	if errors.Is(err, bundle.ErrNoSeccomp) {
		testbin.Missing(t, "this test binary was built without -tags seccomp (go test -tags seccomp): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	probe, dir := testbin.Probe(t), testbin.Dir(t)
	text := fmt.Sprintf("tool net %s test 30 65536 on %s -- egress get:http://%s/ connects:4:%s\negress net %s\n", probe, dir, addr, addr, addr)
	c := conf.Parse("tools.conf", []byte(text), conf.Options{Builtins: builtin.Names()})
	if c.State != conf.StateLoaded {
		t.Fatalf("conf: %v", c.Errors)
	}
	alog, buf := jsonAudit()
	s := New(Options{Conf: c, Direct: &fakeRunner{}, Sandbox: rt.ReadySandbox("bwrap", r), Audit: alog})
	cl := session(t, s)

	tools, err := cl.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "net" && !strings.Contains(tool.Description, "Network: only "+addr+", through toolgate's egress proxy.") {
			t.Errorf("description %q does not state the tool's network", tool.Description)
		}
	}

	res, err := callTool(t, cl, "net", nil)
	if err != nil {
		t.Fatal(err)
	}
	out := resultText(res)
	for _, want := range []string{
		"get http://" + addr + "/: 200 hello from the listed host\n",
		"connects " + addr + ": 200=2 403=2\n", "[limit: egress-connections]\n", "[exit=0 ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("result lacks %q:\n%s", want, out)
		}
	}
	if res.IsError || hits.Load() != 1 {
		t.Errorf("isError %v, the listed server answered %d requests; want false and 1", res.IsError, hits.Load())
	}
	var sc CallOutput
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &sc); err != nil || sc.Egress == nil ||
		*sc.Egress != (CallEgress{Connections: 5, Bytes: sc.Egress.Bytes, Limit: "egress-connections"}) || sc.Egress.Bytes == 0 {
		t.Errorf("structuredContent egress = %+v (%v), want 5 connections, some bytes, limit egress-connections", sc.Egress, err)
	}

	var call, summary map[string]any
	decisions := map[string]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		switch m["msg"] {
		case "call":
			call = m
		case "egress":
			if m["tool"] != "net" || m["call"] != "c1" || m["kind"] != "egress" || m["request_id"] == nil {
				t.Errorf("egress record %s", line)
			}
			decisions[m["decision"].(string)]++
			if m["decision"] == "summary" {
				summary = m
			} else if m["host"] != "127.0.0.1" {
				t.Errorf("egress record %s", line)
			}
		}
	}
	// The two connections past the cap are one summary, not two records.
	if decisions["allowed"] != 3 || decisions["refused"] != 0 || decisions["summary"] != 1 ||
		summary["suppressed"] != float64(2) || summary["past_cap"] != float64(2) {
		t.Errorf("egress records: %v (summary %v), want 3 allowed and one summary of 2 refused past the cap:\n%s", decisions, summary, buf)
	}
	if call["egress_connections"] != float64(5) || call["egress_limit"] != "egress-connections" || call["egress_bytes"] == float64(0) {
		t.Errorf("the call's record: %v", call)
	}
}

// floodWire is a CONNECT target's host of 64 KiB, as the request line
// writes it; floodHost is the host the proxy reads from it, which carries
// what an audit line must never take verbatim: a quote, a '<', a '%', a
// byte that is not UTF-8 ("%ff" in a request line's host is that byte).
var (
	floodWire = `evil"<%25%ff` + strings.Repeat("a", 64<<10) + ".example.com"
	floodHost = "evil\"<%\xff" + strings.Repeat("a", 64<<10) + ".example.com"
)

// floodHostAudit is floodHost as an egress record writes it: escaped
// (every byte but letters, digits, '-', '.', '_' and ':' as %HH) and cut
// at 253 bytes.
var floodHostAudit = `evil%22%3C%25%FF` + strings.Repeat("a", 253-len(`evil%22%3C%25%FF`))

// TestEgressAuditFlood: a sandbox that opens thousands of CONNECTs, each
// naming a 64 KiB host, through a call's egress proxy (as rt.StartEgress
// starts it for a call) leaves at most 256 KiB of egress records in the
// audit log: each record's host escaped and cut at 253 bytes, written
// once (the reason does not repeat it); the refusals past the
// connection cap, and with no cap whatever passes the call's audit
// budget, counted in one summary record at the end of the call instead
// of one record each.
func TestEgressAuditFlood(t *testing.T) {
	const n, budget = 2048, 256 << 10
	allow, err := allowlist.ParseList([]string{"api.example.com:443"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		limits egress.Limits
		// each is the number of connections recorded one by one (-1:
		// as many as the budget holds).
		each int
	}{
		{"default caps", egress.Limits{Conns: bundle.DefaultEgressConns, Bytes: bundle.DefaultEgressBytes}, bundle.DefaultEgressConns},
		{"no connection cap", egress.Limits{}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alog, buf := jsonAudit()
			e, err := rt.StartEgress(allow, tc.limits, -1, -1, audit.EgressRecorder(alog, &audit.Call{RequestID: "1", Tool: "net", Call: "c1"}))
			if err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(e.Dir, bundle.EgressSocket)
			var wg sync.WaitGroup
			var forbidden atomic.Int64
			for w := range 8 {
				wg.Go(func() {
					for i := w; i < n; i += 8 {
						c, err := net.Dial("unix", sock)
						if err != nil {
							t.Error(err)
							return
						}
						fmt.Fprintf(c, "CONNECT %s:443 HTTP/1.1\r\nHost: x\r\n\r\n", floodWire)
						resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
						if err == nil {
							resp.Body.Close()
							if resp.StatusCode == http.StatusForbidden {
								forbidden.Add(1)
							}
						}
						c.Close()
					}
				})
			}
			wg.Wait()
			e.Close()
			if forbidden.Load() != n {
				t.Errorf("%d of %d CONNECTs answered 403", forbidden.Load(), n)
			}

			out := buf.String()
			if len(out) > budget {
				t.Errorf("the call's egress records take %d bytes of the audit log, more than its %d-byte budget", len(out), budget)
			}
			var each, summaries int
			var summary map[string]any
			for line := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatalf("audit line %.200q: %v", line, err)
				}
				if m["decision"] == "summary" {
					summaries++
					summary = m
					continue
				}
				each++
				if m["host"] != floodHostAudit || m["host_bytes"] != float64(len(floodHost)) || m["port"] != float64(443) ||
					m["decision"] != "refused" || m["reason"] != "not in the allowlist" {
					t.Fatalf("record %.600s: want host %q (host_bytes %d), port 443, refused, reason \"not in the allowlist\"", line, floodHostAudit, len(floodHost))
				}
			}
			t.Logf("%d CONNECTs of a %d-byte host: %d records one by one, 1 summary, %d bytes of audit; summary %v", n, len(floodHost), each, len(out), summary["reason"])
			if tc.each >= 0 && each != tc.each {
				t.Errorf("%d connections recorded one by one, want %d", each, tc.each)
			}
			if summaries != 1 {
				t.Fatalf("%d summary records, want 1 (%d records in all)", summaries, each+summaries)
			}
			pastCap := 0
			if tc.limits.Conns > 0 {
				pastCap = n - tc.limits.Conns
			}
			if summary["suppressed"] != float64(n-each) || summary["past_cap"] != float64(pastCap) || summary["kind"] != "egress" || summary["call"] != "c1" {
				t.Errorf("summary %v: want suppressed %d, past_cap %d, of call c1", summary, n-each, pastCap)
			}
		})
	}
}
