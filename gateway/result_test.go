package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/internal/mcptest"
)

func TestCapResult(t *testing.T) {
	small := &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent("ok")}}
	if got, cut := capResult(small, 4096); got != small || cut {
		t.Error("capResult changed a small result")
	}
	big := &mcp.CallToolResult{Content: []mcp.Content{
		mcp.NewTextContent(strings.Repeat("a", 1000)),
		mcp.NewImageContent(strings.Repeat("A", 8000), "image/png"),
		mcp.NewTextContent(strings.Repeat("\"", 5000)),
		mcp.NewTextContent("tail"),
	}}
	got, cut := capResult(big, 4096)
	b, _ := json.Marshal(got)
	if !cut || !got.IsError || len(b) > 4096 || len(got.Content) != 3 {
		t.Fatalf("capResult: cut %v isError %v, %d bytes, %d items", cut, got.IsError, len(b), len(got.Content))
	}
	if tc, ok := got.Content[1].(mcp.TextContent); !ok || !strings.HasPrefix(tc.Text, `""`) {
		t.Errorf("item 1 = %+v, want the cut third item", got.Content[1])
	}
	if m := resultText(&mcp.CallToolResult{Content: got.Content[2:]}); !strings.Contains(m, "dropped: the end of a text item, 2 content items") {
		t.Errorf("marker = %q", m)
	}
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"héllo", 5, "hé"}, // "\"hé\"" is 5 bytes
		{"héllo", 4, "h"},  // é is 2 bytes: never half of it
		{"a\"b", 5, "a\""},
		{"a\"b", 4, "a"},    // the quote costs 2
		{"abc", 100, "abc"}, // fits
		{"abc", 0, ""},      // nothing fits
	} {
		if got := cutJSONText(tc.in, tc.n); got != tc.want {
			t.Errorf("cutJSONText(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func resultText(r *mcp.CallToolResult) string { return mcptest.Text(r) }
