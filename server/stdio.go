package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"sync"

	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/sirupsen/logrus"
)

// ServeStdio serves MCP on in/out until in is closed or ctx is done.
//
// Around mcp-go's stdio loop it enforces two points of JSON-RPC 2.0 that
// the library is lenient about: a batch (an array; MCP removed batching in
// 2025-06-18) and a request whose id is not a string, number or null are
// answered with -32600 Invalid Request instead of being processed; and the
// response of a call cancelled by notifications/cancelled is dropped.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	stdio := mcpserver.NewStdioServer(s.mcp)
	stdio.SetErrorLogger(log.New(s.log.WriterLevel(logrus.ErrorLevel), "", 0))
	mcpserver.WithWorkerPoolSize(100)(stdio)
	mcpserver.WithQueueSize(10000)(stdio)
	w := &responseFilter{w: out, c: &s.cancelled}
	return stdio.Listen(ctx, &requestFilter{r: bufio.NewReaderSize(in, 64<<10), w: w}, w)
}

// requestFilter passes JSON-RPC lines through, answering the ones JSON-RPC
// says are invalid requests itself.
type requestFilter struct {
	r       *bufio.Reader
	w       *responseFilter
	pending []byte
}

func (f *requestFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		line, err := f.r.ReadBytes('\n')
		if len(line) > 0 && f.accept(line) {
			f.pending = line
		}
		if err != nil {
			if len(f.pending) > 0 {
				break
			}
			return 0, err
		}
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
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
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(t, &msg) == nil && len(msg.ID) > 0 {
			switch msg.ID[0] {
			case '{', '[', 't', 'f':
				f.answer("id must be a string, a number or null")
				return false
			}
		}
	}
	return true
}

func (f *requestFilter) answer(reason string) {
	_, _ = f.w.Write(bytes.Replace(invalidRequest, []byte("%s"), []byte(reason), 1))
}

// responseFilter writes JSON-RPC messages to w, one whole message per
// Write, dropping the responses of cancelled calls.
type responseFilter struct {
	mu sync.Mutex
	w  io.Writer
	c  *cancelled
}

func (f *responseFilter) Write(p []byte) (int, error) {
	if f.c.n.Load() > 0 && bytes.Contains(p, []byte(`"result"`)) {
		var msg struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(bytes.TrimSpace(p), &msg) == nil && len(msg.ID) > 0 && f.c.take(string(msg.ID)) {
			return len(p), nil
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w.Write(p)
}
