package builtin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"unicode/utf8"
)

// Chunk limits: every chunk's text is strictly below both.
const (
	MaxChunkBytes = 240 << 10
	MaxChunkLines = 19000
)

// chunkLimits are exclusive upper bounds of a chunk's text.
type chunkLimits struct{ bytes, lines int }

var defaultChunkLimits = chunkLimits{bytes: MaxChunkBytes, lines: MaxChunkLines}

// ChunkFile is one file, or one slice of one, inside a chunk. Lines are
// 1-based and inclusive; Part and Parts are set when the file was sliced.
type ChunkFile struct {
	Path       string `json:"path"`
	StartLine  int    `json:"start_line"`
	EndLine    int    `json:"end_line"`
	TotalLines int    `json:"total_lines"`
	Part       int    `json:"part,omitempty"`
	Parts      int    `json:"parts,omitempty"`
}

// ChunkInfo describes one chunk: its 1-based index, the size of its text
// and the files in it, in order.
type ChunkInfo struct {
	Index  int         `json:"index"`
	Bytes  int         `json:"bytes"`
	Lines  int         `json:"lines"`
	SHA256 string      `json:"sha256"`
	Files  []ChunkFile `json:"files"`
}

// piece is a ChunkFile with where its text comes from.
type piece struct {
	ChunkFile
	start, end int  // byte range of the source
	addNL      bool // the range does not end in a newline: one is added
	size       int  // rendered bytes, header included
	lines      int  // rendered lines, header included
}

func pieceHeader(f ChunkFile) string {
	if f.Parts > 0 {
		return fmt.Sprintf("=== %s (lines %d-%d of %d, part %d of %d) ===\n",
			f.Path, f.StartLine, f.EndLine, f.TotalLines, f.Part, f.Parts)
	}
	return fmt.Sprintf("=== %s (lines %d-%d of %d) ===\n", f.Path, f.StartLine, f.EndLine, f.TotalLines)
}

// render appends the piece's text to b.
func (p *piece) render(b []byte, data []byte) []byte {
	b = append(b, pieceHeader(p.ChunkFile)...)
	b = append(b, data[p.start:p.end]...)
	if p.addNL {
		b = append(b, '\n')
	}
	return b
}

// splitDoc cuts one document into pieces that each fit an empty chunk:
// whole when it fits, otherwise at line boundaries, and a line longer than
// a chunk at UTF-8 rune boundaries.
func splitDoc(name string, data []byte, lim chunkLimits) []piece {
	total := countLines(data)
	whole := piece{ChunkFile: ChunkFile{Path: name, StartLine: 1, EndLine: total, TotalLines: total}, start: 0, end: len(data)}
	finishPiece(&whole, data)
	if whole.size < lim.bytes && whole.lines < lim.lines {
		return []piece{whole}
	}
	// Room for the widest header this document can have.
	hmax := len(pieceHeader(ChunkFile{Path: name, StartLine: 1 << 40, EndLine: 1 << 40, TotalLines: 1 << 40, Part: 1 << 40, Parts: 1 << 40}))
	maxB := lim.bytes - hmax - 2 // -1 for a newline that may be added, -1 for strictly below
	maxL := lim.lines - 2        // -1 for the header line, -1 for strictly below
	if maxB < utf8.UTFMax || maxL < 1 {
		panic(fmt.Sprintf("chunk limits %+v too small for %q", lim, name))
	}
	var out []piece
	segStart, segLines, segFirst := 0, 0, 1
	flush := func(end, lastLine int) {
		if end > segStart {
			out = append(out, piece{ChunkFile: ChunkFile{Path: name, StartLine: segFirst, EndLine: lastLine, TotalLines: total}, start: segStart, end: end})
		}
	}
	line := 0
	for pos := 0; pos < len(data); {
		le := bytes.IndexByte(data[pos:], '\n')
		if le < 0 {
			le = len(data)
		} else {
			le = pos + le + 1
		}
		line++
		llen := le - pos
		if llen > maxB {
			flush(pos, line-1)
			// Slice the long line itself.
			for s := pos; s < le; {
				e := min(s+maxB, le)
				for e < le && e > s && !utf8.RuneStart(data[e]) {
					e--
				}
				out = append(out, piece{ChunkFile: ChunkFile{Path: name, StartLine: line, EndLine: line, TotalLines: total}, start: s, end: e})
				s = e
			}
			pos = le
			segStart, segLines, segFirst = pos, 0, line+1
			continue
		}
		if pos-segStart+llen > maxB || segLines+1 > maxL {
			flush(pos, line-1)
			segStart, segLines, segFirst = pos, 0, line
		}
		segLines++
		pos = le
	}
	flush(len(data), line)
	for i := range out {
		out[i].Part, out[i].Parts = i+1, len(out)
		finishPiece(&out[i], data)
	}
	return out
}

// finishPiece computes the rendered size of p.
func finishPiece(p *piece, data []byte) {
	seg := data[p.start:p.end]
	p.addNL = len(seg) == 0 || seg[len(seg)-1] != '\n'
	p.size = len(pieceHeader(p.ChunkFile)) + len(seg)
	p.lines = 1 + bytes.Count(seg, []byte("\n"))
	if p.addNL {
		p.size++
		p.lines++
	}
}

// chunker packs pieces, in the order given, greedily into chunks. It keeps
// no document text except that of the one chunk asked for (want, 1-based;
// 0 for none), so memory stays bounded by one chunk.
type chunker struct {
	lim     chunkLimits
	want    int
	chunks  []ChunkInfo
	cur     *ChunkInfo
	curHash hash.Hash
	digest  hash.Hash
	text    []byte
	buf     []byte
}

func newChunker(lim chunkLimits, want int) *chunker {
	return &chunker{lim: lim, want: want, digest: sha256.New()}
}

// add splits one document and packs its pieces. An empty document has
// nothing to chunk.
func (k *chunker) add(name string, data []byte) {
	if len(data) == 0 {
		return
	}
	for _, p := range splitDoc(name, data, k.lim) {
		if k.cur != nil && (k.cur.Bytes+p.size >= k.lim.bytes || k.cur.Lines+p.lines >= k.lim.lines) {
			k.flush()
		}
		if k.cur == nil {
			k.cur = &ChunkInfo{Index: len(k.chunks) + 1, Files: []ChunkFile{}}
			k.curHash = sha256.New()
		}
		k.buf = p.render(k.buf[:0], data)
		k.cur.Bytes += p.size
		k.cur.Lines += p.lines
		k.cur.Files = append(k.cur.Files, p.ChunkFile)
		k.curHash.Write(k.buf)
		if k.cur.Index == k.want {
			k.text = append(k.text, k.buf...)
		}
	}
}

func (k *chunker) flush() {
	if k.cur == nil {
		return
	}
	k.cur.SHA256 = hex.EncodeToString(k.curHash.Sum(nil))
	fmt.Fprintf(k.digest, "%d %s\n", k.cur.Index, k.cur.SHA256)
	k.chunks = append(k.chunks, *k.cur)
	k.cur = nil
}

// finish closes the last chunk and returns every chunk and the evidence
// digest: the sha256 over the index and sha256 of every chunk.
func (k *chunker) finish() ([]ChunkInfo, string) {
	k.flush()
	if k.chunks == nil {
		k.chunks = []ChunkInfo{}
	}
	return k.chunks, hex.EncodeToString(k.digest.Sum(nil))
}
