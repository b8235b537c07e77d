//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"
)

// TestQuietStderr: at the default log level a server that starts, serves
// a call and is stopped writes nothing to stderr but what is wrong, since
// Claude Code files every line a server writes there as an error; SIGTERM
// with nothing in flight is not "in-flight calls killed", and with a call
// in flight it is, with the count. (The audit goes to a file here: its
// records are stderr's by default.)
func TestQuietStderr(t *testing.T) {
	onlyBinary(t) // the image's entrypoint is the same binary; its podman adds its own lines
	probe, dir := testbin.Probe(t), testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf("tool hello %[1]s read 20 4096 off %[2]s -- echo hello\ntool nap %[1]s read 60 4096 off %[2]s -- sleep 30\n", probe, dir))
	for _, tc := range []struct {
		name, call string
		want       []string // in stderr; nil: stderr empty
	}{
		{"idle", "hello", nil},
		{"a call in flight", "nap", []string{"level=warning", "signal: in-flight calls killed, exiting", "calls=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startInitialized(t, conf)
			cmd, stdin, out, stderr := s.cmd, s.stdin, s.out, s.stderr
			fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			fmt.Fprintf(stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q}}`+"\n", tc.call)
			if tc.call == "hello" {
				if l, err := out.ReadString('\n'); err != nil || !strings.Contains(l, `"id":2,"result"`) {
					t.Fatalf("call: %v %q", err, l)
				}
			} else {
				time.Sleep(500 * time.Millisecond) // the call is running
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("toolgate still running 10 s after SIGTERM")
			}
			got := stderr.String()
			if tc.want == nil && got != "" {
				t.Errorf("stderr at the default level, nothing wrong: %q, want nothing", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("stderr %q lacks %q", got, w)
				}
			}
		})
	}
}

// TestStdoutClosed: a client that closes its end of toolgate's stdout
// (and keeps stdin open) stops the server as the end of stdin does: the
// next answer fails with EPIPE, and toolgate exits 0 after its cleanup,
// never killed by SIGPIPE (which skipped the cleanup: the soak found an
// OCI server's containers and cgroup directories left behind).
func TestStdoutClosed(t *testing.T) {
	onlyBinary(t) // podman, not toolgate, holds the pipe in the image pass
	probe, dir := testbin.Probe(t), testbin.Dir(t)
	s := startInitialized(t, writeConf(t, fmt.Sprintf("tool hello %[1]s read 20 4096 off %[2]s -- echo hello\n", probe, dir)))
	cmd, stdin, stderr := s.cmd, s.stdin, s.stderr
	s.stdout.Close()
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"hello"}}`)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("toolgate was killed by %s when its stdout's reader went away, want an orderly exit", ws.Signal())
		}
		if err != nil {
			t.Errorf("toolgate exited with %v, want 0; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("toolgate still running 10 s after its stdout's reader went away (stdin open)")
	}
}

// rawServer is `toolgate serve` driven line by line: its pipes and its
// stderr.
type rawServer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	out    *bufio.Reader
	stderr *testbin.Buffer
}

// startInitialized starts `toolgate serve` with conf (its audit in a file,
// so that stderr holds only the log) and answers its initialize.
func startInitialized(t *testing.T, conf string) rawServer {
	t.Helper()
	srv := serveCmd(t, conf, "--audit-log", t.TempDir()+"/audit.jsonl")
	s := rawServer{cmd: exec.Command(srv.argv[0], srv.argv[1:]...), stderr: &testbin.Buffer{}}
	s.stdin, _ = s.cmd.StdinPipe()
	s.stdout, _ = s.cmd.StdoutPipe()
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.cmd.Process.Kill() })
	s.out = bufio.NewReader(s.stdout)
	fmt.Fprintln(s.stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
	if l, err := s.out.ReadString('\n'); err != nil || !strings.Contains(l, `"id":1,"result"`) {
		t.Fatalf("initialize: %v %q", err, l)
	}
	return s
}
