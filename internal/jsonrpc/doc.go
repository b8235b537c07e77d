// Package jsonrpc holds the wire helpers toolgate's transports share: the
// scan of a JSON-RPC message's envelope as it streams past (Scan), the
// error answer as one line (ErrorLine), the bound on text echoed back
// (BoundText), the bounded readers of newline-delimited messages and of
// event streams (LineCap, SSECap), the canonical form of an id
// (CanonicalID), and the argument check of a tool that takes none
// (NoArgs). It imports no toolgate package and no MCP library.
package jsonrpc
