package server

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/internal/testbin"
	"github.com/toolgate/toolgate/status"
)

// probeRegistry is the probe's MCP server (mode mcp) with the given
// options and enabled tools, unsandboxed.
func probeRegistry(t *testing.T, opts, enabled string) *registry.Registry {
	t.Helper()
	r := loadRegistry(t, map[string]string{"10-probe.toml": fmt.Sprintf(`schema_version = 8

[tool_mcp_servers.probe]
transport = "stdio"
command = %q
args = ["mcp", %s]
sandbox = false
enabled_tools = [%s]
default_tools_approval_mode = "auto"
startup_timeout_sec = 60
`, testbin.Probe(t), opts, enabled)})
	if r.State != conf.StateLoaded {
		t.Fatalf("registry %s: %v", r.State, r.Err())
	}
	return r
}

// heapMiB is the live heap after a collection, in MiB.
func heapMiB() float64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// TestDownstreamListingBounded: a server that lists 10,000 tools with 5 KB
// schemas (50 MB, 51 pages) costs toolgate what its two enabled tools
// cost: the others are dropped as each page is read, and the memory goes
// back once it is listed.
func TestDownstreamListingBounded(t *testing.T) {
	r := probeRegistry(t, `"tools=10000", "schema=5000", "page=200"`, `"echo", "tool04242"`)
	before := heapMiB()
	peak := peakSince(t)
	h := newHarness(t, Options{}, gateway.Options{Registry: r, Eager: true}, nil)
	grew := peak()
	after := heapMiB()
	rss := float64(procStatus(t, "VmRSS")) / 1024
	t.Logf("10,000 listed tools with 5 KB schemas, 2 enabled: live heap %.1f MiB before, %.1f MiB after (+%.1f); peak RSS +%.1f MiB over the start; RSS now %.1f MiB",
		before, after, after-before, grew, rss)
	if after-before > 8 {
		t.Errorf("the listing left %.1f MiB on the live heap, want under 8 MiB (only the enabled tools are kept)", after-before)
	}
	if grew > 64 {
		t.Errorf("the listing raised the peak RSS by %.1f MiB, want under 64 MiB (one page at a time)", grew)
	}
	if ds := h.status(t).Registry.Servers[0]; ds.State != "listed" {
		t.Fatalf("server %s: %s", ds.State, ds.Reason)
	}
	got := h.tools(t)
	if _, ok := got["probe__tool04242"]; !ok {
		t.Errorf("probe__tool04242 (page 22) not served: %v", slices.Sorted(mapsKeys(got)))
	}
	if len(got) != 3 {
		t.Errorf("%d tools served, want checkpoint_status and the two enabled", len(got))
	}
	var offered int
	if _, after, ok := strings.Cut(h.logs.String(), "offered="); ok {
		fmt.Sscan(after, &offered)
	}
	if offered < 10000 || offered > 10020 {
		t.Errorf("the listing is logged with offered=%d, want every tool listed (10,000 and the probe's own):\n%s", offered, h.logs.String())
	}
}

// TestDownstreamToolTooLarge: an enabled tool whose definition is over
// gateway.MaxTool is not served, and checkpoint_status and the log say
// why; toolgate's tools/list stays small; the other tools are served.
func TestDownstreamToolTooLarge(t *testing.T) {
	r := probeRegistry(t, fmt.Sprintf(`"big=%d"`, gateway.MaxTool+1000), `"echo", "big"`)
	h := newHarness(t, Options{}, gateway.Options{Registry: r}, nil)
	got := h.tools(t)
	if _, ok := got["probe__big"]; ok {
		t.Error("probe__big is served")
	}
	if _, ok := got["probe__echo"]; !ok {
		t.Error("probe__echo is not served")
	}
	raw := rawToolsList(t, h.s)
	size := 0
	for _, v := range raw {
		size += len(v)
	}
	if size > 64<<10 {
		t.Errorf("toolgate's tools/list carries %d bytes of schemas", size)
	}
	want := fmt.Sprintf("over toolgate's cap of %d bytes for one downstream tool", gateway.MaxTool)
	ds := h.status(t).Registry.Servers[0]
	if !slices.Contains(ds.NotServed, "big") || len(ds.Refused) != 1 || ds.Refused[0].Tool != "big" || !strings.Contains(ds.Refused[0].Reason, want) {
		t.Errorf("status = %+v, want big refused: %s", ds, want)
	}
	if text := resultText(h.call(t, "checkpoint_status", nil)); !strings.Contains(text, "not served: big: its definition is ") {
		t.Errorf("checkpoint_status text does not say why big is not served:\n%s", text)
	}
	if !strings.Contains(h.logs.String(), want) {
		t.Errorf("the log does not say why big is not served:\n%s", h.logs.String())
	}
}

// TestDownstreamDuplicateTool: a server that lists one name twice gets
// neither served (either definition could be meant), with the reason.
func TestDownstreamDuplicateTool(t *testing.T) {
	r := probeRegistry(t, `"dup"`, `"echo", "pid"`)
	h := newHarness(t, Options{}, gateway.Options{Registry: r}, nil)
	got := h.tools(t)
	if _, ok := got["probe__echo"]; ok {
		t.Error("probe__echo, listed twice, is served")
	}
	if _, ok := got["probe__pid"]; !ok {
		t.Error("probe__pid is not served")
	}
	st := h.status(t)
	b, _ := json.Marshal(st.Registry.Servers[0].Refused)
	if want := []status.ToolRefusal{{Tool: "echo", Reason: "the server lists it 2 times in one tools/list; a tool's name must be unique, and either definition could be meant"}}; !slices.Equal(st.Registry.Servers[0].Refused, want) {
		t.Errorf("refused = %s, want %+v", b, want)
	}
}
