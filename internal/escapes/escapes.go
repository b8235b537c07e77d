// Package escapes neutralises the terminal control sequences of tool
// output.
//
// Agent CLIs print tool results to a terminal, and a tool's output (or a
// downstream server's text) is not toolgate's to trust: a colour code is
// noise, but an OSC 52 sequence writes the user's clipboard, an OSC 8 one
// hides a link behind other text, a carriage return or a backspace
// overwrites what was printed, and a bidi override reorders it (Trojan
// Source). JSON carries them intact (as \u001b and the like), and a client
// that prints the text content gives them to the terminal.
//
// So by default every control character that can start or shape such a
// sequence is replaced by a visible stand-in: each C0 control but tab and
// newline (and a carriage return right before a newline) becomes its
// Unicode control picture (ESC is "␛", CR "␍", BEL "␇", BS "␈", NUL "␀";
// DEL is "␡"), a C1 control becomes "␛" and its 7-bit equivalent (CSI,
// U+009B, is "␛["), and a bidi control becomes "[U+202E]". Nothing is
// removed: with no ESC or C1 byte left no sequence can start, whatever
// follows, so no parser of ECMA-48 has to be right about malicious input;
// the text keeps its lines and a reader sees that the tool sent control
// sequences (an OSC 52 write shows as "␛]52;c;…␇", not as nothing). The
// cost is that colour codes show as "␛[31m": a tool whose output needs them
// can be named in `toolgate serve --keep-escapes`.
package escapes

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Neutralize returns s with its terminal control characters replaced by
// visible stand-ins (see above); s itself when it has none.
func Neutralize(s string) string {
	i := firstControl(s)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\t' || c == '\n':
			b.WriteByte(c)
			i++
		case c == '\r' && i+1 < len(s) && s[i+1] == '\n':
			b.WriteByte(c) // CRLF: the newline follows, nothing is overwritten
			i++
		case c < 0x20:
			b.WriteRune(0x2400 + rune(c))
			i++
		case c == 0x7f:
			b.WriteRune('\u2421')
			i++
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			switch {
			case r >= 0x80 && r <= 0x9f && size == 2:
				b.WriteRune('\u241b')
				b.WriteByte(byte(r - 0x40))
			case isBidiControl(r):
				fmt.Fprintf(&b, "[U+%04X]", r)
			default:
				b.WriteString(s[i : i+size])
			}
			i += size
		}
	}
	return b.String()
}

// firstControl is the index of the first byte Neutralize changes, or -1.
func firstControl(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\t' || c == '\n':
		case c == '\r' && i+1 < len(s) && s[i+1] == '\n':
		case c < 0x20 || c == 0x7f:
			return i
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(s[i:])
			if (r >= 0x80 && r <= 0x9f && size == 2) || isBidiControl(r) {
				return i
			}
			i += size - 1
		}
	}
	return -1
}

// isBidiControl reports the Unicode bidirectional formatting characters:
// embeddings, overrides and isolates, and the directional marks.
func isBidiControl(r rune) bool {
	return (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f || r == 0x061c
}
