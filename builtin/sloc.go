package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// sloc limits.
const (
	slocTimeout   = 60 * time.Second
	slocMaxStdout = 16 << 20
	slocMaxPaths  = 64
)

// SlocCount is a line count: code, comments and blank lines.
type SlocCount struct {
	Files    int `json:"files"`
	Code     int `json:"code"`
	Comments int `json:"comments"`
	Blanks   int `json:"blanks"`
	Lines    int `json:"lines"`
}

// SlocLanguage is the count of one language.
type SlocLanguage struct {
	Language string `json:"language"`
	SlocCount
}

// SlocFile is the count of one file.
type SlocFile struct {
	Path     string `json:"path"`
	Language string `json:"language"`
	Code     int    `json:"code"`
	Comments int    `json:"comments"`
	Blanks   int    `json:"blanks"`
}

// Sloc is sloc's structured result.
type Sloc struct {
	Paths       []string       `json:"paths"`
	Totals      SlocCount      `json:"totals"`
	Languages   []SlocLanguage `json:"languages"`
	Files       []SlocFile     `json:"files"`
	Cut         bool           `json:"cut"`
	BudgetBytes int            `json:"budget_bytes"`
}

type slocArgs struct {
	Paths *[]string `json:"paths"`
}

var slocInputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "paths": {"type": "array", "minItems": 1, "maxItems": 64, "items": {"type": "string"},
      "description": "files or directories to count: workspace-relative, or absolute inside the workspace; default [\".\"]"}
  },
  "additionalProperties": false
}`)

var slocOutputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "paths": {"type": "array", "items": {"type": "string"}},
    "totals": {"type": "object", "properties": {
      "files": {"type": "integer"}, "code": {"type": "integer"}, "comments": {"type": "integer"},
      "blanks": {"type": "integer"}, "lines": {"type": "integer"}},
      "required": ["files", "code", "comments", "blanks", "lines"], "additionalProperties": false},
    "languages": {"type": "array", "items": {"type": "object", "properties": {
      "language": {"type": "string"}, "files": {"type": "integer"}, "code": {"type": "integer"},
      "comments": {"type": "integer"}, "blanks": {"type": "integer"}, "lines": {"type": "integer"}},
      "required": ["language", "files", "code", "comments", "blanks", "lines"], "additionalProperties": false}},
    "files": {"type": "array", "items": {"type": "object", "properties": {
      "path": {"type": "string"}, "language": {"type": "string"}, "code": {"type": "integer"},
      "comments": {"type": "integer"}, "blanks": {"type": "integer"}},
      "required": ["path", "language", "code", "comments", "blanks"], "additionalProperties": false}},
    "cut": {"type": "boolean", "description": "the per-file list was cut to the byte budget; totals are complete"},
    "budget_bytes": {"type": "integer"}
  },
  "required": ["paths", "totals", "languages", "files", "cut", "budget_bytes"],
  "additionalProperties": false
}`)

func slocTool(e *env) Tool {
	return Tool{
		Name:  "sloc",
		Group: GroupHelpers,
		Description: "Count lines of code, comments and blanks per language and per file with tokei (served only " +
			"when tokei was found at start-up). tokei runs in the workspace on the given paths (inside the " +
			"workspace only), honouring .gitignore and skipping hidden files, with stdin closed, " +
			fmt.Sprintf("a %s timeout and its output capped at %d bytes. Byte budget: %d bytes of text and of structured "+
				"content each; past it the per-file list is cut (cut: true) while totals stay complete.",
				slocTimeout, slocMaxStdout, BudgetSloc),
		InputSchema:  slocInputSchema,
		OutputSchema: slocOutputSchema,
		Handler: func(ctx context.Context, args json.RawMessage) (Result, error) {
			var a slocArgs
			if err := decodeArgs(args, &a); err != nil {
				return Errorf("sloc: %v", err), nil
			}
			paths := []string{"."}
			if a.Paths != nil {
				if len(*a.Paths) == 0 || len(*a.Paths) > slocMaxPaths {
					return Errorf("sloc: paths: want 1 to %d paths, got %d", slocMaxPaths, len(*a.Paths)), nil
				}
				paths = *a.Paths
			}
			var rels []string
			for _, p := range paths {
				rel, err := e.ws.Resolve(p)
				if err != nil {
					return Errorf("sloc: %v", err), nil
				}
				if !slices.Contains(rels, rel) {
					rels = append(rels, rel)
				}
			}
			slices.Sort(rels)
			return e.sloc(ctx, rels)
		},
	}
}

// tokeiLanguage is one language of `tokei --output json`.
type tokeiLanguage struct {
	Blanks   int           `json:"blanks"`
	Code     int           `json:"code"`
	Comments int           `json:"comments"`
	Reports  []tokeiReport `json:"reports"`
}

type tokeiReport struct {
	Name  string `json:"name"`
	Stats struct {
		Blanks   int `json:"blanks"`
		Code     int `json:"code"`
		Comments int `json:"comments"`
	} `json:"stats"`
}

// tokeiPrefix are the arguments of every tokei run, before its paths.
var tokeiPrefix = []string{"--output", "json"}

// tokeiArg turns a workspace path into an argument tokei cannot take for
// an option: always "./"-prefixed.
func tokeiArg(rel string) string {
	if rel == "." {
		return "./"
	}
	return "./" + rel
}

func (e *env) sloc(ctx context.Context, rels []string) (Result, error) {
	args := slices.Clone(tokeiPrefix)
	for _, r := range rels {
		args = append(args, tokeiArg(r))
	}
	tokei, err := e.openHelper(ctx, HelperTokei)
	if err != nil {
		return Errorf("sloc: %v", err), nil
	}
	defer tokei.close()
	res, err := tokei.run(ctx, args, slocTimeout, slocMaxStdout)
	if err != nil {
		return Errorf("sloc: %v", err), nil
	}
	if res.Failed() {
		return Errorf("sloc: %s", helperFailure("tokei", res)), nil
	}
	if res.StdoutCut {
		return Errorf("sloc: tokei printed more than %d bytes; count fewer paths", slocMaxStdout), nil
	}
	var out map[string]tokeiLanguage
	if err := json.Unmarshal(res.Stdout, &out); err != nil {
		return Errorf("sloc: tokei output is not the expected JSON: %v", err), nil
	}
	s := Sloc{Paths: rels, Languages: []SlocLanguage{}, BudgetBytes: BudgetSloc}
	var files []SlocFile
	for name, l := range out {
		if name == "Total" {
			continue
		}
		sl := SlocLanguage{Language: name, SlocCount: SlocCount{Files: len(l.Reports), Code: l.Code, Comments: l.Comments, Blanks: l.Blanks}}
		sl.Lines = sl.Code + sl.Comments + sl.Blanks
		if sl.Files == 0 && sl.Lines == 0 {
			continue
		}
		s.Languages = append(s.Languages, sl)
		s.Totals.Files += sl.Files
		s.Totals.Code += sl.Code
		s.Totals.Comments += sl.Comments
		s.Totals.Blanks += sl.Blanks
		for _, r := range l.Reports {
			files = append(files, SlocFile{
				Path: strings.TrimPrefix(r.Name, "./"), Language: name,
				Code: r.Stats.Code, Comments: r.Stats.Comments, Blanks: r.Stats.Blanks,
			})
		}
	}
	s.Totals.Lines = s.Totals.Code + s.Totals.Comments + s.Totals.Blanks
	slices.SortFunc(s.Languages, func(a, b SlocLanguage) int {
		if a.Code != b.Code {
			return b.Code - a.Code
		}
		return strings.Compare(a.Language, b.Language)
	})
	slices.SortFunc(files, func(a, b SlocFile) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Language, b.Language)
	})
	take := func(k int) Sloc {
		v := s
		v.Files = firstN(files, k)
		v.Cut = k < len(files)
		return v
	}
	return fit(len(files), BudgetSloc, take, Sloc.text), nil
}

func (s Sloc) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sloc %s: %s, %d code, %d comments, %d blanks\n", strings.Join(s.Paths, " "),
		count(s.Totals.Files, "file"), s.Totals.Code, s.Totals.Comments, s.Totals.Blanks)
	for _, l := range s.Languages {
		fmt.Fprintf(&b, "  %s: %s, %d code, %d comments, %d blanks\n", l.Language, count(l.Files, "file"), l.Code, l.Comments, l.Blanks)
	}
	b.WriteString("files:\n")
	for _, f := range s.Files {
		fmt.Fprintf(&b, "  %s (%s): %d code, %d comments, %d blanks\n", f.Path, f.Language, f.Code, f.Comments, f.Blanks)
	}
	if s.Cut {
		fmt.Fprintf(&b, "[cut: listed %d of %d files to stay within %d bytes; totals are complete]\n", len(s.Files), s.Totals.Files, s.BudgetBytes)
	}
	return b.String()
}
