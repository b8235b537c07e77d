package gateway

// What toolgate passes on of a downstream result: its text neutralised
// (unless --keep-escapes), and capped at --downstream-max-bytes.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/toolgate/toolgate/internal/escapes"
)

// DefaultMaxBytes caps the JSON size of one downstream result
// (1 MiB). A larger result is cut (see capResult) and marked isError; a
// message over messageMax of the cap is discarded while it is read
// (cap.go).
const DefaultMaxBytes = 1 << 20

func (d *Server) maxBytes() int {
	if n := d.deps.Options.MaxBytes; n > 0 {
		return n
	}
	return DefaultMaxBytes
}

// neutralizeResult returns res with the terminal control sequences of its
// text neutralised: the text content items and the text of embedded
// resources, what a client prints. structuredContent is left as it is: it
// reaches a client as JSON, whose encoding escapes every control
// character.
func neutralizeResult(res *mcp.CallToolResult) *mcp.CallToolResult {
	var content []mcp.Content
	for i, c := range res.Content {
		var n mcp.Content
		switch c := c.(type) {
		case mcp.TextContent:
			if t := escapes.Neutralize(c.Text); t != c.Text {
				c.Text = t
				n = c
			}
		case mcp.EmbeddedResource:
			if r, ok := c.Resource.(mcp.TextResourceContents); ok {
				if t := escapes.Neutralize(r.Text); t != r.Text {
					r.Text = t
					c.Resource = r
					n = c
				}
			}
		}
		if n == nil {
			continue
		}
		if content == nil {
			content = slices.Clone(res.Content)
		}
		content[i] = n
	}
	if content == nil {
		return res
	}
	out := *res
	out.Content = content
	return &out
}

// capResult returns res unchanged when its JSON fits in max bytes.
// Otherwise it keeps the content items in order while they fit, cuts the
// first text item that does not at a character boundary, drops
// structuredContent and the rest, appends a marker saying what was
// dropped, and sets isError: the caller did not get the whole result.
func capResult(res *mcp.CallToolResult, max int) (*mcp.CallToolResult, bool) {
	b, err := json.Marshal(res)
	if err == nil && len(b) <= max {
		return res, false
	}
	total := len(b)
	out := &mcp.CallToolResult{Result: res.Result, IsError: true}
	budget := max - 512 // room for the marker and the envelope
	dropped, cut := 0, false
	for _, c := range res.Content {
		cb, err := json.Marshal(c)
		switch {
		case err == nil && len(cb) <= budget:
			out.Content = append(out.Content, c)
			budget -= len(cb)
		case !cut && budget > 64:
			if tc, ok := c.(mcp.TextContent); ok {
				tc.Text = cutJSONText(tc.Text, budget-64)
				out.Content = append(out.Content, tc)
				cut, budget = true, 0
				continue
			}
			dropped++
		default:
			dropped++
		}
	}
	what := []string{}
	if res.StructuredContent != nil {
		what = append(what, "structuredContent")
	}
	if cut {
		what = append(what, "the end of a text item")
	}
	if dropped > 0 {
		what = append(what, fmt.Sprintf("%d content items", dropped))
	}
	out.Content = append(out.Content, mcp.NewTextContent(fmt.Sprintf(
		"[toolgate: the downstream result was %d bytes, over the cap of %d bytes; dropped: %s]", total, max, strings.Join(what, ", "))))
	return out, true
}

// cutJSONText returns the longest prefix of s, cut at a character
// boundary, whose JSON encoding fits in n bytes.
func cutJSONText(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) > n {
		s = s[:n]
	}
	for {
		// Drop a rune cut in two (and any invalid byte at the end).
		for len(s) > 0 {
			if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size > 1 {
				break
			}
			s = s[:len(s)-1]
		}
		b, _ := json.Marshal(s)
		if len(b) <= n || s == "" {
			return s
		}
		s = s[:len(s)*n/len(b)] // len(b) > n: it shrinks
	}
}
