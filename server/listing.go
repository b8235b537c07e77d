package server

// The caching hints of the 2026-07-28 revision (SEP-2549): a complete
// tools/list or server/discover result says how long a client may reuse
// it (ttlMs) and whether it is the same for every caller (cacheScope).
// Earlier revisions have no such fields: their results are unchanged
// (mcp-go renders neither field for them, and the hook below sets none).

import (
	"context"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolgate/toolgate/auth"
)

// DefaultListTTL is serve's --list-ttl: how long a 2026-07-28 client may
// reuse a tools/list (and server/discover) result. The tools served
// change only at a reload or when a pinned downstream definition drifts;
// a client with a channel is told at once (notifications/tools/
// list_changed), and for a stateless client without one the TTL is how
// stale its list can be after such a change. A minute is about what a
// Kubernetes ConfigMap edit takes to reach the pod anyway, while an agent
// that lists before every turn (a turn every few seconds) lists about a
// tenth as often. A stale list grants nothing: every call is decided
// against the tools and the policy served when it arrives.
const DefaultListTTL = time.Minute

// cacheHints sets the 2026-07-28 caching hints on res, the result of a
// tools/list (listing) or server/discover: nothing for a request of an
// earlier revision. The TTL is Options.ListTTL, but 0 while the start-up
// listing of the downstream servers is still under way (a tools/list
// waits for it, but one whose client gave up first is answered without
// them), so that no client keeps a list known to be incomplete.
func (s *Server) cacheHints(ctx context.Context, res *mcp.CacheableResult, listing bool) {
	if !mcpserver.IsModernRequest(ctx) {
		return
	}
	ttl := max(s.opts.ListTTL, 0)
	if listing && s.listing() {
		ttl = 0
	}
	res.SetCacheHints(ttl.Milliseconds(), s.cacheScope(ctx, listing))
}

// cacheScope is "private" whenever the result may differ from one caller
// to another or reach one who may not see it, "public" only when it
// provably cannot:
//
//   - an authenticated request's result (a token's or OAuth's) is
//     private: "public" would let a shared cache (a gateway, a proxy)
//     serve it across authorization contexts, to callers toolgate would
//     refuse 401, and the token file's scopes can change with a reload;
//   - a listing decided by an engine (--policy, or --tool-scope over
//     HTTP) is private: the engine filters it per principal;
//   - otherwise (stdio, or a unix socket without authentication, where
//     every caller is the one principal "local", and no engine) every
//     caller gets the same result, and it is public. server/discover
//     says the same to everyone who may ask it, whatever an engine
//     decides of the tools.
//
// An unknown way of authenticating is private: a new one is never shared
// by accident.
func (s *Server) cacheScope(ctx context.Context, listing bool) mcp.CacheScope {
	if p, ok := auth.PrincipalFrom(ctx); ok && p.Method != auth.MethodLocal {
		return mcp.CacheScopePrivate
	}
	if e, _ := s.engineFor(ctx); listing && e != nil {
		return mcp.CacheScopePrivate
	}
	return mcp.CacheScopePublic
}
