package builtin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var pieceHeaderRE = regexp.MustCompile(`(?m)^=== (.*) \(lines (\d+)-(\d+) of (\d+)(?:, part (\d+) of (\d+))?\) ===\n`)

// fetchAll lists the chunks of a scope and fetches each by index,
// checking every limit and description. It returns the list and the
// texts.
func fetchAll(t *testing.T, tools map[string]Tool, tool, extra string) (ChunkList, []string) {
	t.Helper()
	listArgs := "{" + extra + "}"
	res := call(t, tools, tool, listArgs)
	if res.IsError {
		t.Fatalf("%s(%s): %s", tool, listArgs, res.Text)
	}
	var l ChunkList
	switch v := res.Structured.(type) {
	case ChunkList:
		l = v
	case DiffChunkList:
		l = v.ChunkList
	}
	if l.Cut || len(l.Chunks) != l.TotalChunks {
		t.Fatalf("list cut: %d of %d", len(l.Chunks), l.TotalChunks)
	}
	var texts []string
	for _, c := range l.Chunks {
		sep := ""
		if extra != "" {
			sep = ","
		}
		args := fmt.Sprintf(`{%s%s"index":%d}`, extra, sep, c.Index)
		r := call(t, tools, tool, args)
		if r.IsError {
			t.Fatalf("%s(%s): %s", tool, args, r.Text)
		}
		text := r.Text
		sum := sha256.Sum256([]byte(text))
		switch {
		case len(text) >= MaxChunkBytes:
			t.Errorf("chunk %d: %d bytes, not below %d", c.Index, len(text), MaxChunkBytes)
		case strings.Count(text, "\n") >= MaxChunkLines:
			t.Errorf("chunk %d: %d lines, not below %d", c.Index, strings.Count(text, "\n"), MaxChunkLines)
		case len(text) != c.Bytes || strings.Count(text, "\n") != c.Lines || hex.EncodeToString(sum[:]) != c.SHA256:
			t.Errorf("chunk %d text does not match its description %+v", c.Index, c)
		}
		var st ChunkText
		switch v := r.Structured.(type) {
		case ChunkText:
			st = v
		case DiffChunkText:
			st = v.ChunkText
		}
		if st.Text != text || st.Digest != l.Digest || st.TotalChunks != l.TotalChunks || st.Cut {
			t.Errorf("chunk %d structured content disagrees with the list", c.Index)
		}
		texts = append(texts, text)
	}
	return l, texts
}

// contents rebuilds each document from chunk texts, by header.
func contents(t *testing.T, texts []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, text := range texts {
		locs := pieceHeaderRE.FindAllStringSubmatchIndex(text, -1)
		for i, loc := range locs {
			name := text[loc[2]:loc[3]]
			end := len(text)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			out[name] += text[loc[1]:end]
		}
	}
	return out
}

func TestRepoChunksFixture(t *testing.T) {
	root := makeFixture(t)
	tools := testTools(t, root, "")
	l, texts := fetchAll(t, tools, "repo_chunks", "")
	if l.TotalFiles != 14 {
		t.Errorf("total_files %d, want 14", l.TotalFiles)
	}
	// The sliced files: 400 KiB, 30,000 lines, a 300 KiB line.
	parts := map[string]int{}
	for _, c := range l.Chunks {
		for _, f := range c.Files {
			parts[f.Path] = max(parts[f.Path], f.Parts)
		}
	}
	for _, p := range []string{"big/medium.txt", "big/many-lines.md", "big/one-line.js"} {
		if parts[p] < 2 {
			t.Errorf("%s was not sliced: %d parts", p, parts[p])
		}
	}
	// Every collected file is in the chunks whole (a sliced single line
	// gains a newline per cut), and nothing else is.
	got := contents(t, texts)
	m := call(t, tools, "repo_manifest", `{}`).Structured.(Manifest)
	if len(got) != len(m.Files) {
		t.Errorf("%d documents in chunks, %d collected", len(got), len(m.Files))
	}
	for _, f := range m.Files {
		b, err := os.ReadFile(filepath.Join(root, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		want := string(b)
		if !strings.HasSuffix(want, "\n") {
			want += "\n"
		}
		g := got[f.Path]
		if f.Path == "big/one-line.js" {
			g = strings.ReplaceAll(g, "\n", "") + "\n"
		}
		if g != want {
			t.Errorf("%s: chunked content differs from the file (%d vs %d bytes)", f.Path, len(g), len(want))
		}
	}
	checkGolden(t, "chunks_fixture_list.json", mustJSON(t, l))

	// One small chunk's text, golden.
	src := call(t, tools, "repo_chunks", `{"path":"src","index":1}`)
	checkGolden(t, "chunks_fixture_src_1.txt", []byte(src.Text))
	checkGolden(t, "chunks_fixture_src_1.json", mustJSON(t, src.Structured))

	// Byte-identical output for the same tree elsewhere.
	l2, texts2 := fetchAll(t, testTools(t, makeFixture(t), ""), "repo_chunks", "")
	if l2.Digest != l.Digest || strings.Join(texts2, "") != strings.Join(texts, "") {
		t.Error("repo_chunks differs between two copies of the same tree")
	}
}

func TestRepoChunksArgs(t *testing.T) {
	root := makeFixture(t)
	tools := testTools(t, root, "")
	for _, tc := range []struct {
		name, args, wantErr string
	}{
		{"index zero", `{"index":0}`, "want 1 or more"},
		{"index negative", `{"index":-3}`, "want 1 or more"},
		{"index out of range", `{"path":"src","index":99}`, "out of range: there are 1 chunks"},
		{"index as string", `{"index":"1"}`, "want integer"},
		{"unknown property", `{"chunk":1}`, `unknown property "chunk"`},
		{"traversal", `{"path":"../repo"}`, "parent traversal"},
		{"escaping symlink", `{"path":"dir-outside"}`, "outside the workspace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, call(t, tools, "repo_chunks", tc.args), tc.wantErr)
		})
	}
	// Accepting: absolute inside, a symlinked directory inside.
	symlink(t, "src/util", filepath.Join(root, "util-link"))
	for _, args := range []string{`{"path":"` + filepath.Join(root, "src/util") + `"}`, `{"path":"util-link"}`} {
		res := call(t, tools, "repo_chunks", args)
		if res.IsError || res.Structured.(ChunkList).TotalFiles != 1 {
			t.Errorf("repo_chunks(%s) = %s", args, res.Text)
		}
	}
}

// TestRepoChunksProject chunks the project's own checkout. Other work may
// change files between calls, so determinism is checked with retries.
func TestRepoChunksProject(t *testing.T) {
	root := projectRoot(t)
	tools := testTools(t, root, "")
	var l ChunkList
	var texts []string
	for attempt := 0; ; attempt++ {
		l, texts = fetchAll(t, tools, "repo_chunks", "")
		again := call(t, tools, "repo_chunks", `{}`).Structured.(ChunkList)
		if again.Digest == l.Digest {
			break
		}
		if attempt == 3 {
			t.Fatal("the project checkout gave a different digest on every try")
		}
	}
	if l.TotalChunks == 0 || l.TotalFiles < 20 {
		t.Fatalf("%d chunks of %d files", l.TotalChunks, l.TotalFiles)
	}
	docs := contents(t, texts)
	if !strings.Contains(docs["builtin/chunk.go"], "func splitDoc(") {
		t.Error("builtin/chunk.go is not in the chunks of the project checkout")
	}
	if _, ok := docs["go.sum"]; ok {
		t.Error("go.sum (a lockfile) is in the chunks")
	}
	for name := range docs {
		if strings.HasPrefix(name, ".") {
			t.Errorf("hidden path %s is in the chunks", name)
		}
	}
}
