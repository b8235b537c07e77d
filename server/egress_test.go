package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
)

// TestEgressCall: a test-class tool with an egress line, called through
// the MCP server on the real bwrap sandbox, reaches its listed server;
// beyond the call's connection cap the result names the limit (text
// marker and structuredContent), the call's audit record counts the
// connections, and every connection, allowed or refused, is one egress
// audit record naming the tool and the call. The description says the
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

	cg := rt.SetupCgroups()
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
	for _, want := range []string{"get http://" + addr + "/: 200 hello from the listed host\n",
		"connects " + addr + ": 200=2 403=2\n", "[limit: egress-connections]\n", "[exit=0 "} {
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

	var call map[string]any
	decisions := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		switch m["msg"] {
		case "call":
			call = m
		case "egress":
			if m["tool"] != "net" || m["call"] != "c1" || m["kind"] != "egress" || m["host"] != "127.0.0.1" || m["request_id"] == nil {
				t.Errorf("egress record %s", line)
			}
			decisions[m["decision"].(string)]++
		}
	}
	if decisions["allowed"] != 3 || decisions["refused"] != 2 {
		t.Errorf("egress records: %v, want 3 allowed and 2 refused:\n%s", decisions, buf)
	}
	if call["egress_connections"] != float64(5) || call["egress_limit"] != "egress-connections" || call["egress_bytes"] == float64(0) {
		t.Errorf("the call's record: %v", call)
	}
}

// TestEgressRecordKeys pins the egress audit record byte for byte.
func TestEgressRecordKeys(t *testing.T) {
	alog, buf := jsonAudit()
	rec := egressRecorder(alog, &auditRecord{RequestID: "7", Tool: "net", Call: "c3", Principal: &Principal{Name: "alice", Method: "token"}})
	rec(egress.Record{Host: "api.example.com", Port: 443, Addr: "192.0.2.7:443", Decision: egress.Allowed, Up: 10, Down: 20, Elapsed: 1500 * time.Millisecond})
	rec(egress.Record{Host: "evil.example.com", Port: 443, Decision: egress.Refused, Reason: "evil.example.com:443 is not in the allowlist"})
	checkAudit(t, auditLines(t, buf, "net"),
		`{"addr":"192.0.2.7:443","bytes_down":20,"bytes_up":10,"call":"c3","decision":"allowed","elapsed_ms":1500,"host":"api.example.com","kind":"egress","level":"info","msg":"egress","port":443,"principal":"alice","request_id":"7","time":"*","tool":"net"}`,
		`{"bytes_down":0,"bytes_up":0,"call":"c3","decision":"refused","elapsed_ms":0,"host":"evil.example.com","kind":"egress","level":"info","msg":"egress","port":443,"principal":"alice","reason":"evil.example.com:443 is not in the allowlist","request_id":"7","time":"*","tool":"net"}`)
}
