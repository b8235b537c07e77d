package runtime

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/runtime/shim"
)

// hostPreparer prepares "sandboxes" that are only the standby shim run on
// the host (this test binary in its shim mode): the release protocol and
// the pool's bookkeeping with real processes, without a sandbox. The
// sandboxed renderings are tested in runtime/bwrap and runtime/oci and by
// the battery.
type hostPreparer struct {
	t        *testing.T
	prepared atomic.Int64
	ran      atomic.Int64 // calls through Run (the call-path fallback)
}

func (h *hostPreparer) Prepare(tpl Template) (*Standby, error) {
	h.prepared.Add(1)
	spec := shim.Spec{Mode: shim.Standby, KeepStderr: tpl.SplitStderr, ReleaseFD: ReleaseFD(0), Path: tpl.Path, Argv: tpl.Argv}
	return StartStandby(StandbyCmd{
		Proc:  Proc{Path: self(h.t), Args: append([]string{self(h.t)}, spec.Args()...), Env: Env, Dir: tpl.Dir},
		Fixed: []string{tpl.Dir, tpl.Path},
	})
}

func (h *hostPreparer) Run(ctx context.Context, inv Invocation) (Result, error) {
	h.ran.Add(1)
	return Exec(ctx, Cmd{Proc: Proc{Path: inv.Path, Args: inv.Argv, Env: Env, Dir: inv.Dir}, Call: inv.Call})
}

func lookTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("SKIPPING: no %s: %v", name, err)
	}
	return p
}

func readyStandby(t *testing.T, h *hostPreparer, tpl Template) *Standby {
	t.Helper()
	sb, err := h.Prepare(tpl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Discard(); sb.Cleanup() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sb.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return sb
}

// TestStandbyRelease: the tool starts only at the release, gets exactly
// the release's three streams (nothing else open) and exactly Env, and the
// call's clock starts at the release.
func TestStandbyRelease(t *testing.T) {
	sh := lookTool(t, "sh")
	dir := t.TempDir()
	h := &hostPreparer{t: t}
	// ls of /proc/self/fd lists 0 1 2 and its own directory descriptor.
	script := `echo "$@"; ls /proc/self/fd | tr '\n' ' '; echo; env | sort; echo to-stderr >&2; cat`
	sb := readyStandby(t, h, Template{Path: sh, Argv: []string{sh, "-c", script, "sh", "fixed", "argv"}, Dir: dir})
	time.Sleep(300 * time.Millisecond)
	res, err := sb.Release(context.Background(), Call{Timeout: 10 * time.Second, MaxBytes: 1 << 16, Input: []byte("from stdin\n")})
	if err != nil {
		t.Fatal(err)
	}
	sb.Cleanup()
	lines := strings.Split(strings.TrimSpace(string(res.Output)), "\n")
	if len(lines) < 2 || lines[0] != "fixed argv" || strings.TrimSpace(lines[1]) != "0 1 2 3" {
		t.Fatalf("argv and descriptors: %q", lines)
	}
	env := strings.Join(lines[2:6], "\n")
	if want := "GIT_CONFIG_NOSYSTEM=1\nGIT_PAGER=cat\nPAGER=cat\nPATH=" + DefaultPath; env != want {
		t.Errorf("environment = %q, want %q", env, want)
	}
	if !strings.Contains(string(res.Output), "to-stderr\nfrom stdin\n") {
		t.Errorf("stderr is not stdout, or stdin did not arrive: %q", res.Output)
	}
	if res.ExitCode != 0 || res.Elapsed > 250*time.Millisecond {
		t.Errorf("exit %d, elapsed %s: the clock must start at the release", res.ExitCode, res.Elapsed)
	}
	if _, err := sb.Release(context.Background(), Call{Timeout: time.Second, MaxBytes: 1}); !errors.Is(err, ErrStandbyUsed) {
		t.Errorf("a second release = %v, want ErrStandbyUsed", err)
	}
}

// TestStandbyKeepsStderrApart: a template with SplitStderr keeps the two
// streams apart, whatever the release passes.
func TestStandbyKeepsStderrApart(t *testing.T) {
	sh := lookTool(t, "sh")
	h := &hostPreparer{t: t}
	sb := readyStandby(t, h, Template{Path: sh, Argv: []string{sh, "-c", "echo out; echo err >&2"}, Dir: t.TempDir(), SplitStderr: true})
	res, err := sb.Release(context.Background(), Call{Timeout: 10 * time.Second, MaxBytes: 4096, StderrMax: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Output) != "out\n" || string(res.Stderr) != "err\n" {
		t.Errorf("stdout %q, stderr %q", res.Output, res.Stderr)
	}
}

// TestStandbyDiscardRunsNothing: a sandbox discarded before its release
// never runs its tool, and its process is gone.
func TestStandbyDiscardRunsNothing(t *testing.T) {
	touch := lookTool(t, "touch")
	dir := t.TempDir()
	mark := filepath.Join(dir, "ran")
	h := &hostPreparer{t: t}
	sb := readyStandby(t, h, Template{Path: touch, Argv: []string{touch, mark}, Dir: dir})
	pid := sb.Pid()
	sb.Discard()
	sb.Cleanup()
	if _, err := os.Stat(mark); err == nil {
		t.Error("a discarded sandbox ran its tool")
	}
	if err := unix.Kill(pid, 0); err == nil {
		t.Errorf("the discarded sandbox's process %d is still there", pid)
	}
}

// TestStandbyRefusesABadRelease: a release message that is not exactly the
// go byte and three descriptors makes the shim exit without running
// anything.
func TestStandbyRefusesABadRelease(t *testing.T) {
	touch := lookTool(t, "touch")
	for _, tc := range []struct {
		name string
		data []byte
		fds  int
	}{
		{"two descriptors", []byte{shim.GoByte}, 2},
		{"no descriptor", []byte{shim.GoByte}, 0},
		{"more bytes", []byte("G/usr/bin/id"), 3},
		{"another byte", []byte{'X'}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mark := filepath.Join(dir, "ran")
			h := &hostPreparer{t: t}
			sb := readyStandby(t, h, Template{Path: touch, Argv: []string{touch, mark}, Dir: dir})
			null, _ := os.Open(os.DevNull)
			defer null.Close()
			var fds []int
			for range tc.fds {
				fds = append(fds, int(null.Fd()))
			}
			var oob []byte
			if len(fds) > 0 {
				oob = unix.UnixRights(fds...)
			}
			rc, _ := sb.ctl.SyscallConn()
			_ = rc.Write(func(fd uintptr) bool {
				err := unix.Sendmsg(int(fd), tc.data, oob, nil, 0)
				if err != nil {
					t.Errorf("sendmsg: %v", err)
				}
				return true
			})
			select {
			case <-sb.exited:
			case <-time.After(10 * time.Second):
				t.Fatal("the shim did not exit")
			}
			if _, err := os.Stat(mark); err == nil {
				t.Error("the tool ran after a bad release")
			}
			if said := sb.said(); !strings.Contains(said, "release message refused") {
				t.Errorf("the shim said %q", said)
			}
		})
	}
}

// TestStandbyStaleDir: a sandbox whose dir was replaced since it was
// prepared is not released.
func TestStandbyStaleDir(t *testing.T) {
	sh := lookTool(t, "sh")
	base := t.TempDir()
	dir := filepath.Join(base, "dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h := &hostPreparer{t: t}
	sb := readyStandby(t, h, Template{Path: sh, Argv: []string{sh, "-c", "true"}, Dir: dir})
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Release(context.Background(), Call{Timeout: time.Second, MaxBytes: 1}); !errors.Is(err, ErrStandbyStale) || !strings.Contains(err.Error(), dir+" changed") {
		t.Errorf("release with a replaced dir = %v, want ErrStandbyStale naming %s", err, dir)
	}
}
