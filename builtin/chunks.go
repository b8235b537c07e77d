package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// ChunkList is the structured result of repo_chunks and git_diff_input
// without an index: every chunk's description.
type ChunkList struct {
	Scope       string      `json:"scope,omitempty"`
	TotalChunks int         `json:"total_chunks"`
	TotalFiles  int         `json:"total_files"`
	Digest      string      `json:"digest"`
	Chunks      []ChunkInfo `json:"chunks"`
	Skipped     []SkipCount `json:"skipped,omitempty"`
	Cut         bool        `json:"cut"`
	BudgetBytes int         `json:"budget_bytes"`
}

// ChunkText is the structured result of repo_chunks and git_diff_input
// with an index: one chunk's text.
type ChunkText struct {
	Scope       string      `json:"scope,omitempty"`
	Index       int         `json:"index"`
	TotalChunks int         `json:"total_chunks"`
	Digest      string      `json:"digest"`
	Bytes       int         `json:"bytes"`
	Lines       int         `json:"lines"`
	SHA256      string      `json:"sha256"`
	Files       []ChunkFile `json:"files"`
	Text        string      `json:"text"`
	Cut         bool        `json:"cut"`
	BudgetBytes int         `json:"budget_bytes"`
}

type chunksArgs struct {
	Path  *string `json:"path"`
	Index *int    `json:"index"`
}

var chunksInputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "directory to chunk: workspace-relative, or absolute inside the workspace; default \".\" (the whole workspace)"},
    "index": {"type": "integer", "minimum": 1, "description": "1-based chunk to return the text of; omit to list the chunks"}
  },
  "additionalProperties": false
}`)

const chunkFileSchema = `{"type": "object", "properties": {
      "path": {"type": "string"}, "start_line": {"type": "integer"}, "end_line": {"type": "integer"},
      "total_lines": {"type": "integer"}, "part": {"type": "integer"}, "parts": {"type": "integer"}},
      "required": ["path", "start_line", "end_line", "total_lines"], "additionalProperties": false}`

// chunksOutputSchema is shared by repo_chunks and git_diff_input: one of
// the list shape (chunks) or the text shape (index, text); extra holds the
// tool's own properties.
func chunksOutputSchema(extra string) json.RawMessage {
	return json.RawMessage(`{
  "type": "object",
  "properties": {` + extra + `
    "scope": {"type": "string"},
    "total_chunks": {"type": "integer", "minimum": 0},
    "total_files": {"type": "integer", "minimum": 0},
    "digest": {"type": "string", "description": "sha256 over every chunk's index and sha256: equal digests, equal chunks"},
    "chunks": {"type": "array", "items": {"type": "object", "properties": {
      "index": {"type": "integer", "minimum": 1}, "bytes": {"type": "integer"}, "lines": {"type": "integer"},
      "sha256": {"type": "string"}, "files": {"type": "array", "items": ` + chunkFileSchema + `}},
      "required": ["index", "bytes", "lines", "sha256", "files"], "additionalProperties": false}},
    "skipped": {"type": "array", "items": ` + skipCountSchema + `},
    "index": {"type": "integer", "minimum": 1},
    "bytes": {"type": "integer"},
    "lines": {"type": "integer"},
    "sha256": {"type": "string"},
    "files": {"type": "array", "items": ` + chunkFileSchema + `},
    "text": {"type": "string"},
    "cut": {"type": "boolean", "description": "a list was cut to the byte budget"},
    "budget_bytes": {"type": "integer"}
  },
  "required": ["total_chunks", "digest", "cut", "budget_bytes"],
  "additionalProperties": false
}`)
}

func repoChunksTool(e *env) Tool {
	return Tool{
		Name:  "repo_chunks",
		Group: GroupRepo,
		Description: "Split the files repo_manifest collects (same skip rules) into deterministic chunks: files in " +
			"collection order, each chunk's text below 240 KiB and 19,000 lines, a larger file sliced into parts. " +
			"The same workspace always gives byte-identical chunks and the same digest. Without index: list the " +
			"chunks (files and line ranges, bytes, sha256). With index (1-based): return that chunk's text, each " +
			"file preceded by a line \"=== PATH (lines A-B of N) ===\". " +
			fmt.Sprintf("Byte budget: %d bytes of text and of structured content each (a chunk's text counted raw, "+
				"before JSON escaping); a list past it is cut (cut: true), a chunk's text never is.", BudgetChunks),
		InputSchema:  chunksInputSchema,
		OutputSchema: chunksOutputSchema(""),
		Handler: func(ctx context.Context, args json.RawMessage) (Result, error) {
			var a chunksArgs
			if err := decodeArgs(args, &a); err != nil {
				return Errorf("repo_chunks: %v", err), nil
			}
			if a.Index != nil && *a.Index < 1 {
				return Errorf("repo_chunks: index %d: want 1 or more", *a.Index), nil
			}
			scope := "."
			if a.Path != nil {
				s, err := e.ws.Resolve(*a.Path)
				if err != nil {
					return Errorf("repo_chunks: %v", err), nil
				}
				scope = s
			}
			want := 0
			if a.Index != nil {
				want = *a.Index
			}
			k := newChunker(defaultChunkLimits, want)
			files := 0
			skipped, err := collect(ctx, e.ws, scope, func(f collectedFile, data []byte) error {
				files++
				k.add(f.Path, data)
				return nil
			})
			if err != nil {
				return Errorf("repo_chunks: %v", err), nil
			}
			chunks, digest := k.finish()
			if a.Index == nil {
				return chunkListResult("repo_chunks", ChunkList{
					Scope: scope, TotalChunks: len(chunks), TotalFiles: files,
					Digest: digest, Chunks: chunks, Skipped: skipped.list(),
				}), nil
			}
			return chunkTextResult("repo_chunks", scope, want, chunks, digest, k.text)
		},
	}
}

// chunkListResult budgets a chunk list: past the budget, trailing chunks'
// descriptions are dropped (cut: true); total_chunks stays exact.
func chunkListResult(tool string, l ChunkList) Result {
	all := l.Chunks
	take := func(k int) ChunkList {
		v := l
		v.Chunks = firstN(all, k)
		v.Cut = k < len(all)
		v.BudgetBytes = BudgetChunks
		return v
	}
	return fit(len(all), BudgetChunks, take, func(v ChunkList) string { return v.text(tool) })
}

func (l ChunkList) text(tool string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s of %s, digest %s\n", tool, count(l.TotalChunks, "chunk"), count(l.TotalFiles, "file"), l.Digest)
	for _, c := range l.Chunks {
		fmt.Fprintf(&b, "chunk %d: %d bytes, %d lines, sha256 %s\n", c.Index, c.Bytes, c.Lines, c.SHA256)
		for _, f := range c.Files {
			fmt.Fprintf(&b, "  %s lines %d-%d of %d", f.Path, f.StartLine, f.EndLine, f.TotalLines)
			if f.Parts > 0 {
				fmt.Fprintf(&b, " (part %d of %d)", f.Part, f.Parts)
			}
			b.WriteString("\n")
		}
	}
	for _, s := range l.Skipped {
		fmt.Fprintf(&b, "skipped %s: %s, %s\n", s.Reason, count(s.Files, "file"), count(s.Dirs, "dir"))
	}
	if l.Cut {
		fmt.Fprintf(&b, "[cut: described %d of %d chunks to stay within %d bytes; ask for any chunk by index]\n",
			len(l.Chunks), l.TotalChunks, l.BudgetBytes)
	}
	return b.String()
}

// chunkTextResult returns one chunk's text. The text is complete; the
// structured file list is cut if the budget demands it.
func chunkTextResult(tool, scope string, index int, chunks []ChunkInfo, digest string, text []byte) (Result, error) {
	if index > len(chunks) {
		return Errorf("%s: index %d out of range: there are %d chunks", tool, index, len(chunks)), nil
	}
	c := chunks[index-1]
	if len(text) != c.Bytes {
		return Result{}, fmt.Errorf("%s: chunk %d rendered %d bytes, planned %d", tool, index, len(text), c.Bytes)
	}
	take := func(k int) ChunkText {
		return ChunkText{
			Scope: scope, Index: index, TotalChunks: len(chunks), Digest: digest, Bytes: c.Bytes,
			Lines: c.Lines, SHA256: c.SHA256, Files: firstN(c.Files, k), Text: string(text),
			Cut: k < len(c.Files), BudgetBytes: BudgetChunks,
		}
	}
	// The text counts once at its raw size: JSON escaping in structured
	// content may lengthen it, and it is never cut.
	k := fitCount(len(c.Files), BudgetChunks, func(k int) int {
		v := take(k)
		v.Text = ""
		return jsonSize(v) + len(text)
	})
	return Result{Text: string(text), Structured: take(k)}, nil
}
