package server

import (
	"context"
	"fmt"
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
		if s.listing() && !s.serves(req.Params.Name) {
			s.waitListed(ctx)
		}
	})
	// The 2026-07-28 caching hints (listing.go); mcp-go keeps them
	// rather than its own (0, private).
	h.AddAfterListTools(func(ctx context.Context, _ any, _ *mcp.ListToolsRequest, res *mcp.ListToolsResult) {
		s.cacheHints(ctx, &res.CacheableResult, true)
	})
	h.AddAfterDiscover(func(ctx context.Context, _ any, _ *mcp.DiscoverRequest, res *mcp.DiscoverResult) {
		s.cacheHints(ctx, &res.CacheableResult, false)
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
