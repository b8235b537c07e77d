package registry

import (
	"errors"
	"strings"
	"testing"
)

// TestTextProblem: what a tool definition's text may hold. Ordinary text
// in any language, emoji (joined, modified, flagged, with variation
// selectors) and newlines pass; invisible and direction-changing
// characters are refused at their character offset.
func TestTextProblem(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     string
		offset int // -1: accepted
		r      rune
		why    string
	}{
		{"english, newline and tab", "Echoes back the input string.\n\n\tArgs: message (string).", -1, 0, ""},
		{"chinese", "回显输入的字符串。", -1, 0, ""},
		{"japanese and korean", "入力をそのまま返します。입력을 그대로 돌려줍니다.", -1, 0, ""},
		{"arabic and hebrew (right to left letters)", "يعيد النص كما هو. מחזיר את הטקסט.", -1, 0, ""},
		{"persian with a zero-width non-joiner between letters", "می\u200cخواهم", -1, 0, ""},
		{"hindi conjunct with a zero-width joiner after a virama", "क्\u200dष", -1, 0, ""},
		{"greek, cyrillic, accents", "Ελληνικά, Кириллица, naïve café", -1, 0, ""},
		{"left-to-right and right-to-left marks", "abc\u200e \u05d0\u200f", -1, 0, ""},
		{"emoji", "Returns 😀 and 🔥", -1, 0, ""},
		{"family emoji (zero-width joiners)", "👨\u200d👩\u200d👧\u200d👦", -1, 0, ""},
		{"rainbow flag (variation selector, then a joiner)", "🏳\ufe0f\u200d🌈", -1, 0, ""},
		{"skin tone then a joiner", "👩🏽\u200d💻", -1, 0, ""},
		{"keycap", "1\ufe0f\u20e3", -1, 0, ""},
		{"country flag", "🇫🇷", -1, 0, ""},
		{"ideographic variation selector", "葛\U000E0100", -1, 0, ""},
		{"empty", "", -1, 0, ""},

		{"tag characters spelling hidden text", "Read\U000E0049\U000E0047\U000E004E", 4, 0xE0049, whyTag},
		{"a tag-based flag", "🏴\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F", 1, 0xE0067, whyTag},
		{"right-to-left override", "ab\u202ecd", 2, 0x202E, whyBidi},
		{"left-to-right embedding", "\u202ax", 0, 0x202A, whyBidi},
		{"first strong isolate", "x\u2068y", 1, 0x2068, whyBidi},
		{"pop directional isolate", "xy\u2069", 2, 0x2069, whyBidi},
		{"zero-width space", "ignore\u200bprevious", 6, 0x200B, whyZWSP},
		{"zero-width no-break space inside", "a\ufeffb", 1, 0xFEFF, whyBOM},
		{"zero-width no-break space first", "\ufeffabc", 0, 0xFEFF, whyBOM},
		{"joiner first", "\u200dabc", 0, 0x200D, whyJoiner},
		{"joiner last", "abc\u200d", 3, 0x200D, whyJoiner},
		{"joiner between spaces", "a \u200d b", 2, 0x200D, whyJoiner},
		{"two joiners", "a\u200d\u200db", 1, 0x200D, whyJoiner},
		{"non-joiner between digits", "1\u200c2", 1, 0x200C, whyJoiner},
		{"variation selector first", "\ufe0fabc", 0, 0xFE0F, whyVSRun},
		{"run of variation selectors", "😀\ufe0f\ufe0e", 2, 0xFE0E, whyVSRun},
		{"run of supplementary selectors", "a\U000E0100\U000E0101", 2, 0xE0101, whyVSRun},
		{"carriage return", "line\r\nnext", 4, '\r', whyControl},
		{"nul", "a\x00", 1, 0, whyControl},
		{"escape", "\x1b[31mred", 0, 0x1B, whyControl},
		{"delete", "a\x7f", 1, 0x7F, whyControl},
		{"next line (C1)", "a\u0085b", 1, 0x85, whyControl},
		{"C1 CSI", "\u009b31m", 0, 0x9B, whyControl},
		{"not UTF-8", "ab\xffc", 2, 0xFFFD, "not UTF-8"},
		{"offset counts characters, not bytes", "é✓😀\u202e", 3, 0x202E, whyBidi},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off, r, why, bad := TextProblem(tc.in)
			if tc.offset < 0 {
				if bad {
					t.Errorf("TextProblem(%+q) = %d, %U, %q; want it accepted", tc.in, off, r, why)
				}
				return
			}
			if !bad || off != tc.offset || r != tc.r || why != tc.why {
				t.Errorf("TextProblem(%+q) = %d, %U, %q, %v; want %d, %U, %q", tc.in, off, r, why, bad, tc.offset, tc.r, tc.why)
			}
		})
	}
}

// TestCheckDefinitionText: every string of a definition is checked, keys
// included, and the refusal names its JSON path and character offset.
func TestCheckDefinitionText(t *testing.T) {
	for _, tc := range []struct {
		name, def string
		want      string // "" accepted
	}{
		{"clean", `{"name":"echo","description":"Echo 😀\nback","inputSchema":{"type":"object","properties":{"message":{"type":"string","description":"Message à renvoyer"}}}}`, ""},
		{
			"description", `{"name":"echo","description":"Echo\u202eback"}`,
			"description: U+202E, " + whyBidi + ", at character offset 4",
		},
		{"title", `{"name":"echo","title":"\u200bEcho"}`, "title: U+200B, " + whyZWSP + ", at character offset 0"},
		{
			"nested schema description", `{"name":"e","inputSchema":{"properties":{"q":{"description":"ok\udb40\udc41"}}}}`,
			"inputSchema.properties.q.description: U+E0041, " + whyTag + ", at character offset 2",
		},
		{
			"enum value", `{"name":"e","inputSchema":{"properties":{"m":{"enum":["a","b\u0007"]}}}}`,
			"inputSchema.properties.m.enum[1]: U+0007, " + whyControl + ", at character offset 1",
		},
		{
			"property name", `{"name":"e","inputSchema":{"properties":{"q\udb40\udc41":{}}}}`,
			`the key "q\U000e0041" of inputSchema.properties: U+E0041, ` + whyTag + ", at character offset 1",
		},
		{
			"odd key in the path", `{"name":"e","inputSchema":{"properties":{"a b":{"description":"\u2066"}}}}`,
			`inputSchema.properties["a b"].description: U+2066, ` + whyBidi + ", at character offset 0",
		},
		{"annotation title", `{"name":"e","annotations":{"title":"x\u001by"}}`, "annotations.title: U+001B, " + whyControl + ", at character offset 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckDefinitionText([]byte(tc.def))
			if tc.want == "" {
				if err != nil {
					t.Errorf("CheckDefinitionText(%s) = %v, want it accepted", tc.def, err)
				}
				return
			}
			var te *TextError
			if !errors.As(err, &te) || err.Error() != tc.want {
				t.Errorf("CheckDefinitionText(%s) = %v\nwant %s", tc.def, err, tc.want)
			}
		})
	}
	if err := CheckDefinitionText([]byte(`{"name":"e","description":"a` + "\xff" + `"}`)); err == nil || !strings.Contains(err.Error(), "not UTF-8") {
		t.Errorf("CheckDefinitionText(invalid UTF-8) = %v, want not UTF-8", err)
	}
}
