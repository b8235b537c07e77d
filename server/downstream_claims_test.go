package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
	"github.com/toolgate/toolgate/runtime/cgroup"
)

// TestDownstreamDefaultCap: with no --downstream-max-bytes, a result is
// cut at 1 MiB: one a little under passes whole, one a little over is cut
// and isError, naming the cap.
func TestDownstreamDefaultCap(t *testing.T) {
	r := probeRegistry(t, `"plain"`, `"text"`)
	h := newHarness(t, Options{}, gateway.Options{Registry: r}, nil)
	res := h.call(t, "probe__text", map[string]any{"bytes": 1<<20 - 2048})
	if res.IsError || len(resultText(res)) != 1<<20-2048 {
		t.Errorf("a result just under 1 MiB: isError %v, %d bytes of text, want it whole", res.IsError, len(resultText(res)))
	}
	res = h.call(t, "probe__text", map[string]any{"bytes": 1<<20 + 1024})
	if text := resultText(res); !res.IsError || !strings.Contains(text, "over the cap of 1048576 bytes; dropped: the end of a text item]") {
		t.Errorf("a result just over 1 MiB: isError %v, text %.80q…%q, want it cut at the 1 MiB default", res.IsError, text, text[max(0, len(text)-120):])
	}
}

// TestDownstreamAllowlistRecheck: a handler made for a tool the allowlist
// omits (as if registration had gone wrong) still refuses at call time,
// and the server never receives the call.
func TestDownstreamAllowlistRecheck(t *testing.T) {
	h := fakeHarness(t, true, 0)
	var d *gateway.Server
	h.s.mu.RLock()
	d = h.s.down.servers[0].d
	h.s.mu.RUnlock()
	req := mcp.CallToolRequest{}
	req.Params.Name = "fake__hidden"
	res, err := d.Handler("hidden")(context.Background(), req)
	if err != nil || !res.IsError || !strings.Contains(resultText(res), `fake__hidden: not in enabled_tools of "fake"`) {
		t.Errorf("handler(hidden) = %v, %q; want the allowlist refusal", err, resultText(res))
	}
	if res := h.call(t, "fake__echo", map[string]any{"text": "after"}); res.IsError {
		t.Fatal(resultText(res))
	}
	time.Sleep(200 * time.Millisecond) // the stderr lines of the calls
	if logs := h.logs.String(); strings.Contains(logs, "call hidden") || !strings.Contains(logs, "call echo") {
		t.Errorf("the server's calls (from its stderr): hidden reached it, or echo did not:\n%s", logs)
	}
}

// TestDownstreamSerialised: with supports_parallel_tool_calls = false two
// concurrent calls run one after the other; with true, together.
func TestDownstreamSerialised(t *testing.T) {
	for _, parallel := range []bool{false, true} {
		t.Run(fmt.Sprintf("parallel=%v", parallel), func(t *testing.T) {
			reg := strings.Replace(fakeRegistry, "supports_parallel_tool_calls = true", fmt.Sprintf("supports_parallel_tool_calls = %v", parallel), 1)
			reg = strings.Replace(reg, "tool_timeout_sec = 2", "tool_timeout_sec = 10", 1)
			r := loadRegistry(t, map[string]string{"10-fake.toml": reg})
			h := newHarness(t, Options{}, gateway.Options{Registry: r, Eager: true},
				map[string]string{"TOOLGATE_FAKE_SECRET": "fake-secret-value-1"})
			start := time.Now()
			var wg sync.WaitGroup
			took := make([]time.Duration, 2)
			for i := range took {
				wg.Go(func() {
					if res := h.call(t, "fake__sleep", map[string]any{"seconds": 1}); res.IsError {
						t.Errorf("sleep: %s", resultText(res))
					}
					took[i] = time.Since(start)
				})
			}
			wg.Wait()
			last := max(took[0], took[1])
			t.Logf("two 1 s calls, parallel %v: answered after %s and %s", parallel, took[0].Round(time.Millisecond), took[1].Round(time.Millisecond))
			if !parallel && last < 1900*time.Millisecond {
				t.Errorf("serialised: the second call answered after %s, want after the first (2 s)", last)
			}
			if parallel && last > 1800*time.Millisecond {
				t.Errorf("parallel: the calls took %s, want about 1 s together", last)
			}
		})
	}
}

// TestDownstreamSandboxLimits: a sandboxed stdio server runs, for its
// life, under the per-call limits: the rlimits the flags set and the pids
// cgroup.
func TestDownstreamSandboxLimits(t *testing.T) {
	if _, err := bwrap.Find(); err != nil {
		testbin.Missing(t, "%v", err)
	}
	cg := cgroup.Setup()
	t.Cleanup(cg.Close)
	limits := rt.DefaultSandboxLimits()
	limits.Pids, limits.NoFile, limits.FSize, limits.Core = 24, 77, 12345678, 0
	services, err := bwrap.New(context.Background(), bwrap.Config{Shim: testbin.Shim(t), Cgroups: cg, Limits: limits})
	if errors.Is(err, bundle.ErrNoSeccomp) {
		testbin.Missing(t, "this test binary was built without -tags seccomp (go test -tags seccomp): %v", err)
	}
	if err != nil {
		t.Fatalf("bwrap: %v", err)
	}
	r := loadRegistry(t, map[string]string{"10-probe.toml": fmt.Sprintf(`schema_version = 8

[tool_mcp_servers.probe]
transport = "stdio"
command = %q
args = ["mcp"]
enabled_tools = ["limits", "forks"]
default_tools_approval_mode = "auto"
startup_timeout_sec = 60
tool_timeout_sec = 60
`, testbin.Probe(t))})
	if r.State != conf.StateLoaded {
		t.Fatalf("registry %s: %v", r.State, r.Err())
	}
	h := newHarness(t, Options{Sandbox: rt.ReadySandbox("bwrap", services)}, gateway.Options{Registry: r, Services: services}, nil)
	got := resultText(h.call(t, "probe__limits", nil))
	for _, want := range []string{
		"Max open files 77 77 files", "Max file size 12345678 12345678 bytes", "Max core file size 0 0 bytes",
		fmt.Sprintf("Max processes %d %d processes", limits.NProc, limits.NProc),
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the sandboxed server's rlimits lack %q:\n%s", want, got)
		}
	}
	var started, n int
	text := resultText(h.call(t, "probe__forks", map[string]any{"n": 100}))
	t.Logf("the sandboxed server's rlimits:\n%s\nforks: %s", got, text)
	if _, err := fmt.Sscanf(text, "started %d of %d", &started, &n); err != nil || started >= 24 || started < 3 {
		t.Errorf("probe__forks = %q, want fewer than the 24 processes of the pids limit (and a few)", text)
	}
}
