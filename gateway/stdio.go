package gateway

// Bounding every wait on a stdio downstream server, writes included.
//
// mcp-go's stdio transport writes a request to the server's stdin before it
// looks at the request's context, under a lock every later write takes. A
// server that stops reading its stdin leaves that write blocked once the
// pipe (64 KiB) is full: the call would ignore tool_timeout_sec and
// notifications/cancelled, every later call of the server would wait
// behind it, and toolgate could not stop. So a request is sent off the
// caller's goroutine and the caller waits only as long as its context
// allows; a request still being written when the context ends means the
// server is not reading, and the connection is ended (stdin closed, the
// process killed with everything it started), which also ends the write.

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// writeGrace is how long a request's write may go on once its context
// has ended before the server is taken for one that does not read: mcp-go
// returns at once when the context is done once the request is written.
const writeGrace = 200 * time.Millisecond

// boundedStdio is mcp-go's stdio transport with every send bounded by its
// context.
type boundedStdio struct {
	*transport.Stdio
	w *stdinWriter
	// stuck ends the connection: the server did not read a message
	// within the budget of the request that sent it.
	stuck func(reason string)
}

func (b *boundedStdio) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	type answer struct {
		resp *transport.JSONRPCResponse
		err  error
	}
	ch := make(chan answer, 1)
	go func() {
		resp, err := b.Stdio.SendRequest(ctx, req)
		ch <- answer{resp, err}
	}()
	a, ok := settle(ctx, ch)
	if !ok {
		b.stuck(fmt.Sprintf("it did not read its stdin: the %s request was still being written when the call ended (%s)", req.Method, b.w.progress()))
		return nil, ctx.Err()
	}
	return a.resp, a.err
}

func (b *boundedStdio) SendNotification(ctx context.Context, n mcp.JSONRPCNotification) error {
	ch := make(chan error, 1)
	go func() { ch <- b.Stdio.SendNotification(ctx, n) }()
	err, ok := settle(ctx, ch)
	if !ok {
		b.stuck(fmt.Sprintf("it did not read its stdin: the %s notification was still being written when its time ran out (%s)", n.Method, b.w.progress()))
		return ctx.Err()
	}
	return err
}

// settle waits for what ch brings, or until ctx is done and writeGrace
// more has passed; false means the send is still writing.
func settle[T any](ctx context.Context, ch chan T) (T, bool) {
	select {
	case v := <-ch:
		return v, true
	case <-ctx.Done():
	}
	t := time.NewTimer(writeGrace)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, true
	case <-t.C:
		var zero T
		return zero, false
	}
}

// stdinWriter is the server's stdin as the transport writes it: in pieces,
// so that how far a blocked write got can be told.
type stdinWriter struct {
	w io.WriteCloser

	mu          sync.Mutex
	size, wrote int // of the write under way; 0 when none
}

// stdinChunk is the piece written at a time: a pipe's buffer.
const stdinChunk = 64 << 10

func (s *stdinWriter) Write(p []byte) (int, error) {
	s.note(len(p), 0)
	defer s.note(0, 0)
	n := 0
	for n < len(p) {
		m, err := s.w.Write(p[n:min(len(p), n+stdinChunk)])
		n += m
		s.note(len(p), n)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (s *stdinWriter) Close() error { return s.w.Close() }

func (s *stdinWriter) note(size, wrote int) {
	s.mu.Lock()
	s.size, s.wrote = size, wrote
	s.mu.Unlock()
}

// progress says how far the write under way got.
func (s *stdinWriter) progress() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.size == 0 {
		return "waiting behind another write"
	}
	return fmt.Sprintf("%d of %d bytes written", s.wrote, s.size)
}
