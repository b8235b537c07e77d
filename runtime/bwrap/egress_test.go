package bwrap

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/egress/allowlist"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
)

// TestEgressShimKeepsCallSemantics: with an egress allowlist the init
// shim stays PID 1 and runs the tool as its child; the call must still
// look exactly as without one: the exit status, one stream for stdout
// and stderr, the timeout, and a daemonized grandchild that neither
// delays the call nor survives it. Once the call is over, its egress
// directory is gone.
func TestEgressShimKeepsCallSemantics(t *testing.T) {
	r := newRunner(t)
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	allow, err := allowlist.ParseList([]string{"api.example.com:443"})
	if err != nil {
		t.Fatal(err)
	}
	run := func(timeout time.Duration, args ...string) rt.Result {
		t.Helper()
		res, err := r.Run(context.Background(), rt.Invocation{
			ID:       "egress-" + args[0],
			Template: rt.Template{Name: "probe", Path: probe, Argv: append([]string{probe}, args...), Dir: dir},
			Call:     rt.Call{Timeout: timeout, MaxBytes: 1 << 16},
			Egress:   allow,
		})
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return res
	}
	if res := run(10*time.Second, "exit", "3"); res.ExitCode != 3 || string(res.Output) != "bye\n" {
		t.Errorf("exit 3: got exit %d, output %q", res.ExitCode, res.Output)
	}
	if res := run(10*time.Second, "stderr"); string(res.Output) != "to stdout\nto stderr\n" {
		t.Errorf("stderr: output %q, want both streams in one", res.Output)
	}
	if res := run(10*time.Second, "pid"); !strings.Contains(string(res.Output), "ppid=1") {
		t.Errorf("pid: %q, want the tool to be the child of the shim, PID 1", res.Output)
	}
	start := time.Now()
	res := run(time.Second, "ignoreterm")
	if !res.TimedOut || res.ExitCode != 137 || time.Since(start) > 5*time.Second {
		t.Errorf("timeout: timed out %v, exit %d after %s", res.TimedOut, res.ExitCode, time.Since(start))
	}
	start = time.Now()
	if res := run(10*time.Second, "daemon"); res.ExitCode != 0 || time.Since(start) > 5*time.Second {
		t.Errorf("daemon: exit %d after %s, output %q", res.ExitCode, time.Since(start), res.Output)
	}
	left, _ := filepath.Glob(filepath.Join(os.TempDir(), "toolgate-egress-"+strconv.Itoa(os.Getpid()), "*"))
	if len(left) > 0 {
		t.Errorf("egress directories left after the calls: %v", left)
	}
}
