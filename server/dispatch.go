package server

// Calls are served from their arrival.
//
// mcp-go's stdio server hands every tools/call to a fixed pool of workers
// through a queue: a call waits there, untimed and out of reach of
// notifications/cancelled (its cancel is registered only when a worker
// starts it), and a built-in such as checkpoint_status waits behind the
// external calls that hold the workers while they wait for a slot of
// --max-concurrent. So ServeStdio takes tools/call requests off the read
// loop itself: each is stamped with its arrival and served on a goroutine
// of its own at once (mcp-go's HandleMessage, its hooks and handlers
// unchanged), with a cancel that notifications/cancelled reaches from the
// moment the line is read. An external call then waits for its slot at
// most until its arrival plus its timeout, and a built-in never waits.
//
// What calls may hold while they wait is bounded: at most maxPendingCalls
// calls and maxPendingBytes of request lines; past that the read loop
// waits for calls to end (as mcp-go's full queue made it do).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/jsonrpc"
)

// Bounds of the calls served at once.
const (
	maxPendingCalls = 10000
	maxPendingBytes = 64 << 20
)

// dispatcher serves the tools/call requests of one ServeStdio.
type dispatcher struct {
	s *Server
	w *responseFilter
	// base is the session's context, once mcp-go's Listen has made it;
	// cancelled when the input ends.
	base atomic.Pointer[sessionContext]
	wg   sync.WaitGroup

	mu      sync.Mutex
	room    *sync.Cond
	calls   map[string][]*pendingCall // by canonical JSON id
	n       int
	bytes   int
	stopped bool
}

type sessionContext struct {
	ctx    context.Context
	cancel context.CancelFunc
}

type pendingCall struct {
	cancel context.CancelFunc
}

func newDispatcher(s *Server, w *responseFilter) *dispatcher {
	d := &dispatcher{s: s, w: w, calls: map[string][]*pendingCall{}}
	d.room = sync.NewCond(&d.mu)
	return d
}

// session records the context mcp-go serves the session with (its
// SetContextFunc).
func (d *dispatcher) session(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	d.base.Store(&sessionContext{ctx, cancel})
	d.mu.Lock()
	stopped := d.stopped
	d.mu.Unlock()
	if stopped {
		cancel()
	}
	return ctx
}

// call serves a tools/call line; id is its JSON id and tool the tool it
// names. It returns once the call is registered (so that a cancel on the
// next line finds it), after waiting for room when the bounds are
// reached.
func (d *dispatcher) call(id json.RawMessage, tool string, line []byte) {
	at := time.Now()
	key := jsonrpc.CanonicalID(id)
	size := len(line)
	d.mu.Lock()
	for !d.stopped && d.n > 0 && (d.n >= maxPendingCalls || d.bytes+size > maxPendingBytes) {
		d.room.Wait()
	}
	base := d.base.Load()
	if d.stopped || base == nil {
		d.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(jsonrpc.WithCallInfo(base.ctx, jsonrpc.CallInfo{ID: key, Arrival: at}))
	pc := &pendingCall{cancel: cancel}
	d.calls[key] = append(d.calls[key], pc)
	d.n++
	d.bytes += size
	d.wg.Add(1)
	d.mu.Unlock()
	msg := bytes.Clone(line)
	go func() {
		defer d.wg.Done()
		defer d.done(key, pc, size)
		defer cancel()
		d.serve(ctx, id, tool, msg, key)
	}()
}

// serve runs the call through mcp-go and writes its answer, unless it was
// cancelled (notifications/cancelled, or the input ended): a cancelled
// request gets no response. A call cancelled before it began never runs.
func (d *dispatcher) serve(ctx context.Context, id json.RawMessage, tool string, msg []byte, key string) {
	if ctx.Err() != nil {
		d.s.audit(&audit.Call{RequestID: key, Tool: tool, Cancelled: true, IsError: true, Refused: "cancelled before it began"}, "call")
		return
	}
	resp := func() (out []byte) {
		defer func() {
			if r := recover(); r != nil {
				d.s.log.WithField("panic", fmt.Sprint(r)).Error("tools/call")
				out = jsonrpc.ErrorLine(id, mcp.INTERNAL_ERROR, fmt.Sprintf("internal panic: %v", r))
			}
		}()
		m := d.s.mcp.HandleMessage(ctx, msg)
		if m == nil {
			return nil
		}
		b, err := json.Marshal(m)
		if err != nil {
			return jsonrpc.ErrorLine(id, mcp.INTERNAL_ERROR, "toolgate: encode the answer: "+err.Error())
		}
		return append(b, '\n')
	}()
	if resp == nil || ctx.Err() != nil {
		return
	}
	if _, err := d.w.Write(resp); err != nil {
		d.s.log.WithError(err).Debug("write a tools/call answer")
	}
}

func (d *dispatcher) done(key string, pc *pendingCall, size int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	list := d.calls[key]
	for i, p := range list {
		if p == pc {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(d.calls, key)
	} else {
		d.calls[key] = list
	}
	d.n--
	d.bytes -= size
	d.room.Broadcast()
}

// cancelled cancels the calls with that request id
// (notifications/cancelled), whether they run or still wait for a slot.
func (d *dispatcher) cancelled(requestID json.RawMessage) {
	key := jsonrpc.CanonicalID(requestID)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, pc := range d.calls[key] {
		pc.cancel()
	}
}

// stop cancels every call (the input ended) and lets a waiting read loop
// go.
func (d *dispatcher) stop() {
	d.mu.Lock()
	d.stopped = true
	d.room.Broadcast()
	d.mu.Unlock()
	if base := d.base.Load(); base != nil {
		base.cancel()
	}
}

// wait returns when every call has answered.
func (d *dispatcher) wait() { d.wg.Wait() }
