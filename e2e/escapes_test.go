//go:build e2e

package e2e

import (
	"strings"
	"testing"

	probemodes "github.com/toolgate/toolgate/internal/probes"
	"github.com/toolgate/toolgate/internal/testbin"
)

// TestTerminalEscapes: a tool's colour codes, OSC 52 and OSC 8 sequences,
// carriage-return overwrite, bidi override and C1 controls reach the client
// neutralised (ESC as U+241B, ...), tabs and newlines kept; the tool named
// in --keep-escapes gets its bytes through.
func TestTerminalEscapes(t *testing.T) {
	probe, dir := testbin.Probe(t), testbin.Dir(t)
	conf := writeConf(t, "tool colours "+probe+" read 10 4096 off "+dir+" -- escapes\ntool boxed "+probe+" test 10 4096 on "+dir+" -- escapes\ntool raw "+probe+" read 10 4096 off "+dir+" -- escapes\n")
	c, _ := start(t, "2025-06-18", conf, "--keep-escapes", "raw")
	for _, tc := range []struct{ tool, want string }{
		{"colours", "␛[31mred␛[0m\tplain\n␛]52;c;ZWNobyBwd25lZA==␇clipboard\n␛]8;;https://attacker.example/␛\\link␛]8;;␛\\\nsafe␍EVIL\n[U+202E]evil[U+202C] bidi\n␛[31mc1␈␇ end\n"},
		{"boxed", "␛[31mred␛[0m\tplain\n␛]52;c;ZWNobyBwd25lZA==␇clipboard\n␛]8;;https://attacker.example/␛\\link␛]8;;␛\\\nsafe␍EVIL\n[U+202E]evil[U+202C] bidi\n␛[31mc1␈␇ end\n"},
		{"raw", probemodes.Escapes},
	} {
		res, err := call(t, c, tc.tool, nil)
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", tc.tool, err, res)
		}
		if out, _, _ := strings.Cut(text(res), "[exit=0"); out != tc.want {
			t.Errorf("%s = %q\nwant %q", tc.tool, out, tc.want)
		}
	}
}
