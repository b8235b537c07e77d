package direct

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/cgroup"
)

func TestMain(m *testing.M) {
	rt.MaybeShim() // the test binary provides the reap shim
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// runners returns the direct runner in each tracking mode: by cgroup2
// group, and by the reap shim. A mode this host does not support is nil,
// and its subtests are skipped loudly (testbin.Missing).
func runners(t *testing.T) map[string]*Runner {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*Runner{"reap": {Shim: self}}
	cg := cgroup.Setup()
	t.Cleanup(cg.Close)
	out["cgroup2"] = nil
	if cg.V2 != "" {
		out["cgroup2"] = &Runner{Cgroups: cg, Shim: self}
	} else {
		noCgroup2 = fmt.Sprintf("no writable cgroup2 hierarchy (%v): the cgroup2 tracking mode cannot be tested", cg.Notes)
	}
	return out
}

// noCgroup2 says why the cgroup2 mode is not tested here.
var noCgroup2 string

var seq int

func inv(t *testing.T, dir string, timeout time.Duration, max int, args ...string) rt.Invocation {
	t.Helper()
	probe := testbin.Probe(t)
	seq++
	return rt.Invocation{
		ID:       fmt.Sprintf("t%d-%d", os.Getpid(), seq),
		Template: rt.Template{Name: "probe", Path: probe, Argv: append([]string{probe}, args...), Dir: dir},
		Call:     rt.Call{Timeout: timeout, MaxBytes: max},
	}
}

func eachRunner(t *testing.T, f func(t *testing.T, r *Runner)) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			if r == nil {
				testbin.Missing(t, "%s", noCgroup2)
			}
			if r.Tracking() != name {
				t.Fatalf("Tracking() = %q, want %q", r.Tracking(), name)
			}
			f(t, r)
		})
	}
}

func run(t *testing.T, r *Runner, i rt.Invocation) rt.Result {
	t.Helper()
	res, err := r.Run(context.Background(), i)
	if err != nil {
		t.Fatalf("Run(%q) error: %v", i.Argv, err)
	}
	return res
}

func TestExitCodeAndOutput(t *testing.T) {
	eachRunner(t, func(t *testing.T, r *Runner) {
		dir := t.TempDir()
		for _, tc := range []struct {
			args []string
			code int
			out  string
		}{
			{[]string{"echo", "hello", "world"}, 0, "hello world\n"},
			{[]string{"exit", "3"}, 3, "bye\n"},
			{[]string{"exit", "0"}, 0, "bye\n"},
			{[]string{"stderr"}, 0, "to stdout\nto stderr\n"},
			{[]string{"stdin"}, 0, "stdin bytes=0\n"},
			{[]string{"cwd"}, 0, dir + "\n"},
			{[]string{"argv", "a b", "", "--x=$HOME", "*"}, 0, ""},
		} {
			res := run(t, r, inv(t, dir, 10*time.Second, 4096, tc.args...))
			if res.ExitCode != tc.code {
				t.Errorf("%q: ExitCode = %d, want %d (output %q)", tc.args, res.ExitCode, tc.code, res.Output)
			}
			if tc.out != "" && string(res.Output) != tc.out {
				t.Errorf("%q: Output = %q, want %q", tc.args, res.Output, tc.out)
			}
			if res.TimedOut || res.Truncated || res.Limit != rt.LimitNone || res.Failed() != (tc.code != 0) {
				t.Errorf("%q: unexpected flags %+v", tc.args, res)
			}
		}
	})
}

// TestArgvIsExact: no shell, no expansion, argv[0] is the exe as
// configured.
func TestArgvIsExact(t *testing.T) {
	eachRunner(t, func(t *testing.T, r *Runner) {
		i := inv(t, t.TempDir(), 10*time.Second, 4096, "argv", "a b", "", "--x=$HOME", "*", "`id`")
		res := run(t, r, i)
		want := fmt.Sprintf("%q\n%q\n%q\n%q\n%q\n%q\n%q\n", i.Argv[0], "argv", "a b", "", "--x=$HOME", "*", "`id`")
		if string(res.Output) != want {
			t.Errorf("Output = %q, want %q", res.Output, want)
		}
	})
}

// TestEnvironmentIsExact: the tool sees exactly the four variables, none of
// the server's.
func TestEnvironmentIsExact(t *testing.T) {
	t.Setenv("TOOLGATE_TEST_SECRET", "s3cret")
	// toolgate's own OpenTelemetry settings never reach a tool.
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer s3cret")
	t.Setenv("OTEL_SERVICE_NAME", "toolgate")
	eachRunner(t, func(t *testing.T, r *Runner) {
		res := run(t, r, inv(t, t.TempDir(), 10*time.Second, 4096, "env"))
		want := "GIT_CONFIG_NOSYSTEM=1\nGIT_PAGER=cat\nPAGER=cat\nPATH=" + rt.DefaultPath + "\n"
		if string(res.Output) != want {
			t.Errorf("environment = %q, want %q", res.Output, want)
		}
	})
}

func TestOutputCap(t *testing.T) {
	eachRunner(t, func(t *testing.T, r *Runner) {
		res := run(t, r, inv(t, t.TempDir(), 10*time.Second, 1000, "flood", "100000"))
		if len(res.Output) != 1000 || res.OutputBytes != 100000 || res.Dropped != 99000 || !res.Truncated {
			t.Errorf("kept %d, total %d, dropped %d, truncated %v; want 1000, 100000, 99000, true",
				len(res.Output), res.OutputBytes, res.Dropped, res.Truncated)
		}
		if res.ExitCode != 0 {
			t.Errorf("ExitCode = %d: the tool must never block on a full pipe", res.ExitCode)
		}
		// Exactly at the cap is not truncated.
		res = run(t, r, inv(t, t.TempDir(), 10*time.Second, 1000, "flood", "1000"))
		if len(res.Output) != 1000 || res.Truncated {
			t.Errorf("flood of exactly max: kept %d truncated %v", len(res.Output), res.Truncated)
		}
	})
}

// TestFloodBoundedMemory: 200 MB through a 1 MiB cap keeps the runner's
// memory bounded.
func TestFloodBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	eachRunner(t, func(t *testing.T, r *Runner) {
		before := vmHWM(t)
		res := run(t, r, inv(t, t.TempDir(), 60*time.Second, 1<<20, "flood", strconv.Itoa(200<<20)))
		if len(res.Output) != 1<<20 || res.OutputBytes != 200<<20 || !res.Truncated || res.ExitCode != 0 {
			t.Fatalf("kept %d total %d truncated %v exit %d", len(res.Output), res.OutputBytes, res.Truncated, res.ExitCode)
		}
		if grew := vmHWM(t) - before; grew > 16<<20 {
			t.Errorf("peak RSS grew by %d MiB for a 200 MB flood; want bounded (< 16 MiB)", grew>>20)
		}
		t.Logf("200 MB flood: %s", res.Elapsed)
	})
}

func vmHWM(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(b)
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n << 10
}

// TestTimeoutKillsTree: a tool that ignores SIGTERM, with a setsid child
// that does too, is SIGKILLed at the timeout with everything it started.
func TestTimeoutKillsTree(t *testing.T) {
	eachRunner(t, func(t *testing.T, r *Runner) {
		start := time.Now()
		res := run(t, r, inv(t, t.TempDir(), time.Second, 4096, "ignoreterm"))
		took := time.Since(start)
		if !res.TimedOut || res.Limit != rt.LimitTimeout || !res.Failed() {
			t.Errorf("TimedOut %v Limit %q, want a timeout", res.TimedOut, res.Limit)
		}
		if res.ExitCode != 128+9 {
			t.Errorf("ExitCode = %d, want 137 (SIGKILL)", res.ExitCode)
		}
		if took > 3*time.Second {
			t.Errorf("call took %s with a 1s timeout", took)
		}
		for _, pid := range pids(t, res.Output, `(?:child|ignoring) pid=(\d+)`, 3) {
			assertGone(t, pid)
		}
	})
}

// TestDaemonDoesNotDelay: a setsid double-forked grandchild holding the
// output pipe neither delays the result nor survives the call.
func TestDaemonDoesNotDelay(t *testing.T) {
	eachRunner(t, func(t *testing.T, r *Runner) {
		// The baseline is a trivial call in the same mode: the reap shim's
		// start-up (slow under -race) is not the daemon's doing.
		start := time.Now()
		run(t, r, inv(t, t.TempDir(), 30*time.Second, 4096, "exit", "0"))
		base := time.Since(start)
		start = time.Now()
		res := run(t, r, inv(t, t.TempDir(), 30*time.Second, 4096, "daemon"))
		took := time.Since(start)
		if res.ExitCode != 0 || res.TimedOut {
			t.Fatalf("ExitCode %d TimedOut %v output %q", res.ExitCode, res.TimedOut, res.Output)
		}
		// The direct child exits after ~100 ms; the call must return within
		// 200 ms of that.
		if took > 2*base+100*time.Millisecond+rt.DrainGrace+100*time.Millisecond {
			t.Errorf("call took %s (a trivial call %s): the daemon delayed it", took, base)
		}
		if !bytes.Contains(res.Output, []byte("parent exiting")) {
			t.Errorf("output %q lacks the parent's line", res.Output)
		}
		for _, pid := range pids(t, res.Output, `grandchild pid=(\d+)`, 1) {
			assertGone(t, pid)
		}
	})
}

// TestDetachedDaemonDies: a daemon with its own session and no stdio does
// not hold the pipe, and still does not survive the call.
func TestDetachedDaemonDies(t *testing.T) {
	eachRunner(t, func(t *testing.T, r *Runner) {
		res := run(t, r, inv(t, t.TempDir(), 30*time.Second, 4096, "detached"))
		for _, pid := range pids(t, res.Output, `detached pid=(\d+)`, 1) {
			assertGone(t, pid)
		}
	})
}

func pids(t *testing.T, out []byte, re string, want int) []int {
	t.Helper()
	var ps []int
	for _, m := range regexp.MustCompile(re).FindAllSubmatch(out, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		ps = append(ps, n)
	}
	if len(ps) != want {
		t.Fatalf("found pids %v in %q, want %d", ps, out, want)
	}
	return ps
}

// assertGone fails if pid is still a live (non-zombie) process running the
// probe shortly after the call returned.
func assertGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		fields := strings.Fields(string(b))
		if len(fields) > 2 && fields[2] == "Z" || !strings.Contains(filepath.Base(exe), "probe") {
			return // a zombie awaiting its reaper, or the pid was reused
		}
		if time.Now().After(deadline) {
			t.Errorf("process %d (%s) survived the call", pid, exe)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCancellation(t *testing.T) {
	eachRunner(t, func(t *testing.T, r *Runner) {
		// Cancelled once the tool has written its three lines (the pids
		// of the two processes that ignore SIGTERM): at a fixed time, a
		// loaded host may not have started them yet.
		ctx, cancel := context.WithCancel(context.Background())
		i := inv(t, t.TempDir(), 30*time.Second, 4096, "ignoreterm")
		var seen atomic.Int64
		i.Seen = &seen
		var cancelled atomic.Int64
		go func() {
			// Two lines are at most 39 bytes (7-digit pids): 42 are three.
			for deadline := time.Now().Add(10 * time.Second); seen.Load() < 42 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			cancelled.Store(time.Now().UnixNano())
			cancel()
		}()
		res, err := r.Run(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		if res.Limit != rt.LimitCancelled || res.TimedOut || !res.Failed() {
			t.Errorf("Limit %q TimedOut %v, want cancelled", res.Limit, res.TimedOut)
		}
		if took := time.Since(time.Unix(0, cancelled.Load())); took > time.Second {
			t.Errorf("the call ended %s after its cancellation", took)
		}
		for _, pid := range pids(t, res.Output, `(?:child|ignoring) pid=(\d+)`, 3) {
			assertGone(t, pid)
		}
	})
}

func TestStartErrors(t *testing.T) {
	eachRunner(t, func(t *testing.T, r *Runner) {
		i := inv(t, t.TempDir(), 10*time.Second, 4096, "echo", strings.Repeat("x", 256<<10))
		start := time.Now()
		res, err := r.Run(context.Background(), i)
		// Either "could not run" or a failed result naming the cause: never
		// a hang and never success.
		switch {
		case err != nil:
			if !strings.Contains(err.Error(), "argument list too long") {
				t.Errorf("error %v, want argument list too long", err)
			}
		case res.ExitCode == 0 || !bytes.Contains(res.Output, []byte("argument list too long")):
			t.Errorf("result %d %q, want a failure naming argument list too long", res.ExitCode, res.Output)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("E2BIG took %s", took)
		}
	})
}

func TestConcurrentCallsDoNotMix(t *testing.T) {
	eachRunner(t, func(t *testing.T, r *Runner) {
		dir := t.TempDir()
		var wg sync.WaitGroup
		errs := make(chan string, 16)
		invs := make([]rt.Invocation, 16)
		for n := range invs {
			invs[n] = inv(t, dir, 20*time.Second, 4096, "echo", "call", strconv.Itoa(n))
		}
		for n := range invs {
			wg.Go(func() {
				res, err := r.Run(context.Background(), invs[n])
				if err != nil || string(res.Output) != fmt.Sprintf("call %d\n", n) {
					errs <- fmt.Sprintf("call %d: %q %v", n, res.Output, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
	})
}

// TestProcessSpans: a call whose context holds a span gets the process
// run's span (start to exit, the exit code) and the output capture's
// (exit to drained, the bytes) under it.
func TestProcessSpans(t *testing.T) {
	eachRunner(t, func(t *testing.T, r *Runner) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		ctx, parent := tp.Tracer("t").Start(context.Background(), "call")
		res, err := r.Run(ctx, inv(t, t.TempDir(), 10*time.Second, 4096, "exit", "3"))
		parent.End()
		if err != nil || res.ExitCode != 3 {
			t.Fatalf("Run = %+v, %v", res, err)
		}
		spans := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			spans[s.Name()] = s
		}
		run, capture := spans["process run"], spans["output capture"]
		if run == nil || capture == nil {
			t.Fatalf("spans = %v, want process run and output capture", spans)
		}
		for _, s := range []sdktrace.ReadOnlySpan{run, capture} {
			if s.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("%s: parent %s, want the call's %s", s.Name(), s.Parent().SpanID(), parent.SpanContext().SpanID())
			}
		}
		want := map[string]map[string]string{
			"process run":    {"process.exit.code": "3"},
			"output capture": {"toolgate.output.bytes": "4", "toolgate.output.truncated": "false"},
		}
		for name, attrs := range want {
			got := map[string]string{}
			for _, kv := range spans[name].Attributes() {
				got[string(kv.Key)] = kv.Value.String()
			}
			for k, v := range attrs {
				if got[k] != v {
					t.Errorf("%s: %s = %q, want %q", name, k, got[k], v)
				}
			}
		}
		if capture.StartTime().Before(run.EndTime()) {
			t.Errorf("output capture starts %v, before the run's end %v", capture.StartTime(), run.EndTime())
		}
	})
}
