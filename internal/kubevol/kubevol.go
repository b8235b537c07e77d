// Package kubevol lays out, for tests, a Kubernetes ConfigMap or Secret
// volume as a real kubelet does (the atomic writer's symlinks, fsGroup's
// modes) and a pod's view of it (a read-only bind of it, the node's disk
// out of view). Its functions mount, so they need root and skip loudly
// without it.
package kubevol

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/testbin"
)

// The kubelet's atomic writer lays a ConfigMap or Secret volume out as
// this: each key a symlink into ..data, ..data a symlink to the
// timestamped directory holding the files. With fsGroup the volume's
// directory is 2777 (the emptyDir's 0777 plus setgid) and the timestamped
// one 2755; the files are root's, of group fsGroup.
const (
	TSDir   = "..2026_12_02_10_00_00.123456789"
	FSGroup = 10001
	VolMode = os.ModeSetgid | 0o777
	TSMode  = os.ModeSetgid | 0o755
)

// MountOrSkip mounts, or skips loudly (fails under TOOLGATE_REQUIRE_ALL=1)
// where this process may not, and unmounts at the end of the test.
func MountOrSkip(t testing.TB, source, target, fstype string, flags uintptr, data string) {
	t.Helper()
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		if errors.Is(err, unix.EPERM) {
			testbin.Missing(t, "this test mounts (a tmpfs, a read-only bind) and needs CAP_SYS_ADMIN: mount %s: %v", target, err)
		}
		t.Fatalf("mount %s on %s: %v", source, target, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			t.Errorf("unmount %s: %v", target, err)
		}
	})
}

// RemountRO makes the mount at target read-only, as the kubelet's
// container runtime binds a ConfigMap volume (mount -o remount,ro,bind).
func RemountRO(t testing.TB, target string) {
	t.Helper()
	if err := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount,ro,bind %s: %v", target, err)
	}
}

// Volume writes the atomic writer's layout of files into dir (the
// volume's directory) with the kubelet's modes and owners.
func Volume(t testing.TB, dir string, files map[string]string, fileMode os.FileMode) {
	t.Helper()
	ts := filepath.Join(dir, TSDir)
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		p := filepath.Join(ts, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		Must(t, os.Chmod(p, fileMode), os.Lchown(p, 0, FSGroup))
		Must(t, os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)))
	}
	Must(t, os.Symlink(TSDir, filepath.Join(dir, "..data")))
	Must(t, os.Chmod(ts, TSMode), os.Lchown(ts, 0, FSGroup))
	Must(t, os.Chmod(dir, VolMode), os.Lchown(dir, 0, FSGroup))
}

// Must fails the test at the first error of errs.
func Must(t testing.TB, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Pod is a pod's view of a ConfigMap volume: the node's disk (a tmpfs
// here) holds the volume under pods/UID/volumes; the pod sees it only
// through a read-only bind at etc/toolgate (ro false: the bind left
// read-write), and the disk itself is not mounted in the pod, bar a
// read-write bind of one file of it elsewhere (etc-hosts, as the kubelet's
// /etc/hosts). It returns the base and the mount point.
func Pod(t testing.TB, files map[string]string, ro bool) (base, mnt string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testbin.Missing(t, "this test mounts and chowns, and must run as root (uid %d)", os.Geteuid())
	}
	base = t.TempDir()
	Must(t, os.Chmod(base, 0o755))
	node := filepath.Join(base, "node")
	mnt = filepath.Join(base, "etc", "toolgate")
	hosts := filepath.Join(base, "etc", "hosts")
	Must(t, os.MkdirAll(node, 0o755), os.MkdirAll(mnt, 0o755), os.WriteFile(hosts, nil, 0o644))
	MountOrSkip(t, "tmpfs", node, "tmpfs", 0, "mode=0755,size=1m")
	vol := filepath.Join(node, "pods", "uid", "volumes", "kubernetes.io~configmap", "toolgate-conf")
	Must(t, os.MkdirAll(vol, 0o755), os.WriteFile(filepath.Join(node, "pods", "uid", "etc-hosts"), nil, 0o644))
	Volume(t, vol, files, 0o644)
	MountOrSkip(t, vol, mnt, "", unix.MS_BIND, "")
	if ro {
		RemountRO(t, mnt)
	}
	MountOrSkip(t, filepath.Join(node, "pods", "uid", "etc-hosts"), hosts, "", unix.MS_BIND, "")
	// The node's disk leaves the pod's view; the two binds stay.
	Must(t, unix.Unmount(node, 0))
	return base, mnt
}

// Update replaces the contents of the volume Volume laid out in dir as
// the kubelet's atomic writer does on a ConfigMap or Secret edit: the
// files are written into a new timestamped directory, a `..data_tmp`
// symlink to it is renamed over `..data` (the one atomic step), a new
// key gets its symlink, and the old directory is removed. ts names the
// new directory (each update its own).
func Update(t testing.TB, dir, ts string, files map[string]string, fileMode os.FileMode) {
	t.Helper()
	old, err := os.Readlink(filepath.Join(dir, "..data"))
	Must(t, err)
	p := filepath.Join(dir, ts)
	Must(t, os.Mkdir(p, 0o755))
	for name, text := range files {
		f := filepath.Join(p, name)
		Must(t, os.WriteFile(f, []byte(text), 0o600), os.Chmod(f, fileMode), os.Lchown(f, 0, FSGroup))
	}
	Must(t, os.Chmod(p, TSMode), os.Lchown(p, 0, FSGroup))
	tmp := filepath.Join(dir, "..data_tmp")
	Must(t, os.Symlink(ts, tmp), os.Rename(tmp, filepath.Join(dir, "..data")))
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			Must(t, os.Symlink(filepath.Join("..data", name), link))
		}
	}
	Must(t, os.RemoveAll(filepath.Join(dir, old)))
}
