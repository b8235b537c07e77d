//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"
)

// readUntil reads stdout lines until one holds want, and returns the
// lines read (notifications and answers alike).
func (s rawServer) readUntil(t *testing.T, want string) []string {
	t.Helper()
	var lines []string
	deadline := time.AfterFunc(20*time.Second, func() { _ = s.cmd.Process.Kill() })
	defer deadline.Stop()
	for {
		l, err := s.out.ReadString('\n')
		if err != nil {
			t.Fatalf("reading for %q: %v after %q; stderr:\n%s", want, err, lines, s.stderr.String())
		}
		lines = append(lines, l)
		if strings.Contains(l, want) {
			return lines
		}
	}
}

// TestReloadLive: over the real binary, an edit of tools.conf while a
// call is in flight is picked up by the file watch (the session is told
// notifications/tools/list_changed; its next tools/list is the new
// conf's) and the call answers; SIGHUP then reloads again and never
// stops serve; checkpoint_status names the reloads.
func TestReloadLive(t *testing.T) {
	onlyBinary(t) // the signal goes to the host process
	probe, dir := testbin.Probe(t), testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf("tool hello %[1]s read 20 4096 off %[2]s -- echo hello\ntool nap %[1]s read 60 4096 off %[2]s -- sleep 2\n", probe, dir))
	s := startInitialized(t, conf)
	fmt.Fprintln(s.stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	fmt.Fprintln(s.stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"nap"}}`)
	time.Sleep(300 * time.Millisecond) // the call is running
	next := fmt.Sprintf("tool greet %[1]s read 20 4096 off %[2]s -- echo greet\ntool nap %[1]s read 60 4096 off %[2]s -- sleep 2\n", probe, dir)
	if err := os.WriteFile(conf, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(s.readUntil(t, `"id":2,`), "")
	if !strings.Contains(got, `"method":"notifications/tools/list_changed"`) {
		t.Errorf("no list_changed before the call's answer: %s", got)
	}
	if strings.Contains(got, `"isError":true`) || !strings.Contains(got, `"id":2,"result"`) {
		t.Errorf("the call in flight across the reload: %s", got)
	}
	fmt.Fprintln(s.stdin, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	list := strings.Join(s.readUntil(t, `"id":3,`), "")
	if !strings.Contains(list, `"name":"greet"`) || strings.Contains(list, `"name":"hello"`) {
		t.Errorf("tools/list after the edit: %s", list)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for i := 4; ; i++ {
		fmt.Fprintf(s.stdin, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"checkpoint_status"}}`+"\n", i)
		st := strings.Join(s.readUntil(t, fmt.Sprintf(`"id":%d,`, i)), "")
		if strings.Contains(st, `\"trigger\":\"sighup\"`) || strings.Contains(st, `"trigger":"sighup"`) {
			if !strings.Contains(st, `"generation":2`) {
				t.Errorf("checkpoint_status after SIGHUP: %s, want generation 2", st)
			}
			break
		}
		if i > 50 {
			t.Fatalf("no SIGHUP reload in checkpoint_status: %s", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s.cmd.ProcessState != nil {
		t.Fatalf("serve exited on SIGHUP")
	}
	_ = s.stdin.Close()
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("serve after the end of stdin: %v; stderr:\n%s", err, s.stderr.String())
	}
}
