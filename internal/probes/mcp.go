package probes

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// mcpServer is a minimal stdio MCP server, the downstream server of the
// tests of toolgate's registry: it answers initialize, tools/list and
// tools/call one line at a time, with what its options (key=value
// arguments) ask for:
//
//   - deaf: a tools/call of the tool "deaf" makes it stop reading its
//     stdin for good, as a server that hangs while a request is written to
//     it; a request longer than the pipe buffer (64 KiB) then cannot be
//     written to the end. It is decided from the start of the line (what
//     one read of 4 KiB gives), before the rest is read.
//   - tools=N, schema=B, page=P: it also lists N tools tool00000... with
//     an inputSchema of about B bytes each, P tools per tools/list page.
//   - big=B: the tool "big" has an inputSchema of about B bytes.
//   - dup: it lists "echo" twice.
//   - stay: it keeps running once its stdin closes, as a server that does
//     not watch its stdin: only a kill ends it.
//   - slowstart=S: it reads nothing for S seconds after it starts.
//   - an absolute path: a JSON file of changes to its definitions, read
//     at start (and again by the tool "relist"): an object mapping a tool
//     name to an object whose keys replace those of the tool's definition
//     (a null value removes the key); a name it does not list is added
//     as a tool. How the tests change a server's definitions between two
//     starts.
//
// Its tools: echo (answers "echo: N bytes of arguments"), pid (its pid),
// escapes (text with terminal control sequences), text (a text of
// {"bytes": N} bytes), limits (its rlimits, from /proc/self/limits), forks
// (how many of {"n": N} sleeping children it could start), relist (reads
// the file of changes again, then sends notifications/tools/list_changed),
// deaf and big.
func mcpServer(args []string) {
	opt := map[string]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		opt[k] = v
	}
	num := func(k string) int {
		if opt[k] == "" {
			return 0
		}
		n, err := strconv.Atoi(opt[k])
		check(err)
		return n
	}
	_, deaf := opt["deaf"]
	_, dup := opt["dup"]
	_, stay := opt["stay"]
	changes := ""
	for k := range opt {
		if strings.HasPrefix(k, "/") {
			changes = k
		}
	}
	listing := func() []json.RawMessage {
		return mcpChanged(mcpTools(num("tools"), num("schema"), num("big"), dup), changes)
	}
	tools := listing()
	time.Sleep(time.Duration(num("slowstart")) * time.Second)
	page := num("page")
	if page <= 0 {
		page = len(tools)
	}
	in := bufio.NewReaderSize(os.Stdin, 4096)
	out := bufio.NewWriter(os.Stdout)
	for {
		if _, err := in.Peek(1); err != nil {
			for stay { // stdin closed, and it does not care
				time.Sleep(time.Hour)
			}
			return
		}
		// The head of the next message: up to its newline or the
		// buffer's 4 KiB, however the writer split it into pieces.
		head, _ := in.Peek(in.Buffered())
		for !bytes.Contains(head, []byte("\n")) && len(head) < in.Size() {
			var err error
			if head, err = in.Peek(len(head) + 1); err != nil {
				break
			}
		}
		if deaf && bytes.Contains(head, []byte(`"method":"tools/call"`)) && bytes.Contains(head, []byte(`"name":"deaf"`)) {
			fmt.Fprintln(os.Stderr, "probe mcp: deaf from now on")
			for { // never read again; toolgate kills it
				time.Sleep(time.Hour)
			}
		}
		line, err := in.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			check(err)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if bytes.Contains(line, []byte(`"method":"tools/call"`)) && bytes.Contains(line, []byte(`"name":"relist"`)) {
				tools = listing()
				fmt.Fprintln(out, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
			}
			mcpAnswer(out, line, tools, page)
			check(out.Flush())
		}
		if err != nil {
			return
		}
	}
}

// mcpTools is the listing: the fixed tools, then the generated ones.
func mcpTools(n, schema, big int, dup bool) []json.RawMessage {
	open := `{"type":"object"}`
	tool := func(name, inputSchema string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"name":%q,"description":"The probe's %s.","inputSchema":%s}`, name, name, inputSchema))
	}
	padded := func(size int) string {
		if size <= len(open) {
			return open
		}
		// The padding is a description: the schema stays valid.
		return fmt.Sprintf(`{"type":"object","description":%q}`, strings.Repeat("p", size-32))
	}
	tools := []json.RawMessage{
		tool("echo", open), tool("pid", open), tool("escapes", open), tool("text", open),
		tool("limits", open), tool("forks", open), tool("deaf", open), tool("big", padded(big)), tool("relist", open),
	}
	if dup {
		tools = append(tools, tool("echo", `{"type":"object","description":"the second echo"}`))
	}
	for i := range n {
		tools = append(tools, tool(fmt.Sprintf("tool%05d", i), padded(schema)))
	}
	return tools
}

// mcpChanged applies the file of changes at path (none when "") to the
// listing.
func mcpChanged(tools []json.RawMessage, path string) []json.RawMessage {
	if path == "" {
		return tools
	}
	b, err := os.ReadFile(path)
	check(err)
	var changes map[string]map[string]json.RawMessage
	check(json.Unmarshal(b, &changes))
	out := make([]json.RawMessage, 0, len(tools)+len(changes))
	seen := map[string]bool{}
	apply := func(def map[string]json.RawMessage, name string) json.RawMessage {
		for k, v := range changes[name] {
			if string(v) == "null" {
				delete(def, k)
			} else {
				def[k] = v
			}
		}
		b, err := json.Marshal(def)
		check(err)
		return b
	}
	for _, raw := range tools {
		var def map[string]json.RawMessage
		check(json.Unmarshal(raw, &def))
		var name string
		check(json.Unmarshal(def["name"], &name))
		seen[name] = true
		out = append(out, apply(def, name))
	}
	names := make([]string, 0, len(changes))
	for name := range changes {
		if !seen[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		n, _ := json.Marshal(name)
		out = append(out, apply(map[string]json.RawMessage{"name": n, "inputSchema": json.RawMessage(`{"type":"object"}`)}, name))
	}
	return out
}

// Escapes is the text the escapes tool (and mode) writes: colour, an OSC 52
// clipboard write, an OSC 8 hyperlink, a carriage-return overwrite, a bidi
// override, a C1 CSI, a backspace and a bell, around a tab and newlines
// that must survive.
const Escapes = "\x1b[31mred\x1b[0m\tplain\n" +
	"\x1b]52;c;ZWNobyBwd25lZA==\x07clipboard\n" +
	"\x1b]8;;https://attacker.example/\x1b\\link\x1b]8;;\x1b\\\n" +
	"safe\rEVIL\n" +
	"\u202eevil\u202c bidi\n" +
	"\u009b31mc1\x08\x07 end\n"

func mcpAnswer(w io.Writer, line []byte, tools []json.RawMessage, page int) {
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			ProtocolVersion string          `json:"protocolVersion"`
			Cursor          string          `json:"cursor"`
			Name            string          `json:"name"`
			Arguments       json.RawMessage `json:"arguments"`
			Meta            struct {
				Traceparent string `json:"traceparent"`
			} `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(line, &req) != nil || len(req.ID) == 0 {
		return // a notification, or not JSON
	}
	result := func(v any) {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": v})
		w.Write(append(b, '\n'))
	}
	text := func(s string) {
		result(map[string]any{"content": []map[string]string{{"type": "text", "text": s}}})
	}
	switch req.Method {
	case "initialize":
		result(map[string]any{
			"protocolVersion": req.Params.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}},
			"serverInfo": map[string]string{"name": "probe", "version": "1"},
		})
	case "tools/list":
		from, _ := strconv.Atoi(req.Params.Cursor)
		to := min(from+page, len(tools))
		res := map[string]any{"tools": tools[from:to]}
		if to < len(tools) {
			res["nextCursor"] = strconv.Itoa(to)
		}
		result(res)
	case "tools/call":
		switch req.Params.Name {
		case "echo":
			if tp := req.Params.Meta.Traceparent; tp != "" {
				// The trace context the caller passed on (tracing e2e).
				text(fmt.Sprintf("echo: %d bytes of arguments; traceparent %s", len(req.Params.Arguments), tp))
				break
			}
			text(fmt.Sprintf("echo: %d bytes of arguments", len(req.Params.Arguments)))
		case "pid":
			text(strconv.Itoa(os.Getpid()))
		case "escapes":
			text(Escapes)
		case "text":
			var a struct {
				Bytes int `json:"bytes"`
			}
			json.Unmarshal(req.Params.Arguments, &a)
			text(strings.Repeat("a", a.Bytes))
		case "limits":
			text(rlimits())
		case "forks":
			var a struct {
				N int `json:"n"`
			}
			json.Unmarshal(req.Params.Arguments, &a)
			text(fmt.Sprintf("started %d of %d", forks(a.N), a.N))
		default:
			text(req.Params.Name + " ran")
		}
	case "ping":
		result(map[string]any{})
	default:
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
		w.Write(append(b, '\n'))
	}
}

// rlimits are the lines of /proc/self/limits that the sandbox sets.
func rlimits() string {
	b, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		return err.Error()
	}
	var out []string
	for l := range strings.SplitSeq(string(b), "\n") {
		for _, k := range []string{"Max open files", "Max processes", "Max core file size", "Max file size"} {
			if strings.HasPrefix(l, k) {
				out = append(out, strings.Join(strings.Fields(l), " "))
			}
		}
	}
	return strings.Join(out, "\n")
}

// forks starts up to n sleeping children, counts those that started, and
// kills them all.
func forks(n int) int {
	var started []*exec.Cmd
	for range n {
		c := self("forkbomb-child")
		if c.Start() != nil {
			break
		}
		started = append(started, c)
	}
	for _, c := range started {
		c.Process.Kill()
		c.Wait()
	}
	return len(started)
}
