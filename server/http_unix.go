package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// UnixPrefix marks a unix socket path in serve --listen (unix:/PATH).
const UnixPrefix = "unix:"

// The modes of a unix socket listener: its owner only, or also its group
// (serve --listen-group).
const (
	UnixSocketMode      os.FileMode = 0o600
	UnixSocketGroupMode os.FileMode = 0o660
)

// sunPathMax is the longest socket path bind(2) takes (sun_path is 108
// bytes, its NUL included).
const sunPathMax = 107

// ListenUnix listens on a unix socket at path that only its owner
// (toolgate's uid) may connect to, mode 0600, or with gid >= 0 also the
// members of group gid, mode 0660 (on Linux, connecting needs write
// permission on the socket file). How, so that it is exact:
//
//   - path is absolute; its directory is owned by root or toolgate's uid
//     and writable by no one else unless it is sticky (/tmp): whoever may
//     write it could replace the socket with one of hers, and hear what
//     local clients send;
//   - an existing path that is not a socket is refused, never removed; a
//     socket a server listens on is refused; a stale one (nothing
//     listening: a toolgate that was killed) is removed;
//   - the socket is bound in a fresh directory of mode 0700 beside path,
//     where no one else can reach it, given its mode (and group) there,
//     and only then linked at path (link(2), which never replaces an
//     entry: one that appeared meanwhile is refused). So no one can
//     connect before the mode is set, with no process-wide umask and no
//     window between bind and chmod.
//
// Close removes the socket at path if it still is the one made here.
func ListenUnix(path string, gid int) (net.Listener, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("unix socket %q: want an absolute path", path)
	}
	path = filepath.Clean(path)
	fail := func(err error) (net.Listener, error) { return nil, fmt.Errorf("unix socket %s: %w", path, err) }
	if len(path) > sunPathMax {
		return fail(fmt.Errorf("the path is %d bytes, over the %d a unix socket's path may have; choose a shorter one", len(path), sunPathMax))
	}
	if err := checkSocketDir(filepath.Dir(path)); err != nil {
		return fail(err)
	}
	if err := removeStaleSocket(path); err != nil {
		return fail(err)
	}
	tmpDir, err := privateDir(filepath.Dir(path))
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	if len(tmp) > sunPathMax {
		return fail(fmt.Errorf("the socket is made first at %s, %d bytes, over the %d a unix socket's path may have; use a directory of a shorter path", tmp, len(tmp), sunPathMax))
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return fail(err)
	}
	ln.SetUnlinkOnClose(false)
	mode := UnixSocketMode
	if gid >= 0 {
		mode = UnixSocketGroupMode
		if err := os.Chown(tmp, -1, gid); err != nil {
			_ = ln.Close()
			return fail(fmt.Errorf("give the socket group %d (--listen-group): %w", gid, err))
		}
	}
	if err := os.Chmod(tmp, mode); err != nil {
		_ = ln.Close()
		return fail(err)
	}
	if err := os.Link(tmp, path); err != nil {
		_ = ln.Close()
		if errors.Is(err, fs.ErrExist) {
			return fail(errors.New("it appeared while the socket was made: another process is using this path"))
		}
		return fail(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		_ = ln.Close()
		return fail(err)
	}
	return &unixListener{UnixListener: ln, path: path, fi: fi}, nil
}

// checkSocketDir refuses a directory someone other than root and
// toolgate's uid could write entries of (unless sticky), or that such a
// user owns.
func checkSocketDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner", dir)
	}
	euid := os.Geteuid()
	if st.Uid != 0 && int64(st.Uid) != int64(euid) {
		return fmt.Errorf("directory %s is owned by uid %d, not by root or toolgate's uid %d: its owner could replace the socket with her own; use a directory of root's or toolgate's (mkdir -m 0755 /run/toolgate)", dir, st.Uid, euid)
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
		return fmt.Errorf("directory %s (mode %04o) is writable by group or others and not sticky: they could replace the socket with their own; chmod go-w %s, or use another directory", dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// removeStaleSocket makes way at path: nothing there, or a socket nothing
// listens on (removed). Anything else is refused.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("it exists and is not a socket (mode %s): toolgate replaces only a stale socket; remove it or choose another path", fi.Mode())
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		_ = c.Close()
		return errors.New("a server is listening on it (another toolgate?); stop it or choose another path")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("it exists and its state is unknown (%w); remove it if no server uses it", err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove the stale socket: %w", err)
	}
	return nil
}

// privateDir makes a directory of mode 0700 in dir, of a short random
// name (the socket's temporary path must fit in sun_path).
func privateDir(dir string) (string, error) {
	for range 10 {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		p := filepath.Join(dir, ".tg-"+hex.EncodeToString(b[:]))
		err := os.Mkdir(p, 0o700)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("no free temporary name in %s", dir)
}

// unixListener is a unix socket listener whose Close removes its socket.
type unixListener struct {
	*net.UnixListener
	path string
	fi   fs.FileInfo
	once sync.Once
	err  error
}

// Addr is the socket's path (not the temporary name it was bound at).
func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// Close stops listening and removes the socket file, unless path is no
// longer the socket made (another server's, after someone removed ours).
func (l *unixListener) Close() error {
	l.once.Do(func() {
		if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.fi) {
			_ = os.Remove(l.path)
		}
		l.err = l.UnixListener.Close()
	})
	return l.err
}

// peerUID is the uid of the process that connected to a unix socket
// (SO_PEERCRED), or -1.
func peerUID(c *net.UnixConn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1
	}
	uid := -1
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			uid = int(cred.Uid)
		}
	})
	return uid
}

// peerKey carries the peer's uid of a unix socket connection in a
// request's context.
type peerKey struct{}

// connContext is the http.Server's ConnContext: a unix socket
// connection's requests carry its peer's uid.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	switch c := c.(type) {
	case *limitedConn: // its uid read once, at accept
		if _, ok := c.Conn.(*net.UnixConn); ok {
			return context.WithValue(ctx, peerKey{}, c.uid)
		}
	case *net.UnixConn:
		return context.WithValue(ctx, peerKey{}, peerUID(c))
	}
	return ctx
}

// unixPeer returns the peer's uid of a request that came over a unix
// socket; ok is false for any other request.
func unixPeer(ctx context.Context) (uid int, ok bool) {
	uid, ok = ctx.Value(peerKey{}).(int)
	return uid, ok
}
