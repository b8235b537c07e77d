package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/internal/jsonrpc"
	rt "github.com/toolgate/toolgate/runtime"
)

// wire is a server serving JSON-RPC lines over pipes, as over stdio.
type wire struct {
	t     *testing.T
	in    *io.PipeWriter
	lines chan map[string]any
	raw   chan string
	done  chan error
}

func serveWire(t *testing.T, s *Server) *wire {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	w := &wire{t: t, in: inW, lines: make(chan map[string]any, 100), raw: make(chan string, 100), done: make(chan error, 1)}
	go func() {
		w.done <- s.ServeStdio(context.Background(), inR, outW)
		outW.Close()
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("stdout line is not JSON: %q", sc.Text())
				continue
			}
			w.raw <- sc.Text()
			w.lines <- m
		}
		close(w.lines)
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-w.done:
		case <-time.After(5 * time.Second):
			t.Error("server did not stop after stdin closed")
		}
	})
	return w
}

func (w *wire) send(line string) {
	w.t.Helper()
	if _, err := fmt.Fprintln(w.in, line); err != nil {
		w.t.Fatal(err)
	}
}

// next returns the next message, failing after d.
func (w *wire) next(d time.Duration) map[string]any {
	w.t.Helper()
	select {
	case m := <-w.lines:
		<-w.raw
		return m
	case <-time.After(d):
		w.t.Fatalf("no message within %s", d)
		return nil
	}
}

// none checks that no message arrives within d.
func (w *wire) none(d time.Duration) {
	w.t.Helper()
	select {
	case m := <-w.lines:
		w.t.Errorf("unexpected message %v", m)
	case <-time.After(d):
	}
}

const initLine = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

func errCode(m map[string]any) float64 {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return c
}

// TestBadProtocolInput: every kind of bad input gets the JSON-RPC answer the
// spec prescribes, or is ignored where it says so, and the next valid
// request is answered.
func TestBadProtocolInput(t *testing.T) {
	s := New(Options{Conf: loadConf(t, twoTools), Direct: &fakeRunner{}, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{})})
	w := serveWire(t, s)
	w.send(initLine)
	w.next(5 * time.Second)
	for _, tc := range []struct {
		name, line string
		code       float64 // 0: a result; -1: no answer at all
		id         any
	}{
		{"garbage", `this is not json`, -32700, nil},
		{"truncated json", `{"jsonrpc":"2.0","id":1,`, -32700, nil},
		{"not a request", `{"foo":1}`, -32600, nil},
		{"wrong jsonrpc version", `{"jsonrpc":"1.0","id":2,"method":"ping"}`, -32600, 2.0},
		{"batch", `[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":4,"method":"ping"}]`, -32600, nil},
		{"unknown method", `{"jsonrpc":"2.0","id":5,"method":"no/such"}`, -32601, 5.0},
		{"string id", `{"jsonrpc":"2.0","id":"six","method":"ping"}`, 0, "six"},
		{"float id", `{"jsonrpc":"2.0","id":6.5,"method":"ping"}`, 0, 6.5},
		{"negative id", `{"jsonrpc":"2.0","id":-7,"method":"ping"}`, 0, -7.0},
		{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, -32600, nil},
		{"array id", `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, -32600, nil},
		{"bool id", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, -32600, nil},
		{"notification gets nothing", `{"jsonrpc":"2.0","method":"notifications/unknown"}`, -1, nil},
		{"invalid params", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":5}}`, -32600, 8.0},
		{"params not an object", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":"x"}`, -32600, 9.0},
		{"unknown tool", `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"nope"}}`, -32602, 10.0},
		{"3 MB line", `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"zeta","arguments":{"x":"` + strings.Repeat("a", 3<<20) + `"}}}`, 0, 11.0},
		{"10 MB line", `{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"zeta","arguments":{"x":"` + strings.Repeat("a", 10<<20) + `"}}}`, -32600, 12.0},
		{"10 MB line, id last", `{"method":"tools/call","params":{"name":"zeta","arguments":{"x":"` + strings.Repeat("a", 10<<20) + `"}},"jsonrpc":"2.0","id":"last"}`, -32600, "last"},
		{"10 MB of garbage", strings.Repeat("{", 10<<20), -32600, nil},
		{"10 MB notification", `{"jsonrpc":"2.0","method":"notifications/x","params":{"x":"` + strings.Repeat("a", 10<<20) + `"}}`, -1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.t = t
			w.send(tc.line)
			if tc.code == -1 {
				w.none(300 * time.Millisecond)
			} else {
				// Generous: a 3 MB line is parsed several times, and the
				// race detector slows that tenfold.
				m := w.next(60 * time.Second)
				if got := errCode(m); got != tc.code {
					t.Errorf("error code %v, want %v: %v", got, tc.code, m)
				}
				if m["id"] != tc.id {
					t.Errorf("id %v (%T), want %v", m["id"], m["id"], tc.id)
				}
			}
			// The next valid request is answered.
			w.send(`{"jsonrpc":"2.0","id":"after","method":"ping"}`)
			if m := w.next(5 * time.Second); m["id"] != "after" || m["error"] != nil {
				t.Errorf("ping after %s: %v", tc.name, m)
			}
		})
	}
}

// TestRequestLineBounded: a request line over the limit is discarded as
// it is read: the server's memory does not grow with it, the answer names
// the limit without echoing the line, and the next request is answered.
func TestRequestLineBounded(t *testing.T) {
	s := New(Options{Conf: loadConf(t, twoTools), Direct: &fakeRunner{}, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{})})
	w := serveWire(t, s)
	w.send(initLine)
	w.next(5 * time.Second)
	size := 256 << 20
	peak := peakSince(t)
	go func() {
		fmt.Fprint(w.in, `{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"zeta","arguments":{"x":"`)
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		for range size >> 20 {
			w.in.Write(chunk)
		}
		fmt.Fprintln(w.in, `"}}}`)
	}()
	var raw string
	select {
	case m := <-w.lines:
		raw = <-w.raw
		if errCode(m) != -32600 || m["id"] != "big" {
			t.Errorf("answer to a %d MiB line = %.300s, want -32600 for id \"big\"", size>>20, raw)
		}
	case <-time.After(120 * time.Second):
		t.Fatal("no answer to the over-long line")
	}
	grew := peak()
	t.Logf("a %d MiB request line: peak RSS %.1f MiB over the RSS before it", size>>20, grew)
	if grew >= 64 {
		t.Errorf("a %d MiB request line raised the peak RSS by %.1f MiB, want < 64 MiB", size>>20, grew)
	}
	if len(raw) > 512 || !strings.Contains(raw, fmt.Sprintf("over the limit of %d bytes (toolgate serve --max-request-bytes)", DefaultMaxRequestBytes)) {
		t.Errorf("answer = %.600s, want the limit named in a short answer", raw)
	}
	w.send(`{"jsonrpc":"2.0","id":"after","method":"ping"}`)
	if m := w.next(5 * time.Second); m["id"] != "after" || m["error"] != nil {
		t.Errorf("ping after the over-long line: %v", m)
	}
}

// TestNoErrorEchoes: no error answer, of JSON-RPC or of a tool, echoes more
// than a bounded part of a long request (here 3 MiB, under the line limit)
// back to the client.
func TestNoErrorEchoes(t *testing.T) {
	builtins, _, err := builtin.Tools(builtin.Config{Root: t.TempDir(), Caps: []builtin.Group{builtin.GroupRepo}})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Conf: loadConf(t, twoTools), Direct: &fakeRunner{}, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{}), Builtins: builtins})
	w := serveWire(t, s)
	w.send(initLine)
	w.next(5 * time.Second)
	long := strings.Repeat("a", 3<<20)
	quotes := strings.Repeat(`\"`, 1<<20) // 1 MiB of quotes, each escaped again in an answer
	for _, tc := range []struct{ name, line string }{
		{"unknown tool", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + long + `"}}`},
		{"unknown tool of quotes", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + quotes + `"}}`},
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"` + long + `"}`},
		{"wrong jsonrpc", `{"jsonrpc":"` + long + `","id":1,"method":"ping"}`},
		{"params of the wrong type", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"zeta","arguments":"` + long + `"}}`},
		{"external with arguments", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"zeta","arguments":{"` + long + `":1}}}`},
		{"built-in, unknown property", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"repo_manifest","arguments":{"` + long + `":1}}}`},
		{"built-in, bad path", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"repo_manifest","arguments":{"path":"` + long + `"}}}`},
		{"built-in, path of quotes", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"repo_manifest","arguments":{"path":"` + quotes + `"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.t = t
			w.send(tc.line)
			var raw string
			select {
			case <-w.lines:
				raw = <-w.raw
			case <-time.After(60 * time.Second):
				t.Fatal("no answer")
			}
			if len(raw) > 2*jsonrpc.MaxErrorText {
				t.Errorf("answer of %d bytes to a %d-byte line: %.300s", len(raw), len(tc.line), raw)
			}
			if !strings.Contains(raw, `"error"`) && !strings.Contains(raw, `"isError":true`) {
				t.Errorf("answer = %.300s, want an error", raw)
			}
			if strings.Contains(raw, "bytes cut]") == false && len(raw) > jsonrpc.MaxErrorMessage+512 {
				t.Errorf("a long answer without the cut marked: %.300s", raw)
			}
		})
	}
}

// TestCancelledCallAnswersNothing: notifications/cancelled kills the call
// and no response follows; the audit record says so.
func TestCancelledCallAnswersNothing(t *testing.T) {
	var audit bytes.Buffer
	var mu sync.Mutex
	alog := logrus.New()
	alog.SetFormatter(&logrus.JSONFormatter{})
	alog.SetOutput(&lockedWriter{mu: &mu, w: &audit})
	runner := &fakeRunner{block: make(chan struct{})}
	s := New(Options{Conf: loadConf(t, twoTools), Direct: runner, Audit: alog})
	w := serveWire(t, s)
	w.send(initLine)
	w.next(5 * time.Second)
	w.send(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"zeta"}}`)
	for len(runner.invocations()) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":42,"reason":"user"}}`)
	w.none(500 * time.Millisecond)
	w.send(`{"jsonrpc":"2.0","id":43,"method":"ping"}`)
	if m := w.next(5 * time.Second); m["id"] != 43.0 {
		t.Errorf("got %v, want the ping's answer", m)
	}
	mu.Lock()
	defer mu.Unlock()
	rec := auditOf(t, audit.String(), "zeta")
	if rec["cancelled"] != true || rec["request_id"] != "42" {
		t.Errorf("audit record %v, want cancelled and request_id 42", rec)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func auditOf(t *testing.T, log, tool string) map[string]any {
	t.Helper()
	for l := range strings.SplitSeq(strings.TrimSpace(log), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("audit line is not JSON: %q", l)
		}
		if m["tool"] == tool {
			return m
		}
	}
	t.Fatalf("no audit record for %s in %q", tool, log)
	return nil
}

// progressRunner reports output as it goes and takes a while.
type progressRunner struct{ d time.Duration }

func (p progressRunner) Run(ctx context.Context, inv rt.Invocation) (rt.Result, error) {
	deadline := time.Now().Add(p.d)
	for time.Now().Before(deadline) {
		inv.Seen.Add(1000)
		time.Sleep(50 * time.Millisecond)
	}
	return rt.Result{Output: []byte("secret output"), OutputBytes: inv.Seen.Load(), Elapsed: p.d}, nil
}

// TestProgress: with a progressToken a long call reports about once a
// second, with elapsed time and output bytes but no output content, and
// stops with the call.
func TestProgress(t *testing.T) {
	s := New(Options{Conf: loadConf(t, twoTools), Direct: progressRunner{d: 2500 * time.Millisecond}})
	w := serveWire(t, s)
	w.send(initLine)
	w.next(5 * time.Second)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"zeta","_meta":{"progressToken":"tok"}}}`)
	var progress []map[string]any
	for {
		m := w.next(10 * time.Second)
		if m["method"] == "notifications/progress" {
			progress = append(progress, m["params"].(map[string]any))
			continue
		}
		if m["id"] != 1.0 {
			t.Fatalf("unexpected %v", m)
		}
		break
	}
	if len(progress) < 2 || len(progress) > 3 {
		t.Fatalf("%d progress notifications for a 2.5 s call, want 2", len(progress))
	}
	last := -1.0
	for _, p := range progress {
		if p["progressToken"] != "tok" || p["progress"].(float64) <= last {
			t.Errorf("progress %v", p)
		}
		last = p["progress"].(float64)
		msg, _ := p["message"].(string)
		if !strings.Contains(msg, "output bytes so far") || strings.Contains(msg, "secret") {
			t.Errorf("progress message %q", msg)
		}
	}
	w.none(1500 * time.Millisecond) // no progress after the call
}

// TestAuditRecord: one JSON record per call with what ran and how it ended,
// never output content.
func TestAuditRecord(t *testing.T) {
	var audit bytes.Buffer
	var mu sync.Mutex
	alog := logrus.New()
	alog.SetFormatter(&logrus.JSONFormatter{})
	alog.SetOutput(&lockedWriter{mu: &mu, w: &audit})
	direct := &fakeRunner{res: rt.Result{
		Output: []byte("TOPSECRET"), OutputBytes: 9, ExitCode: 3, Elapsed: 7 * time.Millisecond,
		Truncated: true, Dropped: 1, Limit: rt.LimitPids,
	}}
	s := New(Options{Conf: loadConf(t, twoTools), Direct: direct, Audit: alog})
	w := serveWire(t, s)
	w.send(initLine)
	w.next(5 * time.Second)
	w.send(`{"jsonrpc":"2.0","id":"q","method":"tools/call","params":{"name":"zeta"}}`)
	w.next(5 * time.Second)
	w.send(`{"jsonrpc":"2.0","id":"r","method":"tools/call","params":{"name":"checkpoint_status"}}`)
	w.next(5 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(audit.String(), "TOPSECRET") {
		t.Fatal("the audit log carries output content")
	}
	rec := auditOf(t, audit.String(), "zeta")
	for k, v := range map[string]any{
		"request_id": `"q"`, "class": "read", "backend": "direct", "exit_code": 3.0,
		"elapsed_ms": 7.0, "output_bytes": 9.0, "truncated": true, "timed_out": false, "limit": "pids", "is_error": true, "kind": "external",
	} {
		if rec[k] != v {
			t.Errorf("audit %s = %v, want %v", k, rec[k], v)
		}
	}
	if _, ok := rec["time"]; !ok {
		t.Error("audit record has no time")
	}
	if rec := auditOf(t, audit.String(), "checkpoint_status"); rec["kind"] != "builtin" {
		t.Errorf("builtin audit %v", rec)
	}
}
