package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

// requestIDHeader carries the JSON-RPC id of a tools/call from the
// BeforeCallTool hook to the handler. Over stdio a request has no headers;
// this one never leaves the process.
const requestIDHeader = "Toolgate-Request-Id"

// ProgressInterval is how often a call with a progressToken reports.
const ProgressInterval = time.Second

// hooks returns the mcp-go hooks the server needs: the request id of each
// call, for the audit record and for answering nothing after a
// cancellation.
func (s *Server) hooks() *mcpserver.Hooks {
	h := &mcpserver.Hooks{}
	// The downstream tools join the list once their servers are listed
	// (StartDownstream): tools/list waits for that, and so does a call of
	// a name not served yet, so that neither depends on how fast a
	// downstream server starts.
	h.AddBeforeListTools(func(ctx context.Context, _ any, _ *mcp.ListToolsRequest) {
		s.waitListed(ctx)
	})
	h.AddBeforeCallTool(func(ctx context.Context, id any, req *mcp.CallToolRequest) {
		if !s.known(req.Params.Name) {
			s.waitListed(ctx)
		}
		b, err := json.Marshal(id)
		if err != nil {
			return
		}
		if req.Header == nil {
			req.Header = http.Header{}
		}
		req.Header.Set(requestIDHeader, string(b))
	})
	return h
}

// requestID returns the JSON-RPC id of a call as JSON ("7", "\"abc\"").
func requestID(req mcp.CallToolRequest) string {
	return req.Header.Get(requestIDHeader)
}

// progressToken returns the call's progressToken, or nil.
func progressToken(req mcp.CallToolRequest) mcp.ProgressToken {
	if req.Params.Meta == nil {
		return nil
	}
	return req.Params.Meta.ProgressToken
}

// reportProgress sends notifications/progress about once per interval
// until stop is closed: progress is the elapsed milliseconds, the message
// says the output bytes so far. It never sends output content.
func (s *Server) reportProgress(ctx context.Context, token mcp.ProgressToken, seen *atomic.Int64, stop <-chan struct{}) {
	start := time.Now()
	t := time.NewTicker(ProgressInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		elapsed := time.Since(start)
		err := s.mcp.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), map[string]any{
			"progressToken": token,
			"progress":      elapsed.Milliseconds(),
			"message":       fmt.Sprintf("running for %s, %d output bytes so far", elapsed.Round(time.Second), seen.Load()),
		})
		if err != nil {
			s.log.WithError(err).Debug("progress notification")
		}
	}
}

// cancelled remembers the ids of calls cancelled by notifications/cancelled
// whose handler has returned: their answer is dropped, as the protocol
// asks (a cancelled request gets no response).
type cancelled struct {
	mu  sync.Mutex
	ids map[string]struct{}
	n   atomic.Int32
}

func (c *cancelled) add(id string) {
	if id == "" {
		return
	}
	c.mu.Lock()
	if c.ids == nil {
		c.ids = map[string]struct{}{}
	}
	c.ids[id] = struct{}{}
	c.n.Store(int32(len(c.ids)))
	c.mu.Unlock()
}

// take reports whether id was cancelled, forgetting it.
func (c *cancelled) take(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.ids[id]; !ok {
		return false
	}
	delete(c.ids, id)
	c.n.Store(int32(len(c.ids)))
	return true
}
