package builtin

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// outline limits.
const (
	outlineTimeout   = 20 * time.Second
	outlineMaxStdout = 8 << 20
	// OutlineMaxSource is the largest source file outline reads.
	OutlineMaxSource = 8 << 20
)

// Symbol is one definition ctags found.
type Symbol struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Line      int    `json:"line"`
	End       int    `json:"end,omitempty"`
	Scope     string `json:"scope,omitempty"`
	ScopeKind string `json:"scope_kind,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// Outline is outline's structured result.
type Outline struct {
	Path         string   `json:"path"`
	Language     string   `json:"language"`
	TotalSymbols int      `json:"total_symbols"`
	Symbols      []Symbol `json:"symbols"`
	Cut          bool     `json:"cut"`
	BudgetBytes  int      `json:"budget_bytes"`
}

type outlineArgs struct {
	Path *string `json:"path"`
}

var outlineInputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "one source file: workspace-relative, or absolute inside the workspace"}
  },
  "required": ["path"],
  "additionalProperties": false
}`)

var outlineOutputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "language": {"type": "string"},
    "total_symbols": {"type": "integer"},
    "symbols": {"type": "array", "items": {"type": "object", "properties": {
      "name": {"type": "string"}, "kind": {"type": "string"}, "line": {"type": "integer"},
      "end": {"type": "integer"}, "scope": {"type": "string"}, "scope_kind": {"type": "string"},
      "signature": {"type": "string"}},
      "required": ["name", "kind", "line"], "additionalProperties": false}},
    "cut": {"type": "boolean", "description": "symbols were cut to the byte budget; total_symbols is complete"},
    "budget_bytes": {"type": "integer"}
  },
  "required": ["path", "language", "total_symbols", "symbols", "cut", "budget_bytes"],
  "additionalProperties": false
}`)

func outlineTool(e *env) Tool {
	return Tool{
		Name:  "outline",
		Group: GroupHelpers,
		Description: "List the definitions (functions, types, methods, members, ...) in one source file with " +
			"Universal Ctags (served only when it was found at start-up), sorted by line. The file must be a " +
			"regular file inside the workspace (relative, or absolute inside it; no \"..\", no symlink leading out, " +
			fmt.Sprintf("no hidden or likely-secret file, at most %d bytes); toolgate reads it once and hands its text to ", OutlineMaxSource) +
			"ctags on stdin (ctags opens no path), which runs sandboxed with --options=NONE (no option files), " +
			fmt.Sprintf("a %s timeout and its output capped at %d bytes. Byte budget: %d bytes of text and of "+
				"structured content each; past it symbols are cut (cut: true).", outlineTimeout, outlineMaxStdout, BudgetOutline),
		InputSchema:  outlineInputSchema,
		OutputSchema: outlineOutputSchema,
		Handler: func(ctx context.Context, args json.RawMessage) (Result, error) {
			var a outlineArgs
			if err := decodeArgs(args, &a); err != nil {
				return Errorf("outline: %v", err), nil
			}
			if a.Path == nil {
				return Errorf("outline: arguments: missing required property %q", "path"), nil
			}
			rel, err := e.resolveReadable(*a.Path)
			if err != nil {
				return Errorf("outline: %v", err), nil
			}
			return e.outline(ctx, rel)
		},
	}
}

// ctagsTag is one line of `ctags --output-format=json`.
type ctagsTag struct {
	Type      string `json:"_type"`
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Line      int    `json:"line"`
	End       int    `json:"end"`
	Scope     string `json:"scope"`
	ScopeKind string `json:"scopeKind"`
	Signature string `json:"signature"`
	Message   string `json:"message"`
}

// ctagsRequest is the interactive-mode command that hands ctags a file's
// text on stdin: ctags reads size bytes after the line and opens no path
// (filename only picks the language and names the tags).
type ctagsRequest struct {
	Command  string `json:"command"`
	Filename string `json:"filename"`
	Size     int    `json:"size"`
}

// ctagsArgs are ctags's arguments for outline (--options=NONE must come
// first). They are the same for every call (the file arrives on stdin), so
// a sandbox can be prepared for them ahead of the call (PoolTemplates).
var ctagsArgs = []string{"--options=NONE", "--_interactive", "--output-format=json", "--fields=+nKSe", "--sort=no"}

func (e *env) outline(ctx context.Context, rel string) (Result, error) {
	// The file is opened once, through the workspace root (no symlink can
	// lead out of it, however the tree changes), and checked on the open
	// descriptor: no path is left for anyone to race.
	src, _, cut, err := e.ws.ReadFile(rel, OutlineMaxSource)
	if err != nil {
		return Errorf("outline: %v", err), nil
	}
	if cut {
		return Errorf("outline: %q is larger than %d bytes", rel, OutlineMaxSource), nil
	}
	req, err := json.Marshal(ctagsRequest{Command: "generate-tags", Filename: rel, Size: len(src)})
	if err != nil {
		return Result{}, err
	}
	stdin := append(append(req, '\n'), src...)
	res, err := e.runHelper(ctx, HelperCtags, ctagsArgs, outlineTimeout, outlineMaxStdout, stdin)
	if err != nil {
		return Errorf("outline: %v", err), nil
	}
	if res.Failed() {
		return Errorf("outline: %s", helperFailure("ctags", res)), nil
	}
	if res.StdoutCut {
		return Errorf("outline: ctags printed more than %d bytes", outlineMaxStdout), nil
	}
	var syms []Symbol
	completed := false
	sc := bufio.NewScanner(bytes.NewReader(res.Stdout))
	sc.Buffer(make([]byte, 0, 64<<10), outlineMaxStdout)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var t ctagsTag
		if err := json.Unmarshal(line, &t); err != nil {
			return Errorf("outline: ctags output is not the expected JSON: %v", err), nil
		}
		switch t.Type {
		case "completed":
			completed = true
			continue
		case "error":
			return Errorf("outline: ctags: %s", t.Message), nil
		case "tag":
		default:
			continue
		}
		syms = append(syms, Symbol{
			Name: t.Name, Kind: t.Kind, Line: t.Line, End: t.End, Scope: t.Scope,
			ScopeKind: t.ScopeKind, Signature: t.Signature,
		})
	}
	if err := sc.Err(); err != nil {
		return Errorf("outline: reading ctags output: %v", err), nil
	}
	if !completed {
		return Errorf("outline: ctags did not complete the file"), nil
	}
	slices.SortFunc(syms, func(a, b Symbol) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), strings.Compare(a.Name, b.Name), strings.Compare(a.Kind, b.Kind),
			strings.Compare(a.Scope, b.Scope))
	})
	syms = slices.Compact(syms)
	o := Outline{Path: rel, Language: Language(rel), TotalSymbols: len(syms), BudgetBytes: BudgetOutline}
	take := func(k int) Outline {
		v := o
		v.Symbols = firstN(syms, k)
		v.Cut = k < len(syms)
		return v
	}
	return fit(len(syms), BudgetOutline, take, Outline.text), nil
}

func (o Outline) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "outline %s (%s): %s\n", o.Path, o.Language, count(o.TotalSymbols, "symbol"))
	for _, s := range o.Symbols {
		fmt.Fprintf(&b, "  %d", s.Line)
		if s.End > 0 {
			fmt.Fprintf(&b, "-%d", s.End)
		}
		fmt.Fprintf(&b, " %s %s", s.Kind, s.Name)
		if s.Signature != "" {
			b.WriteString(s.Signature)
		}
		if s.Scope != "" {
			fmt.Fprintf(&b, " in %s %s", s.ScopeKind, s.Scope)
		}
		b.WriteString("\n")
	}
	if o.Cut {
		fmt.Fprintf(&b, "[cut: listed %d of %d symbols to stay within %d bytes]\n", len(o.Symbols), o.TotalSymbols, o.BudgetBytes)
	}
	return b.String()
}
