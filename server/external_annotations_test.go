package server

import (
	"testing"

	"github.com/toolgate/toolgate/conf"
)

// TestExternalOpenWorld: openWorldHint says what a tools.conf tool can
// reach: a read-class tool the host's network, a test-class one nothing,
// unless an egress line lists destinations.
func TestExternalOpenWorld(t *testing.T) {
	c := loadConf(t, twoTools+"tool net EXE test 7 200 on DIR --\negress net 127.0.0.1:8080\n")
	if c.State != conf.StateLoaded {
		t.Fatalf("conf %s: %v", c.State, c.Errors)
	}
	want := map[string]bool{"zeta": true, "alpha": false, "net": true}
	for _, tool := range c.Tools {
		a := externalTool(tool).Annotations
		if a.OpenWorldHint == nil || *a.OpenWorldHint != want[tool.Name] {
			t.Errorf("%s (%s, egress %v): openWorldHint %v, want %v", tool.Name, tool.Class, tool.Egress.Strings(), deref(a.OpenWorldHint), want[tool.Name])
		}
	}
}
