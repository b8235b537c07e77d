package runtime

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"
)

// These tests run /bin/sh and coreutils as stand-in helpers: they are test
// fixtures, not how toolgate runs anything.

func TestRunHelperStreams(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		script                 string
		maxOut, maxErr         int
		wantOut, wantErr       string
		wantOutCut, wantErrCut bool
		wantOutN, wantErrN     int64
		wantExit               int
	}{
		{
			name: "separate streams", script: "echo out; echo err >&2", maxOut: 100, maxErr: 100,
			wantOut: "out\n", wantErr: "err\n", wantOutN: 4, wantErrN: 4,
		},
		{
			name: "stdout capped alone", script: "head -c 100000 /dev/zero | tr '\\0' o; echo err >&2", maxOut: 10, maxErr: 100,
			wantOut: "oooooooooo", wantErr: "err\n", wantOutCut: true, wantOutN: 100000, wantErrN: 4,
		},
		{
			name: "stderr capped alone", script: "echo out; head -c 5000 /dev/zero | tr '\\0' e >&2; exit 3", maxOut: 100, maxErr: 3,
			wantOut: "out\n", wantErr: "eee", wantErrCut: true, wantOutN: 4, wantErrN: 5000, wantExit: 3,
		},
		{
			name: "stdin is /dev/null", script: "cat; echo done", maxOut: 100, maxErr: 100,
			wantOut: "done\n", wantOutN: 5,
		},
		{name: "killed by a signal", script: "kill -9 $$", maxOut: 100, maxErr: 100, wantExit: 128 + 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := RunHelper(context.Background(), HelperCmd{
				Path: "/bin/sh", Args: []string{"-c", tc.script}, Dir: "/",
				Timeout: 10 * time.Second, MaxStdout: tc.maxOut, MaxStderr: tc.maxErr,
			})
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Stdout) != tc.wantOut || string(res.Stderr) != tc.wantErr || res.StdoutCut != tc.wantOutCut ||
				res.StderrCut != tc.wantErrCut || res.StdoutBytes != tc.wantOutN || res.StderrBytes != tc.wantErrN ||
				res.ExitCode != tc.wantExit || res.TimedOut {
				t.Fatalf("RunHelper = %+v\nwant stdout %q (%d, cut %v) stderr %q (%d, cut %v) exit %d", res,
					tc.wantOut, tc.wantOutN, tc.wantOutCut, tc.wantErr, tc.wantErrN, tc.wantErrCut, tc.wantExit)
			}
		})
	}
}

func TestRunHelperEnvAndDir(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TOOLGATE_SECRET_TEST", "leak")
	res, err := RunHelper(context.Background(), HelperCmd{
		Path: "/usr/bin/env", Dir: dir, Timeout: 5 * time.Second,
		MaxStdout: 4096, MaxStderr: 4096,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if !slices.Equal(got, testbin.ToolEnv) {
		t.Fatalf("helper environment %q, want exactly %q", got, testbin.ToolEnv)
	}
	res, err = RunHelper(context.Background(), HelperCmd{
		Path: "/bin/pwd", Dir: dir, Timeout: 5 * time.Second,
		MaxStdout: 4096, MaxStderr: 4096,
	})
	if err != nil {
		t.Fatal(err)
	}
	if canon, _ := filepath.EvalSymlinks(dir); strings.TrimSpace(string(res.Stdout)) != canon {
		t.Fatalf("ran in %q, want %q", res.Stdout, canon)
	}
}

// alive reports whether pid exists (and is not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := bytes.Cut(b, []byte(") "))
	return len(rest) > 0 && rest[0] != 'Z'
}

func TestRunHelperKillsTheGroup(t *testing.T) {
	// The helper leaves a descendant holding stdout open and exits: the
	// run returns at once and the descendant is killed.
	start := time.Now()
	res, err := RunHelper(context.Background(), HelperCmd{
		Path: "/bin/sh",
		Args: []string{"-c", "sleep 30 & echo $!"}, Dir: "/", Timeout: 20 * time.Second, MaxStdout: 100, MaxStderr: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("RunHelper took %s: a descendant held the pipe", el)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("no pid printed: %q", res.Stdout)
	}
	deadline := time.Now().Add(2 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("descendant %d outlived the helper run", pid)
	}
}

func TestRunHelperTimeoutAndCancel(t *testing.T) {
	start := time.Now()
	res, err := RunHelper(context.Background(), HelperCmd{
		Path: "/bin/sh", Args: []string{"-c", "sleep 30"}, Dir: "/",
		Timeout: 200 * time.Millisecond, MaxStdout: 100, MaxStderr: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Limit != LimitTimeout || !res.Failed() || time.Since(start) > 5*time.Second {
		t.Fatalf("timeout: %+v after %s", res, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	res, err = RunHelper(ctx, HelperCmd{
		Path: "/bin/sleep", Args: []string{"30"}, Dir: "/",
		Timeout: 20 * time.Second, MaxStdout: 100, MaxStderr: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Limit != LimitCancelled || res.TimedOut || !res.Failed() {
		t.Fatalf("cancel: %+v", res)
	}
	// Already cancelled: nothing starts.
	res, err = RunHelper(ctx, HelperCmd{Path: "/bin/true", Dir: "/", Timeout: time.Second, MaxStdout: 1, MaxStderr: 1})
	if err != nil || res.Limit != LimitCancelled {
		t.Fatalf("cancelled before start: %+v, %v", res, err)
	}
}

func TestRunHelperRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    HelperCmd
	}{
		{"relative path", HelperCmd{Path: "sh", Dir: "/", Timeout: time.Second, MaxStdout: 1, MaxStderr: 1}},
		{"relative dir", HelperCmd{Path: "/bin/true", Dir: ".", Timeout: time.Second, MaxStdout: 1, MaxStderr: 1}},
		{"no timeout", HelperCmd{Path: "/bin/true", Dir: "/", MaxStdout: 1, MaxStderr: 1}},
		{"no stdout limit", HelperCmd{Path: "/bin/true", Dir: "/", Timeout: time.Second, MaxStderr: 1}},
		{"no stderr limit", HelperCmd{Path: "/bin/true", Dir: "/", Timeout: time.Second, MaxStdout: 1}},
		{"missing binary", HelperCmd{Path: "/nonexistent/helper", Dir: "/", Timeout: time.Second, MaxStdout: 1, MaxStderr: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := RunHelper(context.Background(), tc.h); err == nil {
				t.Fatalf("RunHelper(%+v) ran", tc.h)
			}
		})
	}
	_, err := RunHelper(context.Background(), HelperCmd{Path: "/nonexistent/helper", Dir: "/", Timeout: time.Second, MaxStdout: 1, MaxStderr: 1})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing binary: %v, want ErrNotExist", err)
	}
}
