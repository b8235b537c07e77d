package bwrap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/cgroup"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

func newRunner(t *testing.T) *Runner {
	t.Helper()
	if _, err := Find(); err != nil {
		testbin.Missing(t, "%v", err)
	}
	cg := cgroup.Setup()
	t.Cleanup(cg.Close)
	r, err := New(context.Background(), Config{Shim: testbin.Shim(t), Cgroups: cg, Limits: rt.DefaultSandboxLimits()})
	if errors.Is(err, bundle.ErrNoSeccomp) {
		// Plain go test ./...: every bwrap sandbox loads the seccomp
		// filter, which only the seccomp build can compile.
		testbin.Missing(t, "this test binary was built without -tags seccomp (go test -tags seccomp): %v", err)
	}
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

func TestRunSmoke(t *testing.T) {
	r := newRunner(t)
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	for _, args := range [][]string{{"env"}, {"id"}, {"cwd"}, {"status"}, {"pid"}, {"net", "127.0.0.1:1"}, {"write", dir + "/x", "/tmp/x", "/x", "/etc/x"}} {
		res, err := r.Run(context.Background(), rt.Invocation{ID: "smoke" + args[0], Template: rt.Template{Path: probe, Argv: append([]string{probe}, args...), Dir: dir}, Call: rt.Call{Timeout: 10 * time.Second, MaxBytes: 1 << 16}})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v: exit %d %s in %s\n%s", args, res.ExitCode, res.Limit, res.Elapsed, res.Output)
	}
}

// TestHint: each failure text seen in experiments (docs/deploy.md, "Running the
// image") maps to the fix an operator needs.
func TestHint(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		{"bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces", "unprivileged_userns_clone"},
		{"bwrap: setting up uid map: Permission denied", "user namespaces cannot be created"},
		{"bwrap: Can't set hostname to sandbox: Operation not permitted", "images/seccomp.json"},
		{"bwrap: Can't mount proc on /newroot/proc: Operation not permitted", "systempaths=unconfined"},
		{"bwrap: Unexpected capabilities but not setuid, old file caps config?", "drop the --cap-add"},
		{"toolgate: sandbox: setgroups: operation not permitted", "CAP_SETUID and CAP_SETGID"},
		{"toolgate: sandbox: set rlimit nofile=1024: operation not permitted", "--sandbox-nofile"},
		{"toolgate: sandbox: join cgroup /sys/fs/cgroup/pids/x/cgroup.procs: read-only file system", "--sandbox-pids 0 --sandbox-memory 0"},
		{"bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted", "NET_ADMIN"},
		{"toolgate: sandbox: new session keyring: operation not permitted", "seccomp=images/seccomp.json"},
		{"toolgate: sandbox: new session keyring: disk quota exceeded: the sandbox uid's key quota is used up", "kernel.keys.maxkeys"},
		{"bwrap: something new", ""},
	} {
		got := Hint(tc.msg)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("Hint(%q) = %q, want it to name %q", tc.msg, got, tc.want)
		}
	}
}

// TestRunHelperStreams: a helper run (Invocation.StderrMax set) keeps
// stderr apart from stdout inside the sandbox and is fed its Stdin; a tool
// call keeps one stream.
func TestRunHelperStreams(t *testing.T) {
	r := newRunner(t)
	dir := testbin.Dir(t)
	cat := "/usr/bin/cat"
	inv := rt.Invocation{
		ID:       "helper-streams",
		Template: rt.Template{Path: cat, Argv: []string{cat, "-", "/nonexistent"}, Dir: dir, SplitStderr: true, Stdin: true},
		Call:     rt.Call{Timeout: 10 * time.Second, MaxBytes: 1 << 16, StderrMax: 4096, Input: []byte("from stdin\n")},
	}
	res, err := r.Run(context.Background(), inv)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Output) != "from stdin\n" || !strings.Contains(string(res.Stderr), "/nonexistent") {
		t.Errorf("helper run: stdout %q, stderr %q; want the stdin on stdout and cat's complaint apart", res.Output, res.Stderr)
	}
	inv.ID, inv.StderrMax, inv.Input = "tool-streams", 0, nil
	inv.SplitStderr, inv.Stdin = false, false
	res, err = r.Run(context.Background(), inv)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res.Output), "/nonexistent") || len(res.Stderr) != 0 {
		t.Errorf("tool call: output %q, stderr %q; want one stream and stdin /dev/null", res.Output, res.Stderr)
	}
}

// TestSandboxUID: --sandbox-uid reaches the sandbox: a root server runs
// the tool as the chosen fixed uid and gid, inside the sandbox and on the
// host.
func TestSandboxUID(t *testing.T) {
	if os.Geteuid() != 0 {
		testbin.Missing(t, "the sandbox uid is chosen only when toolgate is root")
	}
	if _, err := Find(); err != nil {
		testbin.Missing(t, "%v", err)
	}
	cg := cgroup.Setup()
	t.Cleanup(cg.Close)
	limits := rt.DefaultSandboxLimits()
	limits.IDs = rt.IDRange{UID: 64123, GID: 64124, Count: 1, Shared: true}
	r, err := New(context.Background(), Config{Shim: testbin.Shim(t), Cgroups: cg, Limits: limits})
	if errors.Is(err, bundle.ErrNoSeccomp) {
		testbin.Missing(t, "this test binary was built without -tags seccomp (go test -tags seccomp): %v", err)
	}
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	probe, dir := testbin.Probe(t), testbin.Dir(t)
	res, err := r.Run(context.Background(), rt.Invocation{ID: "uid", Template: rt.Template{Path: probe, Argv: []string{probe, "id"}, Dir: dir}, Call: rt.Call{Timeout: 10 * time.Second, MaxBytes: 1 << 16}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "uid=64123 gid=64124 euid=64123"; res.ExitCode != 0 || !strings.Contains(string(res.Output), want) {
		t.Errorf("inside: exit %d, %q; want %q", res.ExitCode, res.Output, want)
	}
	// On the host: the kernel ids of the tool's process, as the host's
	// /proc shows them.
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = r.Run(context.Background(), rt.Invocation{ID: "uid-host", Template: rt.Template{Path: probe, Argv: []string{probe, "sleep", "2"}, Dir: dir}, Call: rt.Call{Timeout: 10 * time.Second, MaxBytes: 1 << 16}})
	}()
	want := probe + "\x00sleep\x002\x00"
	var status string
	for deadline := time.Now().Add(5 * time.Second); status == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range files {
			if b, _ := os.ReadFile(f); string(b) == want {
				st, _ := os.ReadFile(strings.TrimSuffix(f, "cmdline") + "status")
				status = string(st)
			}
		}
	}
	<-done
	if !strings.Contains(status, "\nUid:\t64123\t64123\t64123\t64123\n") || !strings.Contains(status, "\nGid:\t64124\t64124\t64124\t64124\n") {
		t.Errorf("on the host, the tool's status:\n%s\nwant uid 64123 and gid 64124", status)
	}
}

// BenchmarkRun is the per-call cost of a sandbox: /usr/bin/true run
// through Run, with the default limits (a per-call cgroup) and with no
// cgroup limits (a container's configuration).
func BenchmarkRun(b *testing.B) {
	if _, err := Find(); err != nil {
		b.Skipf("SKIPPING: %v", err)
	}
	dir := testbin.Dir(b)
	for _, bc := range []struct {
		name string
		cg   bool
	}{{"cgroup-limits", true}, {"no-cgroup-limits", false}} {
		b.Run(bc.name, func(b *testing.B) {
			cg := cgroup.Setup()
			b.Cleanup(cg.Close)
			limits := rt.DefaultSandboxLimits()
			if !bc.cg {
				limits.Pids, limits.Memory = 0, 0
			}
			r, err := Prepare(Config{Shim: testbin.Shim(b), Cgroups: cg, Limits: limits})
			if err != nil {
				b.Skipf("SKIPPING: %v", err)
			}
			// The median and the least per call too: on a shared
			// machine the mean follows whatever else runs.
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				res, err := r.Run(context.Background(), rt.Invocation{
					ID:       "bench-" + strconv.Itoa(len(took)),
					Template: rt.Template{Path: "/usr/bin/true", Argv: []string{"/usr/bin/true"}, Dir: dir}, Call: rt.Call{Timeout: 10 * time.Second, MaxBytes: 4096},
				})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("run: exit %d, %v: %s", res.ExitCode, err, res.Output)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "median-ns/op")
			b.ReportMetric(float64(took[0].Nanoseconds()), "min-ns/op")
		})
	}
}
