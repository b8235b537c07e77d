package gateway

// A downstream server's tools/list, read page by page, keeping only the
// enabled tools.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/conf/registry"
)

// remoteTool is one tool as the downstream server listed it, its schemas
// kept byte for byte.
type remoteTool struct {
	Name         string             `json:"name"`
	Title        string             `json:"title,omitempty"`
	Description  string             `json:"description,omitempty"`
	InputSchema  json.RawMessage    `json:"inputSchema,omitempty"`
	OutputSchema json.RawMessage    `json:"outputSchema,omitempty"`
	Annotations  mcp.ToolAnnotation `json:"annotations"`

	// canonical is the whole definition (every key of the tool's object
	// in the listing) in canonical JSON, and digest its SHA-256: what a
	// pin approves (registry.Pins). Computed once per listing, never per call.
	canonical []byte
	digest    string
}

// MaxTool bounds the definition of one downstream tool (its
// JSON in the server's tools/list: name, description, schemas,
// annotations): an enabled tool listed with a larger one is not served,
// and says why. It is served whole in toolgate's own tools/list, which
// every client reads, and kept for the life of the server.
const MaxTool = 256 << 10

// listing is what a server's tools/list gave: only the enabled tools are
// kept.
type listing struct {
	tools   map[string]remoteTool // enabled, offered and accepted
	refused map[string]string     // enabled and offered, but not served: why
	offered int                   // tools listed, enabled or not
}

// listTools asks for tools/list page by page and keeps the JSON of each
// enabled tool, so that its schemas are served byte for byte; every other
// tool is dropped as its page is read, so a server that lists thousands
// costs toolgate one page at a time. An enabled tool whose definition is
// over MaxTool, or that is listed twice (either definition could
// be meant), is refused. The request goes straight to the transport
// (mcp-go's ListTools decodes schemas into a struct that drops keywords).
func listTools(ctx context.Context, c *client.Client, enabled func(string) bool) (*listing, error) {
	l := &listing{tools: map[string]remoteTool{}, refused: map[string]string{}}
	seen := map[string]int{}
	cursor := ""
	for page := 1; ; page++ {
		if page > 100 {
			return nil, errors.New("more than 100 pages of tools")
		}
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		resp, err := c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{
			JSONRPC: mcp.JSONRPC_VERSION,
			ID:      mcp.NewRequestId(fmt.Sprintf("toolgate-tools-list-%d", page)),
			Method:  string(mcp.MethodToolsList),
			Params:  params,
		})
		if err != nil {
			return nil, err
		}
		if resp.Error != nil {
			return nil, resp.Error.AsError()
		}
		var res struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor string            `json:"nextCursor"`
		}
		err = json.Unmarshal(resp.Result, &res)
		resp = nil // let the page go
		if err != nil {
			return nil, fmt.Errorf("decode: %w", err)
		}
		for _, raw := range res.Tools {
			var head struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(raw, &head) != nil || head.Name == "" {
				continue
			}
			l.offered++
			if !enabled(head.Name) {
				continue
			}
			name := head.Name
			if seen[name]++; seen[name] > 1 {
				delete(l.tools, name)
				l.refused[name] = fmt.Sprintf("the server lists it %d times in one tools/list; a tool's name must be unique, and either definition could be meant", seen[name])
				continue
			}
			var t remoteTool
			if err := json.Unmarshal(raw, &t); err != nil {
				l.refused[name] = fmt.Sprintf("its definition does not decode: %v", err)
				continue
			}
			if len(raw) > MaxTool {
				l.refused[name] = fmt.Sprintf("its definition is %d bytes (inputSchema %d, outputSchema %d, description %d), over toolgate's cap of %d bytes for one downstream tool",
					len(raw), len(t.InputSchema), len(t.OutputSchema), len(t.Description), MaxTool)
				continue
			}
			c, err := registry.CanonicalJSON(raw)
			if err != nil {
				l.refused[name] = fmt.Sprintf("its definition could be read more than one way: %v", err)
				continue
			}
			t.canonical, t.digest = c, registry.Digest(c)
			l.tools[name] = t
		}
		if res.NextCursor == "" || res.NextCursor == cursor {
			return l, nil
		}
		cursor = res.NextCursor
	}
}
