//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"
)

// registryDir writes a tool-MCP registry with one fragment and returns
// its directory.
func registryDir(t *testing.T, fragment string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tool-mcp.d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "10-server.toml"), []byte(fragment), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// logWatch collects a server's stderr and says when a line has come.
type logWatch struct {
	mu   sync.Mutex
	text strings.Builder
}

func (w *logWatch) copy(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		w.mu.Lock()
		w.text.WriteString(sc.Text() + "\n")
		w.mu.Unlock()
	}
}

func (w *logWatch) has(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Contains(w.text.String(), s)
}

func (w *logWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.text.String()
}

// TestStuckDownstreamStops: a sandboxed stdio downstream server stops
// reading its stdin while a 1 MiB request is written to it (more than a
// pipe holds), with a tool timeout far away; closing toolgate's stdin, or
// SIGTERM, still ends toolgate within 2 s, exit 0, and the downstream
// server with it.
func TestStuckDownstreamStops(t *testing.T) {
	onlyBinary(t) // the downstream server is the host's probe
	for _, how := range []string{"stdin closed", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			probe := testbin.Probe(t)
			// Short: the registry's credential check refuses a long
			// argument of letters and digits that looks random.
			tag := fmt.Sprintf("tag=stuck%d", len(how)*1000+os.Getpid()%1000)
			reg := registryDir(t, fmt.Sprintf(`schema_version = 8

[tool_mcp_servers.deaf]
transport = "stdio"
command = %q
args = ["mcp", "deaf", %q]
enabled_tools = ["deaf"]
default_tools_approval_mode = "auto"
startup_timeout_sec = 30
tool_timeout_sec = 600
`, probe, tag))
			srv := serveCmd(t, writeConf(t, ""), "--tool-mcp-dir", reg, "--log-level", "info")
			cmd := exec.Command(srv.argv[0], srv.argv[1:]...)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			stderr, _ := cmd.StderrPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			logs := &logWatch{}
			go logs.copy(stderr)
			out := bufio.NewReader(stdout)
			fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"stuck","version":"1"}}}`)
			if line, err := out.ReadString('\n'); err != nil || !strings.Contains(line, `"protocolVersion"`) {
				t.Fatalf("initialize: %v %q", err, line)
			}
			go io.Copy(io.Discard, out)
			fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			fmt.Fprintf(stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"deaf__deaf","arguments":{"text":"%s"}}}`+"\n",
				strings.Repeat("x", 1<<20))
			for deadline := time.Now().Add(30 * time.Second); !logs.has("deaf from now on"); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the downstream server did not go deaf within 30 s; toolgate's log:\n%s", logs)
				}
			}
			time.Sleep(300 * time.Millisecond) // the write is blocked on the full pipe now
			if n := len(taggedProcs(tag)); n == 0 {
				t.Fatalf("no downstream process with %s running", tag)
			}

			start := time.Now()
			if how == "SIGTERM" {
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			} else {
				stdin.Close()
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("toolgate exited with %v, want 0", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("toolgate still running 20 s after %s, with a downstream server that stopped reading\n%s", how, logs)
			}
			took := time.Since(start)
			t.Logf("toolgate exited %s after %s, a downstream server stuck on a 1 MiB request", took.Round(time.Millisecond), how)
			if took > 2*time.Second {
				t.Errorf("toolgate took %s to exit after %s, want under 2 s", took, how)
			}
			if !waitUntil(5*time.Second, func() bool { return len(taggedProcs(tag)) == 0 }) {
				t.Errorf("left after %s: %s", how, describeProcs(taggedProcs(tag)))
			}
		})
	}
}

// taggedProcs lists live processes whose command line holds tag.
func taggedProcs(tag string) []string {
	var out []string
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), tag) {
			continue
		}
		stat, _ := os.ReadFile(strings.TrimSuffix(f, "cmdline") + "stat")
		if fields := strings.Fields(string(stat)); len(fields) > 2 && fields[2] == "Z" {
			continue
		}
		out = append(out, f)
	}
	return out
}

// describeProcs names each /proc/PID/cmdline of procs with its state and
// parent.
func describeProcs(procs []string) string {
	var out []string
	for _, f := range procs {
		dir := strings.TrimSuffix(f, "cmdline")
		cmd, _ := os.ReadFile(f)
		stat, _ := os.ReadFile(dir + "stat")
		state := "gone" // exited since it was listed
		if fields := strings.Fields(string(stat)); len(fields) > 3 {
			state = fields[2] + " ppid " + fields[3]
		}
		out = append(out, fmt.Sprintf("%s [%s] %q", filepath.Base(dir), state, strings.ReplaceAll(string(cmd), "\x00", " ")))
	}
	return strings.Join(out, "; ")
}

// TestDownstreamKilledWhenToolgateStops: a sandboxed stdio downstream
// server, started by a call, is gone with everything it started once
// toolgate's stdin closes, and once toolgate is killed (SIGKILL: it dies
// with its parent). The server does not end when its stdin closes (stay),
// so only toolgate's kill, or the parent-death signal of its sandbox,
// ends it.
func TestDownstreamKilledWhenToolgateStops(t *testing.T) {
	onlyBinary(t) // the downstream server is the host's probe
	for _, how := range []string{"stdin closed", "SIGKILL"} {
		t.Run(how, func(t *testing.T) {
			tag := fmt.Sprintf("tag=stop%d", len(how)*1000+os.Getpid()%1000) // short: see TestStuckDownstreamStops
			reg := registryDir(t, fmt.Sprintf(`schema_version = 8

[tool_mcp_servers.probe]
transport = "stdio"
command = %q
args = ["mcp", %q, "stay"]
enabled_tools = ["pid", "forks"]
default_tools_approval_mode = "auto"
startup_timeout_sec = 30
`, testbin.Probe(t), tag))
			srv := serveCmd(t, writeConf(t, ""), "--tool-mcp-dir", reg)
			cmd := exec.Command(srv.argv[0], srv.argv[1:]...)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			out := bufio.NewReader(stdout)
			for i, line := range []string{
				`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"stop","version":"1"}}}`,
				`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"probe__pid"}}`,
			} {
				fmt.Fprintln(stdin, line)
				l, err := out.ReadString('\n')
				// The session may be told the tool list changed (the
				// downstream tools joined it) before the answer.
				for err == nil && strings.Contains(l, `"method":"notifications/tools/list_changed"`) {
					l, err = out.ReadString('\n')
				}
				if err != nil || !strings.Contains(l, fmt.Sprintf(`"id":%d,"result"`, i+1)) {
					t.Fatalf("answer %d: %v %q", i+1, err, l)
				}
			}
			if n := len(taggedProcs(tag)); n == 0 {
				t.Fatalf("no downstream process with %s after a call", tag)
			}
			if how == "SIGKILL" {
				cmd.Process.Kill()
			} else {
				stdin.Close()
			}
			go io.Copy(io.Discard, out)
			t0 := time.Now()
			cmd.Wait()
			t.Logf("toolgate exited %s after %s", time.Since(t0).Round(time.Millisecond), how)
			if !waitUntil(5*time.Second, func() bool { return len(taggedProcs(tag)) == 0 }) {
				t.Errorf("left after %s: %s", how, describeProcs(taggedProcs(tag)))
			}
		})
	}
}
