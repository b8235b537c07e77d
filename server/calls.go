package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

// ProgressInterval is how often a call with a progressToken reports.
const ProgressInterval = time.Second

// hooks returns the mcp-go hooks the server needs. A call's id and arrival
// do not come through them: the transport puts them in the call's context
// before mcp-go decodes it (jsonrpc.CallInfo).
func (s *Server) hooks() *mcpserver.Hooks {
	h := &mcpserver.Hooks{}
	// The downstream tools join the list once their servers are listed
	// (StartDownstream): tools/list waits for that, and so does a call of
	// a name not served yet, so that neither depends on how fast a
	// downstream server starts.
	h.AddBeforeListTools(func(ctx context.Context, _ any, _ *mcp.ListToolsRequest) {
		s.waitListed(ctx)
	})
	h.AddBeforeCallTool(func(ctx context.Context, _ any, req *mcp.CallToolRequest) {
		if !s.known(req.Params.Name) {
			s.waitListed(ctx)
		}
	})
	return h
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
