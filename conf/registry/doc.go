// Package registry reads and validates the tool-MCP registry (seed 002):
// the operator's list of downstream MCP servers, in TOML fragments of one
// directory (Load, ParseFragment), and its pins, the tool definitions the
// operator approved (ParsePins, CanonicalJSON, Digest). It never executes
// anything; what it shares with tools.conf (the trust rule for files, the
// state denylist, a credential's secret file) it takes from package conf,
// which never imports it.
//
// Loading is fail-closed: a registry with one refused entry anywhere is
// refused as a whole (no server is served), and nothing else in toolgate
// is affected. Every refusal is an *Error (file, line, key path, reason),
// all of them joined, so an operator can fix them in one pass.
package registry
