package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/internal/probes"
	"github.com/toolgate/toolgate/internal/testbin"
	"github.com/toolgate/toolgate/runtime/direct"
)

// neutralized is the probe's Escapes as toolgate serves it by default.
const neutralized = "␛[31mred␛[0m\tplain\n" +
	"␛]52;c;ZWNobyBwd25lZA==␇clipboard\n" +
	"␛]8;;https://attacker.example/␛\\link␛]8;;␛\\\n" +
	"safe␍EVIL\n" +
	"[U+202E]evil[U+202C] bidi\n" +
	"␛[31mc1␈␇ end\n"

// TestExternalEscapes: a real tool printing colour, OSC 52, OSC 8, a
// carriage-return overwrite, a bidi override and C1 controls reaches the
// client with every one neutralised, in the text and in
// structuredContent's output alike, tabs and newlines kept; a tool named
// in KeepEscapes gets its bytes through as they are.
func TestExternalEscapes(t *testing.T) {
	probe, dir := testbin.Probe(t), testbin.Dir(t)
	c := conf.Parse("tools.conf", []byte("tool colours "+probe+" read 10 4096 off "+dir+" -- escapes\ntool raw "+probe+" read 10 4096 off "+dir+" -- escapes\n"), conf.Options{})
	if c.State != conf.StateLoaded {
		t.Fatal(c.Errors)
	}
	s := New(Options{Conf: c, Direct: &direct.Runner{Shim: testbin.Shim(t)}, KeepEscapes: []string{"raw"}})
	sess := session(t, s)
	for _, tc := range []struct{ tool, want string }{{"colours", neutralized}, {"raw", probes.Escapes}} {
		res, err := callTool(t, sess, tc.tool, nil)
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %v", tc.tool, err, res)
		}
		text := resultText(res)
		out, _, _ := strings.Cut(text, "[exit=0")
		if out != tc.want {
			t.Errorf("%s text = %q\nwant %q", tc.tool, out, tc.want)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var sc CallOutput
		json.Unmarshal(b, &sc)
		if sc.Output != text {
			t.Errorf("%s structuredContent output = %q, want the text %q", tc.tool, sc.Output, text)
		}
		if sc.OutputBytes != int64(len(probes.Escapes)) {
			t.Errorf("%s output_bytes = %d, want the tool's %d", tc.tool, sc.OutputBytes, len(probes.Escapes))
		}
	}
}

// TestDownstreamEscapes: a downstream server's text content is neutralised
// the same way, unless its served name is in KeepEscapes.
func TestDownstreamEscapes(t *testing.T) {
	for _, tc := range []struct {
		keep []string
		want string
	}{{nil, neutralized}, {[]string{"probe__escapes"}, probes.Escapes}} {
		r := probeRegistry(t, `"plain"`, `"escapes"`)
		h := newHarness(t, Options{KeepEscapes: tc.keep}, gateway.Options{Registry: r}, nil)
		res := h.call(t, "probe__escapes", nil)
		if got := resultText(res); res.IsError || got != tc.want {
			t.Errorf("keep %v: probe__escapes = %q (isError %v)\nwant %q", tc.keep, got, res.IsError, tc.want)
		}
	}
}
