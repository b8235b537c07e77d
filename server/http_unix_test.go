package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/internal/testbin"
)

// nobody is the uid (and gid) of the tests' other local user.
const nobody = 65534

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testbin.Missing(t, "this test connects as uid %d and must run as root (uid %d)", nobody, os.Geteuid())
	}
}

// connectAs connects to the unix socket at path as uid with gid and no
// supplementary groups: on a thread of its own, whose credentials alone
// change (raw setresuid, not Go's, which changes every thread's) and which
// ends with its goroutine (locked, never unlocked).
func connectAs(path string, uid, gid int) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			errc <- e
			return
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
			errc <- e
			return
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			errc <- e
			return
		}
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: path})
		syscall.Close(fd)
		errc <- err
	}()
	return <-errc
}

// TestListenUnixWhoMayConnect: the socket is mode 0600 and toolgate's, so
// another local user cannot connect; with a group (--listen-group) it is
// 0660 and that group's members can, others still cannot. Close removes
// it.
func TestListenUnixWhoMayConnect(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name   string
		gid    int
		mode   os.FileMode
		member bool // may uid nobody of group nobody connect
	}{
		{"owner only", -1, 0o600, false},
		{"--listen-group", nobody, 0o660, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := unixSocketPath(t)
			// Others may reach the directory, so that the socket's own mode
			// is what decides.
			if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			ln, err := ListenUnix(path, tc.gid)
			if err != nil {
				t.Fatal(err)
			}
			if a := ln.Addr(); a.Network() != "unix" || a.String() != path {
				t.Errorf("Addr() = %s %s, want unix %s", a.Network(), a, path)
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			wantGID := uint32(0)
			if tc.gid >= 0 {
				wantGID = uint32(tc.gid)
			}
			if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != tc.mode || st.Uid != 0 || st.Gid != wantGID {
				t.Errorf("socket %s uid %d gid %d, want a socket %04o uid 0 gid %d", fi.Mode(), st.Uid, st.Gid, tc.mode, wantGID)
			}
			// Nothing else is left beside it (the temporary directory).
			if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
				t.Errorf("the socket's directory holds %d entries, want 1", len(ents))
			}
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			if err := connectAs(path, 0, 0); err != nil {
				t.Errorf("toolgate's uid connecting: %v", err)
			}
			err = connectAs(path, nobody, nobody)
			if tc.member && err != nil {
				t.Errorf("uid %d of group %d connecting: %v, want connected", nobody, nobody, err)
			}
			if !tc.member && !errors.Is(err, syscall.EACCES) {
				t.Errorf("uid %d connecting: %v, want EACCES", nobody, err)
			}
			if err := connectAs(path, nobody-1, nobody-1); !errors.Is(err, syscall.EACCES) {
				t.Errorf("uid %d (not of the group) connecting: %v, want EACCES", nobody-1, err)
			}
			if err := ln.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after Close: %v, want the socket removed", err)
			}
		})
	}
}

// TestListenUnixRefuses: what ListenUnix takes and refuses at the path
// and in its directory, each with what to do.
func TestListenUnixRefuses(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, path string)
		want    string // "" for accepted
	}{
		{"absent", func(*testing.T, string) {}, ""},
		{"a stale socket", func(t *testing.T, path string) {
			l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			l.SetUnlinkOnClose(false)
			l.Close()
		}, ""},
		{"a socket a server listens on", func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}, "a server is listening on it (another toolgate?); stop it or choose another path"},
		{"a regular file", func(t *testing.T, path string) {
			os.WriteFile(path, []byte("keep me"), 0o600)
		}, "it exists and is not a socket (mode -rw-------): toolgate replaces only a stale socket; remove it or choose another path"},
		{"a symlink", func(t *testing.T, path string) {
			os.Symlink("/etc/passwd", path)
		}, "it exists and is not a socket (mode Lrwxrwxrwx)"},
		{"a directory writable by others", func(t *testing.T, path string) {
			os.Chmod(filepath.Dir(path), 0o777)
		}, "(mode 0777) is writable by group or others and not sticky: they could replace the socket with their own; chmod go-w"},
		{"a directory writable by its group", func(t *testing.T, path string) {
			os.Chmod(filepath.Dir(path), 0o770)
		}, "(mode 0770) is writable by group or others and not sticky"},
		{"a sticky directory (as /tmp)", func(t *testing.T, path string) {
			os.Chmod(filepath.Dir(path), 0o777|os.ModeSticky)
		}, ""},
		{"a directory of another user", func(t *testing.T, path string) {
			os.Chown(filepath.Dir(path), nobody, nobody)
		}, "is owned by uid 65534, not by root or toolgate's uid 0: its owner could replace the socket with her own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := unixSocketPath(t)
			tc.prepare(t, path)
			before, _ := os.ReadFile(path)
			ln, err := ListenUnix(path, -1)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ListenUnix = %v, want listening", err)
				}
				defer ln.Close()
				if c, err := net.Dial("unix", path); err != nil {
					t.Errorf("dial the socket: %v", err)
				} else {
					c.Close()
				}
				return
			}
			if err == nil {
				ln.Close()
				t.Fatalf("ListenUnix listened, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), "unix socket "+path+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ListenUnix = %v, want %q", err, tc.want)
			}
			if after, _ := os.ReadFile(path); string(after) != string(before) {
				t.Errorf("the refused path changed: %q, was %q", after, before)
			}
		})
	}
	if _, err := ListenUnix("run/mcp.sock", -1); err == nil || !strings.Contains(err.Error(), "want an absolute path") {
		t.Errorf("a relative path: %v", err)
	}
	dir := filepath.Dir(unixSocketPath(t))
	long := filepath.Join(dir, strings.Repeat("s", 107-len(dir)))
	if _, err := ListenUnix(long, -1); err == nil || !strings.Contains(err.Error(), "the path is 108 bytes, over the 107 a unix socket's path may have") {
		t.Errorf("a path of 108 bytes: %v", err)
	}
	deep := filepath.Join(dir, strings.Repeat("d", 100-len(dir)))
	os.Mkdir(deep, 0o700)
	if _, err := ListenUnix(filepath.Join(deep, "s"), -1); err == nil || !strings.Contains(err.Error(), "over the 107 a unix socket's path may have; use a directory of a shorter path") {
		t.Errorf("a directory too deep for the temporary socket: %v", err)
	}
	fits := filepath.Join(dir, strings.Repeat("s", 106-len(dir)))
	ln, err := ListenUnix(fits, -1)
	if err != nil {
		t.Fatalf("a path of 107 bytes: %v", err)
	}
	ln.Close()
}

// TestHTTPUnixLocalPrincipal: over a unix socket without authentication
// every request is principal "local", audited with auth "local" and the
// peer's uid; each uid is a principal of its own (sessions, queues).
func TestHTTPUnixLocalPrincipal(t *testing.T) {
	f := startHTTP(t, HTTPOptions{})
	c := mcpClient(t, f.url, "", true)
	if _, err := callTool(t, c, "hello", nil); err != nil {
		t.Fatal(err)
	}
	recs := f.auditRecords(t)
	if len(recs) != 1 || recs[0]["principal"] != "local" || recs[0]["auth"] != "local" || recs[0]["peer_uid"] != float64(os.Geteuid()) {
		t.Errorf("audit %v: want principal local, auth local, peer_uid %d", recs, os.Geteuid())
	}
	if auth.Local(0).Key() == auth.Local(1000).Key() {
		t.Error("two uids are one principal")
	}
	// The handler serves no one without a token but over a unix socket.
	h := &HTTP{s: f.srv}
	rec := httptest.NewRecorder()
	if _, ok := h.authenticate(rec, httptest.NewRequest(http.MethodPost, MCPPath, strings.NewReader(initBody))); ok || rec.Code != 401 {
		t.Errorf("no Auth, no unix socket: authenticated %v (%d), want 401", ok, rec.Code)
	}
	ctx := context.WithValue(context.Background(), peerKey{}, 1000)
	r := httptest.NewRequest(http.MethodPost, MCPPath, strings.NewReader(initBody)).WithContext(ctx)
	if p, ok := h.authenticate(httptest.NewRecorder(), r); !ok || p.Name != "local" || p.Key() != auth.Local(1000).Key() {
		t.Errorf("no Auth, a unix socket peer: %v %v, want local of uid 1000", p, ok)
	}
}

// TestListenUnixNoWindow: no one can connect to the socket before its
// mode is set. Under umask 0 a socket bound at its path is 0777 until
// chmod; a uid of no group keeps trying to connect at the path while
// ListenUnix makes the socket, again and again, and never gets in.
func TestListenUnixNoWindow(t *testing.T) {
	requireRoot(t)
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := unixSocketPath(t)
	if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	result := make(chan [2]int, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			result <- [2]int{-1, int(e)}
			return
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, nobody, nobody, nobody); e != 0 {
			result <- [2]int{-1, int(e)}
			return
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, nobody, nobody, nobody); e != 0 {
			result <- [2]int{-1, int(e)}
			return
		}
		tries, in := 0, 0
		for {
			select {
			case <-stop:
				result <- [2]int{tries, in}
				return
			default:
			}
			fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				continue
			}
			if syscall.Connect(fd, &syscall.SockaddrUnix{Name: path}) == nil {
				in++
			}
			syscall.Close(fd)
			tries++
		}
	}()
	for range 300 {
		ln, err := ListenUnix(path, -1)
		if err != nil {
			close(stop)
			t.Fatal(err)
		}
		ln.Close()
	}
	close(stop)
	r := <-result
	if r[0] < 0 {
		t.Fatalf("drop to uid %d: errno %d", nobody, r[1])
	}
	if r[1] != 0 {
		t.Errorf("uid %d connected %d times in %d tries while the socket was made, want never", nobody, r[1], r[0])
	}
	t.Logf("%d connection attempts by uid %d", r[0], nobody)
}
