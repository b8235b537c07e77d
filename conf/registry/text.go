package registry

// What a downstream tool's definition may hold: text a reviewer sees as
// the model reads it. A model reads a tool's description (and every
// string of its schemas) as instructions; characters that render as
// nothing, or that reorder what follows them, are how hidden instructions
// are smuggled past the human who approved the definition ("tool
// poisoning"). CheckDefinitionText refuses them, naming the field by its
// JSON path and the character by its offset; ordinary text in any
// language, emoji and newlines pass.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// TextError is a string of a tool definition that holds a character a
// reviewer cannot see, or one that changes the direction of the text
// after it.
type TextError struct {
	// Path is the JSON path of the string: "description",
	// "inputSchema.properties.query.description", "enum[2]"; for a
	// character in an object key, the path of the object.
	Path string
	// Key is the object key that holds the character, when it is in a
	// key (a property name) rather than a value; quoted with every
	// character outside printable ASCII escaped, so that the message
	// itself shows what is hidden.
	Key string
	// Offset is the position of the character in the string, counted in
	// characters (Unicode code points) from 0.
	Offset int
	// Rune is the character.
	Rune rune
	// What says what kind of character it is and why it is refused.
	What string
}

func (e *TextError) Error() string {
	where := e.Path
	if e.Key != "" {
		where = fmt.Sprintf("the key %s of %s", e.Key, e.Path)
	}
	return fmt.Sprintf("%s: %U, %s, at character offset %d", where, e.Rune, e.What, e.Offset)
}

// Why each kind of character is refused.
const (
	whyTag     = "a Unicode tag character (invisible: it spells hidden text)"
	whyBidi    = "a bidirectional control (it reorders the text after it)"
	whyZWSP    = "a zero-width space (invisible)"
	whyBOM     = "a zero-width no-break space (invisible)"
	whyJoiner  = "a zero-width joiner or non-joiner that is not between letters or in an emoji sequence (invisible)"
	whyControl = "a control character (only newline and tab are allowed)"
	whyVSRun   = "a variation selector that follows no character it could modify (a run of them spells hidden text)"
)

// TextProblem returns the first character of s a definition may not hold:
// its offset in characters, the character and why. ok is false when s is
// clean. Refused:
//
//   - Unicode tag characters, U+E0000 to U+E007F (every one: tag-based
//     emoji such as subdivision flags included);
//   - bidirectional controls, U+202A to U+202E and U+2066 to U+2069;
//   - the zero-width space U+200B and the zero-width no-break space
//     U+FEFF, anywhere;
//   - the zero-width non-joiner U+200C and joiner U+200D, except between
//     letters (or combining marks) and inside emoji sequences, where
//     scripts and emoji need them;
//   - a variation selector (U+FE00 to U+FE0F, U+E0100 to U+E01EF) at the
//     start of the string or right after another selector or a joiner: a
//     single one after a character, as emoji and ideographic variants use
//     it, is allowed;
//   - C0 and C1 control characters (U+0000 to U+001F, U+007F to U+009F)
//     other than newline and tab, and bytes that are not UTF-8.
func TextProblem(s string) (offset int, r rune, why string, ok bool) {
	prev := rune(-1)
	i := 0
	for pos := 0; pos < len(s); i++ {
		c, size := utf8.DecodeRuneInString(s[pos:])
		pos += size
		switch {
		case c == utf8.RuneError && size == 1:
			return i, c, "not UTF-8", true
		case c >= 0xE0000 && c <= 0xE007F:
			return i, c, whyTag, true
		case c >= 0x202A && c <= 0x202E, c >= 0x2066 && c <= 0x2069:
			return i, c, whyBidi, true
		case c == 0x200B:
			return i, c, whyZWSP, true
		case c == 0xFEFF:
			return i, c, whyBOM, true
		case c == 0x200C || c == 0x200D:
			next, _ := utf8.DecodeRuneInString(s[pos:])
			if pos >= len(s) || !joinsBefore(prev) || !joinsAfter(next) {
				return i, c, whyJoiner, true
			}
		case isVariationSelector(c):
			if prev < 0 || isVariationSelector(prev) || prev == 0x200C || prev == 0x200D {
				return i, c, whyVSRun, true
			}
		case c < 0x20 && c != '\n' && c != '\t', c >= 0x7F && c <= 0x9F:
			return i, c, whyControl, true
		}
		prev = c
	}
	return 0, 0, "", false
}

func isVariationSelector(r rune) bool {
	return r >= 0xFE00 && r <= 0xFE0F || r >= 0xE0100 && r <= 0xE01EF
}

// isPictograph reports a character emoji sequences are made of: a symbol
// (emoji are Unicode "Symbol, other"), or a skin-tone modifier.
func isPictograph(r rune) bool {
	return unicode.Is(unicode.So, r) || r >= 0x1F3FB && r <= 0x1F3FF
}

// joinsBefore reports a character a joiner may follow: a letter or mark
// (Persian ZWNJ, Indic conjuncts after a virama), or the end of an emoji
// (its variation selector or skin tone included).
func joinsBefore(r rune) bool {
	return r >= 0 && (unicode.IsLetter(r) || unicode.Is(unicode.M, r) || isPictograph(r) || isVariationSelector(r))
}

// joinsAfter reports a character a joiner may precede.
func joinsAfter(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.M, r) || isPictograph(r)
}

// CheckDefinitionText checks every string of a tool definition (JSON):
// each value and each object key, at any depth — the description, the
// title, every string of the schemas (descriptions, enums, defaults,
// property names), the annotations. It returns a *TextError for the first
// refused character, walking object keys in sorted order, or an error
// when def is not JSON.
func CheckDefinitionText(def []byte) error {
	if !utf8.Valid(def) {
		return &TextError{Path: "(the definition)", Rune: utf8.RuneError, What: "not UTF-8"}
	}
	dec := json.NewDecoder(bytes.NewReader(def))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return checkText(nil, v)
}

// pathSeg is one step of a JSON path: an object key, or (index >= 0) an
// array index.
type pathSeg struct {
	key   string
	index int
}

func keySeg(k string) pathSeg { return pathSeg{key: k, index: -1} }

// checkText walks v; path holds the steps above it, rendered only for a
// refusal.
func checkText(path []pathSeg, v any) error {
	switch v := v.(type) {
	case string:
		if off, r, why, bad := TextProblem(v); bad {
			return &TextError{Path: renderPath(path), Offset: off, Rune: r, What: why}
		}
	case []any:
		for i, e := range v {
			if err := checkText(append(path, pathSeg{index: i}), e); err != nil {
				return err
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if off, r, why, bad := TextProblem(k); bad {
				return &TextError{Path: renderPath(path), Key: strconv.QuoteToASCII(k), Offset: off, Rune: r, What: why}
			}
			if err := checkText(append(path, keySeg(k)), v[k]); err != nil {
				return err
			}
		}
	}
	return nil
}

// renderPath renders a path as a JSON path.
func renderPath(path []pathSeg) string {
	p := ""
	for _, seg := range path {
		if seg.index >= 0 {
			p += "[" + strconv.Itoa(seg.index) + "]"
		} else {
			p = jsonPath(p, seg.key)
		}
	}
	return rootPath(p)
}

func rootPath(p string) string {
	if p == "" {
		return "(the definition)"
	}
	return p
}

// jsonPath appends key to the JSON path p: as .key when it is a plain
// name, else as ["key"] with everything outside printable ASCII escaped.
func jsonPath(p, key string) string {
	plain := key != ""
	for i, r := range key {
		if !(r == '_' || r == '$' || r == '-' && i > 0 || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' && i > 0) {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return p + "[" + strconv.QuoteToASCII(key) + "]"
	case p == "":
		return key
	}
	return p + "." + key
}
