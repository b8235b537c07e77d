package jsonrpc

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxErrorMessage bounds the message of a JSON-RPC error answer, and
// MaxErrorText the text of a tool's error result: what goes back to the
// client never echoes more than that of what it sent (a tool name, a
// method, a property name, a path), however long the request was. A longer
// message keeps its start and its end, with the number of bytes cut
// between them (BoundText).
const (
	MaxErrorMessage = 1 << 10
	MaxErrorText    = 16 << 10
)

// BoundText returns s when it is at most max bytes; otherwise its start and
// its end, cut at character boundaries, around a note of how much was cut,
// in max bytes or fewer.
func BoundText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	note := fmt.Sprintf(" …[toolgate: %d bytes cut]… ", len(s))
	keep := max - len(note) - 8 // the cut's digits may grow by a few
	if keep < 2 {
		return strings.ToValidUTF8(s[:max], "")
	}
	head, tail := s[:keep*3/4], s[len(s)-keep/4:]
	for len(head) > 0 && !utf8.RuneStart(s[len(head)]) {
		head = head[:len(head)-1]
	}
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	cut := len(s) - len(head) - len(tail)
	return head + fmt.Sprintf(" …[toolgate: %d bytes cut]… ", cut) + tail
}

// CanonicalID is an id as mcp-go's hooks see it (decoded, then encoded
// again), so that 7 and 7.0 are one id, as they are to mcp-go.
func CanonicalID(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(b)
}

// NoArgsSchema is the input schema of a tool that takes no arguments: it
// accepts only {} (NoArgs enforces it).
var NoArgsSchema = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)

// NoArgs accepts only an absent, null or empty-object argument payload.
func NoArgs(args json.RawMessage) error {
	if len(args) == 0 {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return fmt.Errorf("arguments must be an object: %w", err)
	}
	if len(m) > 0 {
		keys := slices.Sorted(maps.Keys(m))
		for i, k := range keys {
			keys[i] = strconv.Quote(k)
		}
		return fmt.Errorf("takes no arguments, got %s", strings.Join(keys, ", "))
	}
	return nil
}
