// Package toolcall is what a tools/call handler of toolgate needs
// whatever serves the tool (server's built-ins and externals, gateway's
// downstream servers): the call's arguments as JSON, the error result,
// and the credentials a tool's egress proxy sets. It sits below both, so
// that neither keeps its own copy.
package toolcall

import (
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/internal/escapes"
	"github.com/toolgate/toolgate/internal/jsonrpc"
)

// Args returns the call's arguments as JSON, nil when absent.
func Args(req mcp.CallToolRequest) json.RawMessage {
	if len(req.Params.RawArguments) > 0 {
		return req.Params.RawArguments
	}
	if req.Params.Arguments == nil {
		return nil
	}
	b, err := json.Marshal(req.Params.Arguments)
	if err != nil {
		return json.RawMessage(`"unencodable"`)
	}
	return b
}

// ErrorResult is a tool error result of one text content; its text is
// bounded (jsonrpc.MaxErrorText) and its terminal control sequences
// neutralised, as it may quote what the caller or a downstream server
// sent.
func ErrorResult(format string, a ...any) *mcp.CallToolResult {
	text := jsonrpc.BoundText(escapes.Neutralize(fmt.Sprintf(format, a...)), jsonrpc.MaxErrorText)
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(text)}, IsError: true}
}

// Injections are the credential lines of a tool (egress_credentials, a
// downstream server's entry) as its egress proxy sets them: by
// destination; nil for none.
func Injections(creds []conf.Credential) map[string]egress.Injection {
	if len(creds) == 0 {
		return nil
	}
	m := make(map[string]egress.Injection, len(creds))
	for _, c := range creds {
		m[c.Dest.String()] = egress.Injection{Header: c.Header, Value: c.Value.Reveal()}
	}
	return m
}
