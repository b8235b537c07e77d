package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"

	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/shim"
)

func TestMain(m *testing.M) {
	MaybeShim() // the test binary provides the reap and service shims
	if mode := os.Getenv(guardServerEnv); mode != "" {
		guardServer(mode) // TestGuardKillsWhatOutlivesTheServer's server
	}
	os.Exit(m.Run())
}

func self(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestShimServiceEnv proves the service shim keeps its environment minus
// PWD and leaves stdout and stderr apart (the init shim merges them).
func TestShimServiceEnv(t *testing.T) {
	env, err := exec.LookPath("env")
	if err != nil {
		t.Skipf("SKIPPING: no env program: %v", err)
	}
	spec := shim.Spec{Mode: shim.Service, Path: env, Argv: []string{"env"}}
	cmd := exec.Command(self(t), spec.Args()...)
	cmd.Env = []string{"PWD=/somewhere", "A=1", "PATH=/usr/bin:/bin", "B=two words"}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("service shim: %v (stderr %q)", err, stderr.String())
	}
	if got, want := stdout.String(), "A=1\nPATH=/usr/bin:/bin\nB=two words\n"; got != want {
		t.Errorf("environment through the service shim = %q, want %q", got, want)
	}

	spec = shim.Spec{Mode: shim.Service, Path: "/nonexistent/x", Argv: []string{"x"}}
	cmd = exec.Command(self(t), spec.Args()...)
	cmd.Env = []string{}
	stdout.Reset()
	stderr.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 127 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "start /nonexistent/x") {
		t.Errorf("missing exe: err %v, stdout %q, stderr %q; want exit 127, the reason on stderr only", err, stdout.String(), stderr.String())
	}
}

func TestForwardLines(t *testing.T) {
	long := strings.Repeat("x", MaxStderrLine+10)
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"lines", "a\nb\r\n\nc", []string{"a", "b", "", "c"}},
		{"long line cut", long + "\nnext\n", []string{long[:MaxStderrLine] + " [line cut]", "next"}},
		{"empty", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			forwardLines(strings.NewReader(tc.in), func(l string) { got = append(got, l) })
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
				t.Errorf("forwardLines(%.20q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	// The total is bounded, and everything is still read.
	line := strings.Repeat("y", 1000) + "\n"
	r := &countingReader{r: strings.NewReader(strings.Repeat(line, 2*MaxStderrBytes/len(line)))}
	var n int
	var last string
	forwardLines(r, func(l string) { n++; last = l })
	if n > MaxStderrBytes/len(line)+2 || !strings.Contains(last, "the rest of this process's stderr is dropped") {
		t.Errorf("%d lines passed on, last %q: want at most %d and the cap marker", n, last, MaxStderrBytes/len(line)+2)
	}
	if r.n != int64(2*MaxStderrBytes/len(line)*len(line)) {
		t.Errorf("read %d bytes, want all of them", r.n)
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// directServices returns DirectServices in each tracking mode this host
// supports.
func directServices(t *testing.T) map[string]*DirectServices {
	t.Helper()
	out := map[string]*DirectServices{"reap": {Shim: self(t)}}
	cg := cgroup.Setup()
	t.Cleanup(cg.Close)
	if cg.V2 != "" {
		out["cgroup2"] = &DirectServices{Cgroups: cg, Shim: self(t)}
	} else {
		out["cgroup2"] = nil
		noCgroup2 = fmt.Sprintf("no writable cgroup2 hierarchy (%v): the cgroup2 tracking mode cannot be tested", cg.Notes)
	}
	return out
}

// noCgroup2 says why the cgroup2 mode is not tested here.
var noCgroup2 string

// needMode skips a subtest of a tracking mode this host lacks (d is nil),
// loudly, or fails it under TOOLGATE_REQUIRE_ALL=1.
func needMode(t *testing.T, d *DirectServices) {
	t.Helper()
	if d == nil {
		testbin.Missing(t, "%s", noCgroup2)
	}
}

// TestDirectService proves an unsandboxed service gets exactly Env plus its
// variables, pipes, and that Kill ends it and what it started.
func TestDirectService(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		testbin.Missing(t, "no sh: %v", err)
	}
	for mode, d := range directServices(t) {
		t.Run(mode, func(t *testing.T) {
			needMode(t, d)
			var mu sync.Mutex
			var errLines []string
			// The script is the test's own fixture, not toolgate code.
			script := `env | sort; echo to-stderr >&2; read line; echo "got $line"; sleep 60 & echo $! ; wait`
			p, err := d.StartService(context.Background(), Service{
				ID: fmt.Sprintf("svc-direct-%d-%s", os.Getpid(), mode), Name: "sh",
				Path: sh, Argv: []string{sh, "-c", script}, Env: []string{"TOKEN=value-1"},
				Stderr: func(l string) { mu.Lock(); errLines = append(errLines, l); mu.Unlock() },
			})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if _, err := p.Stdin().Write([]byte("hello\n")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4096)
			var out string
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(out, "got hello\n") || strings.Count(out, "\n") < 8 {
				if time.Now().After(deadline) {
					t.Fatalf("stdout so far %q", out)
				}
				n, err := p.Stdout().Read(buf)
				out += string(buf[:n])
				if err != nil {
					t.Fatalf("read: %v (stdout %q)", err, out)
				}
			}
			// sh itself adds PWD, SHLVL and _; nothing of the test's
			// environment may be there.
			allowed := map[string]bool{
				"GIT_CONFIG_NOSYSTEM=1": true, "GIT_PAGER=cat": true, "PAGER=cat": true,
				"PATH=" + DefaultPath: true, "TOKEN=value-1": true,
			}
			seen := 0
			for l := range strings.SplitSeq(out, "\n") {
				k, _, ok := strings.Cut(l, "=")
				switch {
				case !ok:
				case allowed[l]:
					seen++
				case k == "PWD" || k == "SHLVL" || k == "_":
				default:
					t.Errorf("unexpected variable %q in the service's environment", l)
				}
			}
			if seen != len(allowed) {
				t.Errorf("environment %q: want every one of %v", out, allowed)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			var child int
			fmt.Sscanf(lines[len(lines)-1], "%d", &child)
			p.Kill()
			if child <= 0 {
				t.Fatalf("no child pid in %q", out)
			}
			if err := waitGone(child, 5*time.Second); err != nil {
				t.Errorf("a process the service started survived Kill: %v", err)
			}
			mu.Lock()
			if strings.Join(errLines, "|") != "to-stderr" {
				t.Errorf("stderr lines = %q, want [to-stderr]", errLines)
			}
			mu.Unlock()
		})
	}
}

// waitGone waits until pid no longer exists (or is a zombie).
func waitGone(pid int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil
		}
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("pid %d still running after %s", pid, d)
}

// TestServiceExit proves a service that exits by itself is reaped and its
// exit status is kept.
func TestServiceExit(t *testing.T) {
	for mode, d := range directServices(t) {
		t.Run(mode, func(t *testing.T) {
			needMode(t, d)
			p, err := d.StartService(context.Background(), Service{
				ID: fmt.Sprintf("svc-exit-%d-%s", os.Getpid(), mode), Name: "false",
				Path: "/bin/sh", Argv: []string{"/bin/sh", "-c", "exit 3"},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			select {
			case <-p.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("Done not closed after the service exited")
			}
			if got := p.ExitCode(); got != 3 {
				t.Errorf("ExitCode() = %d, want 3", got)
			}
			if b, err := io.ReadAll(p.Stdout()); err != nil || len(b) != 0 {
				t.Errorf("stdout = %q, %v; want EOF", b, err)
			}
		})
	}
}

func TestCheckServiceBind(t *testing.T) {
	for _, tc := range []struct {
		path    string
		wantErr string
	}{
		{"/opt/mcp", ""},
		{"/srv/data/x", ""},
		{"/etc", "cannot be bound into a sandbox"},
		{"/home", "cannot be bound into a sandbox"},
		{"/", "cannot be bound into a sandbox"},
		{"/proc/1", "under /proc"},
		{"/etc/mcp.conf", "under /etc"},
		{"relative", "not an absolute, clean path"},
		{"/opt/../etc", "not an absolute, clean path"},
	} {
		err := CheckServiceBind(tc.path)
		if (tc.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("CheckServiceBind(%q) = %v, want %q", tc.path, err, tc.wantErr)
		}
	}
}

// TestShimEnterKeepsParentDeathSignal: changing credentials clears the
// parent-death signal toolgate gives every process it starts, so the
// enter shim, which drops to the sandbox uid before it execs bwrap, arms
// it again: a server killed while a sandbox is being set up (a pool's
// preparation right after a call) must not leave it running.
func TestShimEnterKeepsParentDeathSignal(t *testing.T) {
	if os.Geteuid() != 0 {
		testbin.Missing(t, "the enter shim drops privileges only when toolgate is root")
	}
	probe := testbin.Probe(t)
	spec := shim.Spec{Mode: shim.Enter, Drop: &shim.IDs{UID: SandboxUID, GID: SandboxGID}, Path: probe, Argv: []string{probe, "pdeathsig"}}
	cmd := exec.Command(self(t), spec.Args()...)
	cmd.Env = Env
	cmd.SysProcAttr = processAttr(nil, nil)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("enter shim: %v: %s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), fmt.Sprintf("pdeathsig=%d ok", syscall.SIGKILL); got != want {
		t.Errorf("the tool the enter shim execs as uid %d: %q, want %q", SandboxUID, got, want)
	}
}
