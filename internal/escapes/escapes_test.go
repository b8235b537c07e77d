package escapes

import (
	"strings"
	"testing"
)

func TestNeutralize(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "hello\tworld\nnext line\n", "hello\tworld\nnext line\n"},
		{"utf-8", "héllo ✓ 日本 \u200d", "héllo ✓ 日本 \u200d"},
		{"colour", "\x1b[31mred\x1b[0m", "␛[31mred␛[0m"},
		{"osc 52 clipboard", "\x1b]52;c;ZWNobyBwd25lZA==\x07", "␛]52;c;ZWNobyBwd25lZA==␇"},
		{"osc 8 hyperlink", "\x1b]8;;https://x.example/\x1b\\link\x1b]8;;\x1b\\", "␛]8;;https://x.example/␛\\link␛]8;;␛\\"},
		{"carriage return overwrite", "safe\rEVIL", "safe␍EVIL"},
		{"crlf kept", "line\r\nnext\r\n", "line\r\nnext\r\n"},
		{"cr at the end", "end\r", "end␍"},
		{"backspace bell nul del", "a\x08b\x07c\x00d\x7f", "a␈b␇c␀d␡"},
		{"c1 csi", "\u009b31mx\u0085", "␛[31mx␛E"},
		{"bidi override", "\u202eevil\u202c \u2066iso\u2069 \u200f", "[U+202E]evil[U+202C] [U+2066]iso[U+2069] [U+200F]"},
		{"invalid utf-8 left for the JSON encoder", "a\xffb\x9bc", "a\xffb\x9bc"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Neutralize(tc.in); got != tc.want {
				t.Errorf("Neutralize(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if got := Neutralize(tc.want); got != tc.want && !strings.Contains(tc.name, "crlf") {
				t.Errorf("neutralize is not idempotent on %q: %q", tc.want, got)
			}
		})
	}
}
