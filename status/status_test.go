package status

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/conf"
	rt "github.com/toolgate/toolgate/runtime"
)

// TestReportJSON pins the keys checkpoint_status's structuredContent
// carries: clients read them.
func TestReportJSON(t *testing.T) {
	r := Report{
		Version: "v", Protocol: "2025-06-18",
		Conf:    Conf{Path: "/etc/tools.conf", State: "refused", Errors: []ConfError{{Line: 2, Text: "tool x", Field: "exe", Reason: "why"}}},
		Sandbox: Sandbox{Backend: "bwrap", State: "ready", Available: true},
		Tools:   []Tool{{Name: "t", Kind: "external", Class: "test", Backend: "bwrap", Egress: []string{"a:443"}}},
		Registry: &Registry{Dir: "/etc/mcp", State: "loaded", Pins: "/etc/mcp/pins.json", RequirePins: true, Servers: []Downstream{{
			ID: "s", Transport: "stdio", Sandbox: "on, no network",
			State: DownstreamListed, Pinned: true, Served: []string{"s__a"}, NotServed: []string{"b", "c"}, Unpinned: []string{"a"},
			Refused: []ToolRefusal{{Tool: "b", Reason: "big"}, {Tool: "c", Reason: "drifted", Diff: "--- pinned\n+++ listed\n"}},
		}}},
		Reload: &Reload{
			Generation: 3, At: "2026-12-02T10:00:00Z", Trigger: "watch", Changed: []string{"tools.conf", "policy"},
			Refused: []Refusal{{File: "policy", Path: "/etc/toolgate/policy.cedar", Reason: "line 2: does not parse", Effect: "kept"}},
			Added:   []string{"t"}, Removed: []string{"u"}, Replaced: []string{"v"},
		},
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":"v","protocol":"2025-06-18",` +
		`"conf":{"path":"/etc/tools.conf","state":"refused","errors":[{"line":2,"text":"tool x","field":"exe","reason":"why"}]},` +
		`"sandbox":{"backend":"bwrap","state":"ready","available":true},` +
		`"tools":[{"name":"t","kind":"external","class":"test","backend":"bwrap","egress":["a:443"]}],` +
		`"registry":{"dir":"/etc/mcp","state":"loaded","pins":"/etc/mcp/pins.json","require_pins":true,"servers":[{"id":"s","transport":"stdio","sandbox":"on, no network","state":"listed",` +
		`"pinned":true,"served":["s__a"],"not_served":["b","c"],"unpinned":["a"],"refused":[{"tool":"b","reason":"big"},{"tool":"c","reason":"drifted","diff":"--- pinned\n+++ listed\n"}]}]},` +
		`"reload":{"generation":3,"at":"2026-12-02T10:00:00Z","trigger":"watch","changed":["tools.conf","policy"],` +
		`"refused":[{"file":"policy","path":"/etc/toolgate/policy.cedar","reason":"line 2: does not parse","effect":"kept"}],"added":["t"],"removed":["u"],"replaced":["v"]}}`
	if string(b) != want {
		t.Errorf("json.Marshal(Report) =\n%s\nwant\n%s", b, want)
	}
	text := r.Text()
	for _, line := range []string{
		"  pins: /etc/mcp/pins.json\n", "  --require-pins: a tool without a pin is not served\n",
		"    served without a pin: a\n",
		"reload 3 (watch, 2026-12-02T10:00:00Z): changed tools.conf policy\n  refused policy /etc/toolgate/policy.cedar: line 2: does not parse; kept\n  added: t\n  removed: u\n  replaced: v\n", "    not served: c: drifted\n      --- pinned\n      +++ listed\n",
	} {
		if !strings.Contains(text, line) {
			t.Errorf("Text() lacks %q:\n%s", line, text)
		}
	}
}

// TestFromConf: a refused conf's errors keep their line, field and reason.
func TestFromConf(t *testing.T) {
	c := conf.Parse("/etc/tools.conf", []byte("tool bad /bin/bash read 10 4096 off /tmp --\n"), conf.Options{})
	cs := FromConf(c)
	if cs.Path != "/etc/tools.conf" || cs.State != "refused" || len(cs.Errors) != 1 {
		t.Fatalf("FromConf = %+v, want one refused line of /etc/tools.conf", cs)
	}
	if e := cs.Errors[0]; e.Line != 1 || e.Field != "exe" || !strings.Contains(e.Reason, `basename "bash"`) {
		t.Errorf("FromConf error = %+v, want line 1, field exe, the basename's reason", e)
	}
	if r := (Report{Conf: cs}).Text(); !strings.Contains(r, "refused line 1: exe: ") || !strings.Contains(r, "built-ins stay on") {
		t.Errorf("Text() =\n%s\nwant the refused line and that built-ins stay on", r)
	}
}

// TestReportPoolJSON pins the keys of the pool's part of
// checkpoint_status (the pool's own report, rt.PoolStatus) and its line
// in Text.
func TestReportPoolJSON(t *testing.T) {
	r := Report{Sandbox: Sandbox{Backend: "bwrap", State: "ready", Available: true, Pool: &rt.PoolStatus{
		Depth: 1, Max: 32, MaxAge: "10m0s", Ready: 1, Preparing: 1, Hits: 5, Misses: 2, Prepared: 8, Failed: 1,
		Stale: 1, Expired: 2, Evicted: 3,
		Entries: []rt.PoolEntryStatus{{Name: "t", Kind: "tool", Ready: 1}, {Name: "s", Kind: "service", Preparing: 1, LastError: "no"}},
	}}}
	b, err := json.Marshal(r.Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"backend":"bwrap","state":"ready","available":true,"pool":{"depth":1,"max":32,"max_age":"10m0s","ready":1,"preparing":1,` +
		`"hits":5,"misses":2,"prepared":8,"failed":1,"stale":1,"expired":2,"evicted":3,` +
		`"entries":[{"name":"t","kind":"tool","ready":1,"preparing":0},{"name":"s","kind":"service","ready":0,"preparing":1,"last_error":"no"}]}}`
	if string(b) != want {
		t.Errorf("json.Marshal(Sandbox) =\n%s\nwant\n%s", b, want)
	}
	text := r.Text()
	for _, line := range []string{
		"  pool: depth 1 per tool (at most 32 held, replaced after 10m0s): 1 ready, 1 preparing; 5 calls released a ready sandbox, 2 prepared their own; 1 preparations failed\n",
		"    tool t: 1 ready, 0 preparing\n",
		"    service s: 0 ready, 1 preparing; last preparation failed: no\n",
	} {
		if !strings.Contains(text, line) {
			t.Errorf("Text() lacks %q:\n%s", line, text)
		}
	}
}
