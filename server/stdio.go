package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"
	"syscall"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/sirupsen/logrus"
	"github.com/toolgate/toolgate/internal/jsonrpc"
)

// DefaultMaxRequestBytes is the longest request line served (4 MiB, the
// newline not counted): the largest arguments a built-in takes are a
// renderer's report, at most 1 MiB of text, more once JSON-escaped, and
// downstream tools may take more; while mcp-go decodes a request it holds
// it several times over, so a line's cost is bounded by this.
const DefaultMaxRequestBytes = 4 << 20

// MinMaxRequestBytes is the smallest request line limit accepted.
const MinMaxRequestBytes = 64 << 10

// ServeStdio serves MCP on in/out until in is closed or ctx is done.
//
// Around mcp-go's stdio loop it enforces what the library leaves open:
// a request line longer than Options.MaxRequestBytes is discarded as it is
// read, never held, and answered -32600 (with its id when the line has one
// that can be read); a batch (an array; MCP removed batching in
// 2025-06-18) and a request whose id is not a string, number or null are
// answered with -32600 Invalid Request instead of being processed; an error
// answer's message is bounded (jsonrpc.MaxErrorMessage); tools/call requests are
// served from their arrival, each on a goroutine of its own, instead of
// mcp-go's worker queue (dispatch.go); and a call cancelled by
// notifications/cancelled, running or still queued, answers nothing.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	stdio := mcpserver.NewStdioServer(s.mcp)
	stdio.SetErrorLogger(log.New(s.log.WriterLevel(logrus.ErrorLevel), "", 0))
	w := &responseFilter{w: out}
	max := s.opts.MaxRequestBytes
	if max <= 0 {
		max = DefaultMaxRequestBytes
	}
	// tools/call requests never reach mcp-go's worker queue: the
	// dispatcher serves each from its arrival (dispatch.go).
	calls := newDispatcher(s, w)
	stdio.SetContextFunc(calls.session)
	// When the input ends (stdin closed, or ctx done: a signal), the
	// downstream servers are stopped at once, beside the cancellation of
	// the calls in flight, and not after them: whatever a downstream
	// server does, nothing then waits on it longer than its close grace.
	var closing sync.WaitGroup
	stop := sync.OnceFunc(func() {
		closing.Go(s.Close)
		calls.stop()
	})
	// A client that closed its end of stdout reads no answer any more: the
	// server stops as if stdin had ended.
	lctx, gone := context.WithCancel(ctx)
	defer gone()
	w.gone = func() {
		stop()
		gone()
	}
	defer context.AfterFunc(ctx, stop)()
	err := stdio.Listen(lctx, &requestFilter{lines: jsonrpc.NewLineReader(in, max), w: w, max: max, calls: calls, atEnd: stop}, w)
	stop()
	calls.wait()
	closing.Wait()
	return err
}

// requestFilter passes JSON-RPC lines through, answering the ones JSON-RPC
// says are invalid requests itself, and the ones over max bytes without
// keeping them.
type requestFilter struct {
	lines   *jsonrpc.LineReader
	w       *responseFilter
	max     int
	pending []byte // the accepted line, until mcp-go has read it
	err     error  // what ended the input

	// calls, when set, serves tools/call requests instead of mcp-go, and
	// notifications/cancelled reach them there too.
	calls *dispatcher
	// atEnd, when set, is called when the input ends.
	atEnd func()
}

func (f *requestFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		if f.err != nil {
			if f.atEnd != nil {
				f.atEnd()
			}
			return 0, f.err
		}
		line, over, err := f.lines.Next()
		f.err = err
		switch {
		case over != nil:
			f.refuseLong(*over)
		case len(line) > 0 && f.accept(line):
			f.pending = line
		}
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	if len(f.pending) == 0 {
		f.lines.Release()
	}
	return n, nil
}

// refuseLong answers an over-long line -32600, with its id if it had one
// (a notification, with a method and no id, gets no answer).
func (f *requestFilter) refuseLong(o jsonrpc.Oversize) {
	id, n := o.ID, o.Size
	if id == nil && o.Method {
		return
	}
	if id == nil {
		id = json.RawMessage("null")
	}
	_, _ = f.w.Write(jsonrpc.ErrorLine(id, mcp.INVALID_REQUEST, fmt.Sprintf(
		"Invalid Request: the request line is %d bytes, over the limit of %d bytes (toolgate serve --max-request-bytes); it was discarded unread", n, f.max)))
}

// invalidRequest is the -32600 answer, with a null id as JSON-RPC asks when
// the id cannot be determined.
var invalidRequest = []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: %s"}}` + "\n")

// accept reports whether line goes on to mcp-go; otherwise it has been
// answered here.
func (f *requestFilter) accept(line []byte) bool {
	t := bytes.TrimSpace(line)
	if len(t) == 0 {
		return true
	}
	switch t[0] {
	case '[':
		if json.Valid(t) {
			f.answer("batches are not supported (MCP 2025-06-18 removed JSON-RPC batching)")
			return false
		}
	case '{':
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method json.RawMessage `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(t, &msg) != nil {
			return true // mcp-go answers
		}
		if len(msg.ID) > 0 {
			switch msg.ID[0] {
			case '{', '[', 't', 'f':
				f.answer("id must be a string, a number or null")
				return false
			}
		}
		if f.calls == nil {
			return true
		}
		var method string
		_ = json.Unmarshal(msg.Method, &method)
		var params struct {
			Name      string          `json:"name"`
			RequestID json.RawMessage `json:"requestId"`
		}
		switch {
		case method == string(mcp.MethodToolsCall) && len(msg.ID) > 0 && string(msg.ID) != "null":
			_ = json.Unmarshal(msg.Params, &params)
			f.calls.call(msg.ID, params.Name, t)
			return false
		case method == string(mcp.MethodNotificationCancelled) && len(msg.ID) == 0:
			if json.Unmarshal(msg.Params, &params) == nil && len(params.RequestID) > 0 {
				f.calls.cancelled(params.RequestID)
			}
		}
	}
	return true
}

func (f *requestFilter) answer(reason string) {
	_, _ = f.w.Write(bytes.Replace(invalidRequest, []byte("%s"), []byte(reason), 1))
}

// responseFilter writes JSON-RPC messages to w, one whole message per
// Write. A cancelled call's answer never reaches it: the dispatcher does
// not write it.
type responseFilter struct {
	mu sync.Mutex
	w  io.Writer
	// gone, when set, is called once a write finds the reader gone
	// (EPIPE): it stops the server as the end of its input does.
	gone func()
}

func (f *responseFilter) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > jsonrpc.MaxErrorMessage && isErrorAnswer(p) {
		p = boundErrorAnswer(p)
	}
	f.mu.Lock()
	_, err := f.w.Write(p)
	f.mu.Unlock()
	if err != nil {
		if errors.Is(err, syscall.EPIPE) && f.gone != nil {
			f.gone() // the client closed its end: nobody reads the answers
		}
		return 0, err
	}
	return n, nil
}

// isErrorAnswer is a cheap test for a JSON-RPC error answer, so that large
// results are not decoded on their way out: mcp-go writes the "error"
// member before anything a message could quote, and a result's "result"
// member before its content.
func isErrorAnswer(p []byte) bool {
	before, _, ok := bytes.Cut(p, []byte(`"error":`))
	if !ok {
		return false
	}
	return !bytes.Contains(before, []byte(`"result":`))
}

// boundErrorAnswer cuts the message of a JSON-RPC error answer to
// jsonrpc.MaxErrorMessage and drops its data: mcp-go's messages quote what the
// request named ("tool 'NAME' not found", "method NAME not found").
func boundErrorAnswer(p []byte) []byte {
	var msg struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *struct {
			Code    int             `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data,omitempty"`
		} `json:"error"`
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(p, &msg) != nil || msg.Error == nil || msg.Result != nil ||
		(len(msg.Error.Message) <= jsonrpc.MaxErrorMessage && len(msg.Error.Data) == 0) {
		return p
	}
	if len(msg.ID) == 0 {
		msg.ID = json.RawMessage("null")
	}
	return jsonrpc.ErrorLine(msg.ID, msg.Error.Code, jsonrpc.BoundText(msg.Error.Message, jsonrpc.MaxErrorMessage))
}
