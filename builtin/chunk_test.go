package builtin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// reassemble undoes splitDoc: the pieces' ranges must tile the document.
func reassemble(t *testing.T, data []byte, pieces []piece) []byte {
	t.Helper()
	var out []byte
	next := 0
	for i, p := range pieces {
		if p.start != next {
			t.Fatalf("piece %d starts at %d, want %d", i, p.start, next)
		}
		out = append(out, data[p.start:p.end]...)
		next = p.end
	}
	return out
}

func TestSplitDoc(t *testing.T) {
	lim := chunkLimits{bytes: 1000, lines: 20}
	for _, tc := range []struct {
		name      string
		data      string
		wantParts int
	}{
		{"small", "a\nb\n", 1},
		{"no final newline", "a\nb", 1},
		{"many lines", strings.Repeat("line\n", 100), 6},
		{"long lines", strings.Repeat(strings.Repeat("y", 300)+"\n", 10), 5},
		{"one huge line", strings.Repeat("z", 5000), 6},
		{"huge line of multibyte runes", strings.Repeat("é€", 1500), 0},
		{"mixed", "short\n" + strings.Repeat("w", 2500) + "\nshort\n" + strings.Repeat("l\n", 40), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.data)
			pieces := splitDoc("dir/file.txt", data, lim)
			if tc.wantParts > 0 && len(pieces) != tc.wantParts {
				t.Errorf("%d pieces, want %d", len(pieces), tc.wantParts)
			}
			if got := reassemble(t, data, pieces); !bytes.Equal(got, data) {
				t.Fatal("pieces do not reassemble into the document")
			}
			total := countLines(data)
			for i, p := range pieces {
				text := p.render(nil, data)
				if len(text) != p.size || bytes.Count(text, []byte("\n")) != p.lines {
					t.Errorf("piece %d: measured %d bytes %d lines, rendered %d bytes %d lines", i, p.size, p.lines, len(text), bytes.Count(text, []byte("\n")))
				}
				if p.size >= lim.bytes || p.lines >= lim.lines {
					t.Errorf("piece %d: %d bytes %d lines, limits %+v", i, p.size, p.lines, lim)
				}
				if !bytes.HasSuffix(text, []byte("\n")) || !strings.HasPrefix(string(text), "=== dir/file.txt (lines ") {
					t.Errorf("piece %d renders as %q", i, text)
				}
				if len(pieces) > 1 && (p.Part != i+1 || p.Parts != len(pieces)) {
					t.Errorf("piece %d: part %d of %d", i, p.Part, p.Parts)
				}
				if p.TotalLines != total || p.StartLine < 1 || p.EndLine < p.StartLine || p.EndLine > total {
					t.Errorf("piece %d: lines %d-%d of %d (document has %d)", i, p.StartLine, p.EndLine, p.TotalLines, total)
				}
				if !bytes.Equal(bytes.ToValidUTF8(text, nil), text) {
					t.Errorf("piece %d splits a rune", i)
				}
			}
		})
	}
}

func TestChunkerPacking(t *testing.T) {
	lim := chunkLimits{bytes: 400, lines: 12}
	docs := map[string]string{}
	var names []string
	for i := range 30 {
		name := fmt.Sprintf("f%02d.txt", i)
		names = append(names, name)
		docs[name] = strings.Repeat(fmt.Sprintf("line %d\n", i), i%5+1)
	}
	docs["f07.txt"] = strings.Repeat("a long line of text\n", 40) // sliced
	var all []string
	for want := 0; ; want++ {
		k := newChunker(lim, want)
		for _, n := range names {
			k.add(n, []byte(docs[n]))
		}
		chunks, digest := k.finish()
		if want == 0 {
			if len(chunks) < 5 {
				t.Fatalf("only %d chunks", len(chunks))
			}
			for i, c := range chunks {
				if c.Index != i+1 || c.Bytes >= lim.bytes || c.Lines >= lim.lines || len(c.Files) == 0 {
					t.Errorf("chunk %+v breaks the limits %+v", c, lim)
				}
			}
			all = make([]string, len(chunks))
			continue
		}
		if want > len(chunks) {
			if len(k.text) != 0 {
				t.Fatal("text kept for a chunk that does not exist")
			}
			break
		}
		c := chunks[want-1]
		sum := sha256.Sum256(k.text)
		if len(k.text) != c.Bytes || bytes.Count(k.text, []byte("\n")) != c.Lines || hex.EncodeToString(sum[:]) != c.SHA256 {
			t.Errorf("chunk %d text: %d bytes, %d lines; described %+v", want, len(k.text), bytes.Count(k.text, []byte("\n")), c)
		}
		all[want-1] = string(k.text)
		_ = digest
	}
	// Every document is in the chunks, in order, once.
	var got strings.Builder
	header := regexp.MustCompile(`(?m)^=== .* ===\n`)
	for _, c := range all {
		got.WriteString(header.ReplaceAllString(c, ""))
	}
	var want strings.Builder
	for _, n := range names {
		want.WriteString(docs[n])
	}
	if got.String() != want.String() {
		t.Error("the chunks' contents, headers removed, are not the documents in order")
	}
}

func TestChunkerDeterministic(t *testing.T) {
	run := func() ([]ChunkInfo, string) {
		k := newChunker(defaultChunkLimits, 0)
		for i := range 50 {
			k.add("f"+strconv.Itoa(i), bytes.Repeat([]byte("data line\n"), 1000*i)) // f0 is empty: no piece
		}
		return k.finish()
	}
	c1, d1 := run()
	c2, d2 := run()
	if d1 != d2 || fmt.Sprint(c1) != fmt.Sprint(c2) {
		t.Fatal("the same input gave different chunks")
	}
}
