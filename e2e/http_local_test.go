//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testbin"
)

// TestHTTPUnixSocket: serve --listen unix:/PATH serves local clients
// without a token, on a socket of mode 0600 (0660 and the group with
// --listen-group); the calls are principal "local", audited with the
// peer's uid; SIGTERM removes the socket and exits 0.
func TestHTTPUnixSocket(t *testing.T) {
	probe := testbin.Probe(t)
	dir := testbin.Dir(t)
	conf := writeConf(t, fmt.Sprintf("tool hello %[1]s read 20 4096 off %[2]s -- echo hello\n", probe, dir))
	for _, tc := range []struct {
		name  string
		extra []string
		mode  os.FileMode
		gid   uint32
	}{
		{"owner only", nil, 0o600, uint32(os.Getegid())},
		{"--listen-group nogroup", []string{"--listen-group", "nogroup"}, 0o660, 65534},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sockDir, err := os.MkdirTemp("", "tge2e")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(sockDir) })
			path := filepath.Join(sockDir, "mcp.sock")
			s := startHTTPServer(t, conf, append([]string{"--listen", "unix:" + path}, tc.extra...)...)
			if s.sock != path {
				t.Fatalf("serve named the socket %q, want %q", s.sock, path)
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != tc.mode || st.Gid != tc.gid {
				t.Errorf("socket %s gid %d, want a socket %04o gid %d", fi.Mode(), st.Gid, tc.mode, tc.gid)
			}
			c := httpClientVia(t, unixHTTPClient(path), s.url, "", true)
			if res, err := call1(c, "hello"); err != nil || !strings.Contains(text(res), "hello") {
				t.Fatalf("hello over the socket: %v %v", res, err)
			}
			recs := s.auditRecords(t)
			if len(recs) != 1 || recs[0]["principal"] != "local" || recs[0]["auth"] != "local" || recs[0]["peer_uid"] != float64(os.Geteuid()) {
				t.Errorf("audit %v: want principal local, auth local, peer_uid %d", recs, os.Geteuid())
			}
			if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-s.exited:
				s.exited <- err
				if err != nil {
					t.Errorf("exit after SIGTERM: %v, want 0", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("toolgate did not exit after SIGTERM")
			}
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Errorf("the socket after exit: %v, want removed", err)
			}
		})
	}
}
