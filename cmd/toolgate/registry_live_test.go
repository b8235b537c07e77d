package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/gateway"
)

func pinOf(t *testing.T, def string) registry.Pin {
	t.Helper()
	c, err := registry.CanonicalJSON([]byte(def))
	if err != nil {
		t.Fatal(err)
	}
	return registry.Pin{SHA256: registry.Digest(c), Definition: c}
}

// TestPinServer: what registry pin makes of a listing: new tools pinned,
// unchanged ones kept, changed ones re-pinned with the diff, a refused or
// absent one keeping its pin (the refused one failing the command), and
// the pin of a tool no longer enabled dropped.
func TestPinServer(t *testing.T) {
	same := pinOf(t, `{"name":"same","description":"Same."}`)
	was := pinOf(t, `{"name":"changed","description":"Before."}`)
	now := pinOf(t, `{"name":"changed","description":"After."}`)
	fresh := pinOf(t, `{"name":"fresh","description":"New."}`)
	hidden := pinOf(t, `{"name":"hidden","description":"Clean."}`)
	gone := pinOf(t, `{"name":"absent","description":"Gone."}`)
	dropped := pinOf(t, `{"name":"dropped","description":"No longer enabled."}`)
	pins := &registry.Pins{Servers: map[string]map[string]registry.Pin{
		"srv":   {"same": same, "changed": was, "hidden": hidden, "absent": gone, "dropped": dropped},
		"other": {"x": same},
	}}
	ls := gateway.LiveServer{Server: registry.ToolServer{ID: "srv"}, Tools: []gateway.LiveTool{
		{Name: "same", Offered: true, Definition: same.Definition, SHA256: same.SHA256},
		{Name: "changed", Offered: true, Definition: now.Definition, SHA256: now.SHA256},
		{Name: "fresh", Offered: true, Definition: fresh.Definition, SHA256: fresh.SHA256},
		{Name: "hidden", Offered: true, Refused: "its definition holds text a reviewer cannot see: description: U+200B, ..."},
		{Name: "absent", Reason: "not offered by the downstream server"},
	}}
	got := pinServer(pins, ls)
	want := []pinned{
		{tool: "same", action: "unchanged", detail: "sha256 " + same.SHA256},
		{
			tool: "changed", action: "re-pinned", detail: "sha256 " + now.SHA256 + " (was " + was.SHA256 + ")",
			diff: "--- pinned changed (sha256 " + was.SHA256[:12] + ")\n+++ listed changed (sha256 " + now.SHA256[:12] + ")\n" +
				"@@ -1,4 +1,4 @@\n {\n-  \"description\": \"Before.\",\n+  \"description\": \"After.\",\n   \"name\": \"changed\"\n }\n",
		},
		{tool: "fresh", action: "pinned", detail: "sha256 " + fresh.SHA256},
		{tool: "hidden", action: "REFUSED", detail: "not pinned: its definition holds text a reviewer cannot see: description: U+200B, ...; its pin (sha256 " + hidden.SHA256[:12] + ") is kept", failed: true},
		{tool: "absent", action: "absent", detail: "not offered by the downstream server: not pinned; its pin (sha256 " + gone.SHA256[:12] + ") is kept"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("pinServer =\n%+v\nwant\n%+v", got, want)
	}
	wantPins := map[string]registry.Pin{"same": same, "changed": now, "fresh": fresh, "hidden": hidden, "absent": gone}
	if s := pins.Servers["srv"]; len(s) != len(wantPins) {
		t.Errorf("pins of srv = %v, want %v", s, wantPins)
	}
	for tool, p := range wantPins {
		if pins.Servers["srv"][tool].SHA256 != p.SHA256 {
			t.Errorf("pin of %s = %s, want %s", tool, pins.Servers["srv"][tool].SHA256, p.SHA256)
		}
	}
	if _, ok := pins.Servers["other"]["x"]; !ok {
		t.Error("the pins of a server not listed are lost")
	}
}

// TestWritePins: the pins file is replaced whole, 0644, and loads back.
func TestWritePins(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, registry.PinsFile)
	p := &registry.Pins{Servers: map[string]map[string]registry.Pin{"srv": {"same": pinOf(t, `{"name":"same"}`)}}}
	data, err := registry.RenderPins(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writePins(path, data); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("pins file mode %v (%v), want 0644", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, data) {
		t.Errorf("pins file = %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("files left in %s: %v", dir, ents)
	}
	if _, errs := registry.ParsePins(path, data); len(errs) > 0 {
		t.Errorf("written pins do not load: %v", errs)
	}
}

func TestServeRequirePinsFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	run([]string{"serve", "-h"}, strings.NewReader(""), &stdout, &stderr)
	if !strings.Contains(stderr.String(), "-require-pins") {
		t.Errorf("serve -h lacks -require-pins:\n%s", stderr.String())
	}
}
