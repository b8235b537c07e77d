package jsonrpc

import (
	"context"
	"time"
)

// CallInfo is what a transport knows of a tools/call before the MCP
// library decodes it, carried to the handler in the call's context: its
// JSON-RPC id, as canonical JSON ("7", "\"abc\""; CanonicalID), and when
// its request was read (zero: not known).
type CallInfo struct {
	ID      string
	Arrival time.Time
}

type callInfoKey struct{}

// WithCallInfo returns ctx carrying c.
func WithCallInfo(ctx context.Context, c CallInfo) context.Context {
	return context.WithValue(ctx, callInfoKey{}, c)
}

// CallInfoFrom returns the CallInfo a transport put in ctx. A call that
// came another way has none: its ID is "". An arrival not known is now.
func CallInfoFrom(ctx context.Context) CallInfo {
	c, _ := ctx.Value(callInfoKey{}).(CallInfo)
	if c.Arrival.IsZero() {
		c.Arrival = time.Now()
	}
	return c
}
