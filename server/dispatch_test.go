package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/testbin"
	"github.com/toolgate/toolgate/runtime/direct"
)

// stamped is a server over pipes that notes when each answer arrives.
type stamped struct {
	t     *testing.T
	in    *io.PipeWriter
	mu    sync.Mutex
	sent  map[string]time.Time
	got   map[string]time.Time
	lines map[string]map[string]any
	audit *testbin.Buffer
	done  chan error
}

// serveStamped serves a real tools.conf (the probe, run by the direct
// runner) with --max-concurrent max over pipes.
func serveStamped(t *testing.T, confText string, max int) *stamped {
	t.Helper()
	probe, dir := testbin.Probe(t), testbin.Dir(t)
	c := conf.Parse("tools.conf", []byte(strings.NewReplacer("PROBE", probe, "DIR", dir).Replace(confText)), conf.Options{})
	if c.State != conf.StateLoaded {
		t.Fatalf("conf %s: %v", c.State, c.Errors)
	}
	audit := logrus.New()
	st := &stamped{
		t: t, sent: map[string]time.Time{}, got: map[string]time.Time{}, lines: map[string]map[string]any{},
		audit: &testbin.Buffer{}, done: make(chan error, 1),
	}
	audit.SetOutput(st.audit)
	audit.SetFormatter(&logrus.JSONFormatter{})
	s := New(Options{Conf: c, Direct: &direct.Runner{Shim: testbin.Shim(t)}, MaxConcurrent: max, Audit: audit})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	st.in = inW
	go func() {
		st.done <- s.ServeStdio(context.Background(), inR, outW)
		outW.Close()
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("stdout line is not JSON: %q", sc.Text())
				continue
			}
			id, _ := json.Marshal(m["id"])
			st.mu.Lock()
			st.got[string(id)] = time.Now()
			st.lines[string(id)] = m
			st.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-st.done:
		case <-time.After(10 * time.Second):
			t.Error("server did not stop after stdin closed")
		}
	})
	st.send("0", initLine)
	st.wait("0", 5*time.Second)
	return st
}

func (st *stamped) send(id, line string) {
	st.t.Helper()
	st.mu.Lock()
	st.sent[id] = time.Now()
	st.mu.Unlock()
	if _, err := fmt.Fprintln(st.in, line); err != nil {
		st.t.Fatal(err)
	}
}

func (st *stamped) call(id int, tool string) {
	st.send(fmt.Sprint(id), fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q}}`, id, tool))
}

// wait returns how long after it was sent the answer to id came.
func (st *stamped) wait(id string, d time.Duration) time.Duration {
	st.t.Helper()
	deadline := time.Now().Add(d)
	for {
		st.mu.Lock()
		got, ok := st.got[id]
		sent := st.sent[id]
		st.mu.Unlock()
		if ok {
			return got.Sub(sent)
		}
		if time.Now().After(deadline) {
			st.t.Fatalf("no answer to id %s within %s", id, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// answered reports whether id has an answer.
func (st *stamped) answered(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, ok := st.got[id]
	return ok
}

// records are the audit records of the calls of tool.
func (st *stamped) records(tool string) []map[string]any {
	var out []map[string]any
	for l := range strings.SplitSeq(st.audit.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "call" && m["tool"] == tool {
			out = append(out, m)
		}
	}
	return out
}

// TestQueueFromArrival: with --max-concurrent 1, 210 calls of a tool that
// runs 1 s with a 3 s timeout, then checkpoint_status. checkpoint_status
// answers at once; no call waits longer than its own timeout from its
// arrival (the slowest answers within its timeout plus its run), the calls
// that could not get a slot in time answer isError without running, and
// the audit's queued_ms counts from the arrival.
func TestQueueFromArrival(t *testing.T) {
	st := serveStamped(t, "tool slow PROBE read 3 4096 off DIR -- sleep 1\n", 1)
	const n = 210
	start := time.Now()
	for i := 1; i <= n; i++ {
		st.call(i, "slow")
	}
	st.call(1000, "checkpoint_status")
	status := st.wait("1000", 30*time.Second)
	var slowest time.Duration
	ran, refused := 0, 0
	for i := 1; i <= n; i++ {
		d := st.wait(fmt.Sprint(i), 60*time.Second)
		slowest = max(slowest, d)
		st.mu.Lock()
		res, _ := st.lines[fmt.Sprint(i)]["result"].(map[string]any)
		st.mu.Unlock()
		if strings.Contains(fmt.Sprint(res["content"]), "--max-concurrent") {
			refused++
		} else {
			ran++
		}
	}
	t.Logf("%d calls, --max-concurrent 1, timeout 3 s, 1 s each: checkpoint_status answered in %s; the slowest call in %s; %d ran, %d refused (all answered %s after the first was sent)",
		n, status.Round(time.Millisecond), slowest.Round(time.Millisecond), ran, refused, time.Since(start).Round(time.Millisecond))
	if status > 500*time.Millisecond {
		t.Errorf("checkpoint_status answered after %s behind queued externals, want at once", status)
	}
	if slowest > 3*time.Second+1*time.Second+700*time.Millisecond {
		t.Errorf("the slowest call answered after %s, want at most its 3 s timeout of queue plus its 1 s run", slowest)
	}
	if ran < 2 || ran > 4 || refused != n-ran {
		t.Errorf("%d calls ran and %d were refused, want about 3 (one a second for the 3 s of their timeout) and the rest refused", ran, refused)
	}
	for _, rec := range st.records("slow") {
		q, _ := rec["queued_ms"].(float64)
		if _, run := rec["exit_code"]; run && q > 3100 {
			t.Errorf("a call ran after waiting %v ms, over its 3 s timeout: %v", q, rec)
		}
		if rec["refused"] == "queue" && (q < 2900 || q > 3700) {
			t.Errorf("a refused call has queued_ms %v, want about its 3 s timeout from its arrival: %v", q, rec)
		}
	}
}

// TestCancelQueuedCall: notifications/cancelled of a call still waiting
// for a slot: it answers nothing and never runs, and the calls around it
// are unaffected.
func TestCancelQueuedCall(t *testing.T) {
	st := serveStamped(t, "tool busy PROBE read 10 4096 off DIR -- sleep 1\ntool queued PROBE read 10 4096 off DIR -- echo ran\n", 1)
	st.call(1, "busy")
	time.Sleep(200 * time.Millisecond) // busy holds the only slot
	st.call(2, "queued")
	st.call(3, "queued")
	st.send("-", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"no longer needed"}}`)
	st.wait("1", 10*time.Second)
	if d := st.wait("3", 10*time.Second); d > 3*time.Second {
		t.Errorf("the call queued after the cancelled one answered after %s", d)
	}
	time.Sleep(300 * time.Millisecond)
	if st.answered("2") {
		t.Errorf("the cancelled call answered: %v", st.lines["2"])
	}
	recs := st.records("queued")
	var cancelled []map[string]any
	for _, r := range recs {
		if r["request_id"] == "2" {
			cancelled = append(cancelled, r)
		}
	}
	if len(cancelled) != 1 || cancelled[0]["cancelled"] != true {
		t.Fatalf("audit of the cancelled call = %v, want one record, cancelled", cancelled)
	}
	if _, ran := cancelled[0]["exit_code"]; ran {
		t.Errorf("the cancelled call ran: %v", cancelled[0])
	}
}

// TestCancelRaceBeforeStart: a call cancelled on the very next line, before
// its goroutine could start, never runs either: the cancel is registered
// when the line is read.
func TestCancelRaceBeforeStart(t *testing.T) {
	st := serveStamped(t, "tool once PROBE read 10 4096 off DIR -- echo ran\n", 4)
	for i := 1; i <= 50; i++ {
		// One write: both lines are read back to back.
		st.send(fmt.Sprint(i), fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"once"}}`+"\n"+
			`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, i, i))
	}
	st.call(100, "once")
	st.wait("100", 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	for i := 1; i <= 50; i++ {
		if st.answered(fmt.Sprint(i)) {
			t.Errorf("cancelled call %d answered", i)
		}
	}
}
