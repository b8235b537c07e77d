//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

// A scripted model: the far end of an agent CLI, started by the test on
// 127.0.0.1 inside the client's network namespace. It speaks just enough of
// each client's wire API, streaming (SSE) as the clients ask for it:
//
//   - OpenAI Responses (Codex): POST /v1/responses
//   - Anthropic Messages (Claude Code): POST /v1/messages (and count_tokens)
//   - OpenAI Chat Completions (OpenCode, @ai-sdk/openai-compatible):
//     POST /v1/chat/completions
//
// Its script is a list of tool calls. Each request that offers toolgate's
// tools is answered by the next call of the script whose result is not yet
// in the conversation, and then by a final text; a request that offers none
// of them (a title or summary side request) gets a short text. Whatever the
// client put in front of the model as each call's result (the
// function_call_output item, the tool_result block, the tool message) is
// recorded verbatim, as is every tools list the client offered.

// wire is a client's model API.
type wire string

const (
	wireResponses wire = "responses"        // Codex
	wireMessages  wire = "messages"         // Claude Code
	wireChat      wire = "chat/completions" // OpenCode
)

// scriptCall is one tool call of the script: the tool as toolgate serves it
// and the arguments the model passes.
type scriptCall struct {
	Tool string
	Args map[string]any
	// Find, when set, picks the client-visible tool instead of the
	// client's prefix rule (for names a client shortens or hashes).
	Find func(offered []offeredTool) (offeredTool, bool)
}

// offeredTool is a tool as the client offered it to the model.
type offeredTool struct {
	// Name is the full model-visible name: for Codex's namespaced tools,
	// namespace + "__" + name, the name Codex itself displays.
	Name string
	// Namespace and Local are Codex's two parts ("" and Name elsewhere).
	Namespace, Local string
	Description      string
}

// modelRequest is one request the model server received.
type modelRequest struct {
	Path  string
	Body  json.RawMessage
	Tools []offeredTool
}

// callResult is what the client put in front of the model as a call's
// result.
type callResult struct {
	// Called is the model-visible name the model called.
	Called string
	// Raw is the item, block or message, verbatim.
	Raw json.RawMessage
}

// model is the scripted model server.
type model struct {
	wire   wire
	prefix string // the client's prefix of toolgate's tools
	script []scriptCall
	final  string

	mu       sync.Mutex
	requests []modelRequest
	results  map[int]callResult
	called   map[int]string
	problems []string
}

// callID is the id of the script's i-th call: the model server finds its
// results in later requests by it.
func callID(i int) string { return fmt.Sprintf("call_tg_%d", i) }

// startModel serves a scripted model on l.
func startModel(t *testing.T, l net.Listener, w wire, prefix string, script []scriptCall, final string) *model {
	t.Helper()
	m := &model{wire: w, prefix: prefix, script: script, final: final, results: map[int]callResult{}, called: map[int]string{}}
	srv := &http.Server{Handler: m}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return m
}

func (m *model) problem(format string, a ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.problems = append(m.problems, fmt.Sprintf(format, a...))
}

func (m *model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		m.problem("%s %s: read body: %v", r.Method, r.URL, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	path := r.URL.Path
	switch {
	case r.Method == http.MethodPost && path == "/v1/messages/count_tokens" && m.wire == wireMessages:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"input_tokens":100}`)
		return
	case r.Method == http.MethodPost && path == "/v1/"+string(m.wire):
	default:
		m.problem("unexpected request %s %s (%d bytes)", r.Method, r.URL, len(body))
		http.NotFound(w, r)
		return
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		m.problem("%s: body is not a JSON object: %v", path, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tools := offered(m.wire, req["tools"])
	done := m.collect(req)

	m.mu.Lock()
	m.requests = append(m.requests, modelRequest{Path: path, Body: body, Tools: tools})
	m.mu.Unlock()

	ours := slices.ContainsFunc(tools, func(o offeredTool) bool { return strings.HasPrefix(o.Name, m.prefix) })
	next := -1
	for i := range m.script {
		if !done[i] {
			next = i
			break
		}
	}
	var sr streamer
	switch m.wire {
	case wireResponses:
		sr = responsesStream{w}
	case wireMessages:
		sr = messagesStream{w: w, model: rawString(req["model"])}
	case wireChat:
		sr = chatStream{w: w, model: rawString(req["model"])}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	switch {
	case !ours:
		// A side request (a title, a summary): no tools of toolgate's.
		sr.text("toolgate e2e")
	case next < 0:
		sr.text(m.final)
	default:
		sc := m.script[next]
		tool, ok := m.find(sc, tools)
		if !ok {
			names := make([]string, len(tools))
			for i, o := range tools {
				names[i] = o.Name
			}
			m.problem("step %d: the client offered no tool for %q (prefix %q); offered: %v", next, sc.Tool, m.prefix, names)
			sr.text(m.final)
			return
		}
		args, _ := json.Marshal(sc.Args)
		if sc.Args == nil {
			args = []byte("{}")
		}
		m.mu.Lock()
		m.called[next] = tool.Name
		m.mu.Unlock()
		sr.call(callID(next), tool, string(args))
	}
}

// find returns the offered tool of a script call.
func (m *model) find(sc scriptCall, tools []offeredTool) (offeredTool, bool) {
	if sc.Find != nil {
		return sc.Find(tools)
	}
	for _, o := range tools {
		if o.Name == m.prefix+sc.Tool {
			return o, true
		}
	}
	return offeredTool{}, false
}

// collect records the results of the script's calls that the request
// carries and returns which calls have one.
func (m *model) collect(req map[string]json.RawMessage) map[int]bool {
	done := map[int]bool{}
	record := func(id string, raw json.RawMessage) {
		for i := range m.script {
			if id == callID(i) {
				done[i] = true
				m.mu.Lock()
				if _, seen := m.results[i]; !seen {
					m.results[i] = callResult{Called: m.called[i], Raw: append(json.RawMessage(nil), raw...)}
				}
				m.mu.Unlock()
			}
		}
	}
	switch m.wire {
	case wireResponses:
		var items []json.RawMessage
		json.Unmarshal(req["input"], &items)
		for _, it := range items {
			var v struct {
				Type   string `json:"type"`
				CallID string `json:"call_id"`
			}
			json.Unmarshal(it, &v)
			if v.Type == "function_call_output" {
				record(v.CallID, it)
			}
		}
	case wireMessages:
		var msgs []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		json.Unmarshal(req["messages"], &msgs)
		for _, msg := range msgs {
			var blocks []json.RawMessage
			if json.Unmarshal(msg.Content, &blocks) != nil {
				continue
			}
			for _, b := range blocks {
				var v struct {
					Type      string `json:"type"`
					ToolUseID string `json:"tool_use_id"`
				}
				json.Unmarshal(b, &v)
				if v.Type == "tool_result" {
					record(v.ToolUseID, b)
				}
			}
		}
	case wireChat:
		var msgs []json.RawMessage
		json.Unmarshal(req["messages"], &msgs)
		for _, msg := range msgs {
			var v struct {
				Role       string `json:"role"`
				ToolCallID string `json:"tool_call_id"`
			}
			json.Unmarshal(msg, &v)
			if v.Role == "tool" {
				record(v.ToolCallID, msg)
			}
		}
	}
	return done
}

// offered decodes a request's tools list into model-visible names.
func offered(w wire, raw json.RawMessage) []offeredTool {
	var tools []json.RawMessage
	json.Unmarshal(raw, &tools)
	var out []offeredTool
	for _, t := range tools {
		var v struct {
			Type        string            `json:"type"`
			Name        string            `json:"name"`
			Description string            `json:"description"`
			Tools       []json.RawMessage `json:"tools"`
			Function    struct {
				Name        string `json:"name"`
				Description string `json:"description"`
			} `json:"function"`
		}
		json.Unmarshal(t, &v)
		switch {
		case w == wireChat:
			out = append(out, offeredTool{Name: v.Function.Name, Local: v.Function.Name, Description: v.Function.Description})
		case v.Type == "namespace":
			// Codex: {"type":"namespace","name":"mcp__toolgate","tools":[...]}.
			for _, sub := range v.Tools {
				var s struct {
					Name        string `json:"name"`
					Description string `json:"description"`
				}
				json.Unmarshal(sub, &s)
				out = append(out, offeredTool{Name: v.Name + "__" + s.Name, Namespace: v.Name, Local: s.Name, Description: s.Description})
			}
		default:
			out = append(out, offeredTool{Name: v.Name, Local: v.Name, Description: v.Description})
		}
	}
	return out
}

func rawString(raw json.RawMessage) string {
	var s string
	json.Unmarshal(raw, &s)
	return s
}

// snapshot returns what the model server recorded so far.
func (m *model) snapshot() (requests []modelRequest, results map[int]callResult, problems []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	results = map[int]callResult{}
	maps.Copy(results, m.results)
	return slices.Clone(m.requests), results, slices.Clone(m.problems)
}

// streamer answers one request as a stream of SSE events.
type streamer interface {
	text(s string)
	call(id string, tool offeredTool, args string)
}

func sse(w http.ResponseWriter, event string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// responsesStream is the OpenAI Responses API stream Codex reads:
// response.created, the output items (response.output_item.done), then
// response.completed, without which Codex retries the turn.
type responsesStream struct{ w http.ResponseWriter }

func (s responsesStream) send(item map[string]any) {
	sse(s.w, "response.created", map[string]any{"type": "response.created", "response": map[string]any{"id": "resp_tg"}})
	sse(s.w, "response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	sse(s.w, "response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	sse(s.w, "response.completed", map[string]any{"type": "response.completed", "response": map[string]any{
		"id": "resp_tg", "usage": map[string]any{"input_tokens": 100, "output_tokens": 10, "total_tokens": 110},
	}})
}

func (s responsesStream) text(t string) {
	s.send(map[string]any{
		"type": "message", "id": "msg_tg", "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": t, "annotations": []any{}}},
	})
}

func (s responsesStream) call(id string, tool offeredTool, args string) {
	item := map[string]any{"type": "function_call", "id": "fc_" + id, "call_id": id, "name": tool.Local, "arguments": args, "status": "completed"}
	if tool.Namespace != "" {
		item["namespace"] = tool.Namespace
	}
	s.send(item)
}

// messagesStream is the Anthropic Messages API stream: message_start, one
// content block (start, delta, stop), message_delta with the stop reason,
// message_stop.
type messagesStream struct {
	w     http.ResponseWriter
	model string
}

func (s messagesStream) send(block map[string]any, delta map[string]any, stop string) {
	sse(s.w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_tg", "type": "message", "role": "assistant", "model": s.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": 100, "output_tokens": 1},
	}})
	sse(s.w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": block})
	sse(s.w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": delta})
	sse(s.w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(s.w, "message_delta", map[string]any{
		"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 10},
	})
	sse(s.w, "message_stop", map[string]any{"type": "message_stop"})
}

func (s messagesStream) text(t string) {
	s.send(map[string]any{"type": "text", "text": ""}, map[string]any{"type": "text_delta", "text": t}, "end_turn")
}

func (s messagesStream) call(id string, tool offeredTool, args string) {
	s.send(map[string]any{"type": "tool_use", "id": id, "name": tool.Name, "input": map[string]any{}},
		map[string]any{"type": "input_json_delta", "partial_json": args}, "tool_use")
}

// chatStream is the OpenAI Chat Completions stream: chunks of deltas, a
// finish_reason, then [DONE].
type chatStream struct {
	w     http.ResponseWriter
	model string
}

func (s chatStream) chunk(delta map[string]any, finish any) {
	sse(s.w, "", map[string]any{
		"id": "chatcmpl-tg", "object": "chat.completion.chunk", "created": 1, "model": s.model,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
	})
}

func (s chatStream) done() {
	sse(s.w, "", map[string]any{
		"id": "chatcmpl-tg", "object": "chat.completion.chunk", "created": 1, "model": s.model, "choices": []any{},
		"usage": map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
	})
	fmt.Fprint(s.w, "data: [DONE]\n\n")
}

func (s chatStream) text(t string) {
	s.chunk(map[string]any{"role": "assistant", "content": t}, nil)
	s.chunk(map[string]any{}, "stop")
	s.done()
}

func (s chatStream) call(id string, tool offeredTool, args string) {
	s.chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
		"index": 0, "id": id, "type": "function", "function": map[string]any{"name": tool.Name, "arguments": args},
	}}}, nil)
	s.chunk(map[string]any{}, "tool_calls")
	s.done()
}
