package toolcall

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/egress/allowlist"
	"github.com/toolgate/toolgate/internal/escapes"
	"github.com/toolgate/toolgate/internal/jsonrpc"
)

func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  mcp.CallToolRequest
		want string
	}{
		{"absent", mcp.CallToolRequest{}, ""},
		{"raw, as sent", mcp.CallToolRequest{Params: mcp.CallToolParams{RawArguments: json.RawMessage(`{ "b":1,"a":2 }`)}}, `{ "b":1,"a":2 }`},
		{"decoded", mcp.CallToolRequest{Params: mcp.CallToolParams{Arguments: map[string]any{"a": 1}}}, `{"a":1}`},
		{"unencodable", mcp.CallToolRequest{Params: mcp.CallToolParams{Arguments: map[string]any{"f": func() {}}}}, `"unencodable"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Args(tc.req); string(got) != tc.want || (tc.want == "" && got != nil) {
				t.Errorf("Args = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestErrorResult: one text content, isError, its control sequences
// neutralised and its length bounded.
func TestErrorResult(t *testing.T) {
	res := ErrorResult("toolgate: %s: %s", "t", "a\x1b[2Jb")
	if !res.IsError || len(res.Content) != 1 || res.StructuredContent != nil {
		t.Fatalf("ErrorResult = %+v, want isError with one content and nothing structured", res)
	}
	if got, want := res.Content[0].(mcp.TextContent).Text, "toolgate: t: "+escapes.Neutralize("a\x1b[2Jb"); got != want || strings.Contains(got, "\x1b") {
		t.Errorf("text %q, want %q", got, want)
	}
	long := ErrorResult("%s", strings.Repeat("x", 4*jsonrpc.MaxErrorText))
	if got, want := long.Content[0].(mcp.TextContent).Text, jsonrpc.BoundText(strings.Repeat("x", 4*jsonrpc.MaxErrorText), jsonrpc.MaxErrorText); got != want {
		t.Errorf("a long text is %d bytes, want the bounded %d", len(got), len(want))
	}
}

func TestInjections(t *testing.T) {
	if got := Injections(nil); got != nil {
		t.Errorf("Injections(nil) = %v, want nil", got)
	}
	dest, err := allowlist.ParseRule("api.example.com:443")
	if err != nil {
		t.Fatal(err)
	}
	got := Injections([]conf.Credential{{Dest: dest, Header: "Authorization", Value: conf.NewSecret("Bearer s3cret")}})
	want := map[string]egress.Injection{dest.String(): {Header: "Authorization", Value: "Bearer s3cret"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Injections = %v, want %v", got, want)
	}
}
