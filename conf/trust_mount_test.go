package conf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/kubevol"
)

// The kubelet volume fixture (internal/kubevol), by the names these tests
// use.
var (
	kubePod     = kubevol.Pod
	kubeVolume  = kubevol.Volume
	mountOrSkip = kubevol.MountOrSkip
	remountRO   = kubevol.RemountRO
	must        = kubevol.Must
)

const (
	kubeTSDir   = kubevol.TSDir
	kubeVolMode = kubevol.VolMode
)

// TestLoadTrustKubeletVolume: tools.conf in a ConfigMap volume as a real
// kubelet lays it out (a 2777 directory, the atomic writer's symlinks) is
// loaded when the volume is a read-only mount no one in the pod can write
// through, and refused when the same layout is read-write, when a symlink
// of it leads out of the mount, and when an entry of it is not root's.
func TestLoadTrustKubeletVolume(t *testing.T) {
	conf := map[string]string{"tools.conf": "# a tools.conf\n"}
	t.Run("read-only: loaded", func(t *testing.T) {
		_, mnt := kubePod(t, conf, true)
		if c := Load(filepath.Join(mnt, "tools.conf"), Options{}); c.State != StateLoaded {
			t.Errorf("Load = %s %v, want loaded", c.State, c.Err())
		}
	})
	t.Run("read-only, the timestamped directory 2777 too: loaded", func(t *testing.T) {
		_, mnt := kubePod(t, conf, false)
		must(t, os.Chmod(filepath.Join(mnt, kubeTSDir), kubeVolMode))
		remountRO(t, mnt)
		if c := Load(filepath.Join(mnt, "tools.conf"), Options{}); c.State != StateLoaded {
			t.Errorf("Load = %s %v, want loaded", c.State, c.Err())
		}
	})
	refused := func(t *testing.T, path string, want ...string) {
		t.Helper()
		c := Load(path, Options{})
		if c.State != StateRefused {
			t.Fatalf("Load(%s) = %s, want refused", path, c.State)
		}
		e := firstErr(t, c)
		if !errors.Is(e, ErrUntrusted) {
			t.Errorf("Load(%s) refused with %q, want ErrUntrusted", path, e)
		}
		for _, w := range want {
			if !strings.Contains(e.Error(), w) {
				t.Errorf("Load(%s) refused with\n%s\nwant %q in it", path, e, w)
			}
		}
	}
	t.Run("read-write: refused", func(t *testing.T) {
		_, mnt := kubePod(t, conf, false)
		refused(t, filepath.Join(mnt, "tools.conf"),
			"directory "+mnt+" (mode 2777, owner uid 0) is writable by group or others: they can replace "+mnt+"/tools.conf and run code as toolgate; chmod go-w "+mnt+
				" (not a read-only mount toolgate can trust: its mount is read-write)")
	})
	t.Run("a relative symlink out of the mount: refused", func(t *testing.T) {
		base, mnt := kubePod(t, conf, false)
		// A directory of root's, 0755, outside the volume: trusted on its
		// own, but not through the volume's 2777 directory.
		out := filepath.Join(base, "etc", "out")
		must(t, os.Mkdir(out, 0o755), os.WriteFile(filepath.Join(out, "tools.conf"), []byte("# another\n"), 0o644))
		must(t, os.Symlink("../out/tools.conf", filepath.Join(mnt, "other.conf")))
		remountRO(t, mnt)
		refused(t, filepath.Join(mnt, "other.conf"),
			filepath.Join(base, "etc")+" is not on the read-only mount "+mnt+" that "+mnt+" is trusted for: the path to "+mnt+"/other.conf leaves it")
		if c := Load(filepath.Join(out, "tools.conf"), Options{}); c.State != StateLoaded {
			t.Errorf("Load of the target itself = %s %v, want loaded", c.State, c.Err())
		}
	})
	t.Run("an absolute symlink out of the mount: refused", func(t *testing.T) {
		base, mnt := kubePod(t, conf, false)
		out := filepath.Join(base, "out.conf")
		must(t, os.WriteFile(out, []byte("# another\n"), 0o644))
		must(t, os.Symlink(out, filepath.Join(mnt, "other.conf")))
		remountRO(t, mnt)
		refused(t, filepath.Join(mnt, "other.conf"), "/ is not on the read-only mount "+mnt)
	})
	t.Run("an absolute symlink back into the mount: refused", func(t *testing.T) {
		_, mnt := kubePod(t, conf, false)
		must(t, os.Symlink(filepath.Join(mnt, "..data", "tools.conf"), filepath.Join(mnt, "other.conf")))
		remountRO(t, mnt)
		refused(t, filepath.Join(mnt, "other.conf"), "/ is not on the read-only mount "+mnt)
	})
	t.Run("a mount on top of the timestamped directory: refused", func(t *testing.T) {
		_, mnt := kubePod(t, conf, true)
		ts := filepath.Join(mnt, kubeTSDir)
		mountOrSkip(t, "tmpfs", ts, "tmpfs", 0, "mode=0755,size=1m")
		must(t, os.WriteFile(filepath.Join(ts, "tools.conf"), []byte("# another\n"), 0o644))
		refused(t, filepath.Join(mnt, "tools.conf"), filepath.Join(mnt, kubeTSDir)+" is not on the read-only mount "+mnt)
	})
	t.Run("a symlink of 65534's in the 2777 directory: refused", func(t *testing.T) {
		_, mnt := kubePod(t, conf, false)
		must(t, os.Lchown(filepath.Join(mnt, "..data"), nobody, nobody))
		remountRO(t, mnt)
		refused(t, filepath.Join(mnt, "tools.conf"), mnt+"/..data is owned by uid 65534, not by root, in "+mnt+" (mode 0777), a directory others can write")
	})
	t.Run("the volume's directory owned by 65534: refused", func(t *testing.T) {
		_, mnt := kubePod(t, conf, false)
		must(t, os.Lchown(mnt, nobody, nobody))
		remountRO(t, mnt)
		refused(t, filepath.Join(mnt, "tools.conf"), "directory "+mnt+" (mode 0777) is owned by uid 65534")
	})
}

// TestLoadTrustReadOnlyBindOfWritable: a read-only bind of a directory
// others can write is refused while its filesystem is mounted read-write
// elsewhere in the namespace: anyone can write it through that mount.
// Also a read-only bind of a directory above it, or inside it.
func TestLoadTrustReadOnlyBindOfWritable(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	must(t, os.Chmod(base, 0o755))
	disk := filepath.Join(base, "disk")
	must(t, os.Mkdir(disk, 0o755))
	mountOrSkip(t, "tmpfs", disk, "tmpfs", 0, "mode=0755,size=1m")
	src := filepath.Join(disk, "pods", "u", "volumes", "kubernetes.io~configmap", "cm")
	must(t, os.MkdirAll(src, 0o755))
	kubeVolume(t, src, map[string]string{"tools.conf": "# a tools.conf\n"}, 0o644)
	mnt := filepath.Join(base, "etc")
	must(t, os.Mkdir(mnt, 0o755))
	mountOrSkip(t, src, mnt, "", unix.MS_BIND, "")
	remountRO(t, mnt)
	c := Load(filepath.Join(mnt, "tools.conf"), Options{})
	e := firstErr(t, c)
	want := "(not a read-only mount toolgate can trust: it is on the read-only mount " + mnt + ", but its filesystem is also mounted read-write at " + disk + ", through which it can be written)"
	if !errors.Is(e, ErrUntrusted) || !strings.Contains(e.Error(), want) {
		t.Errorf("Load through a read-only bind of a writable tree = %q\nwant %q", e, want)
	}
	// Unmounted there, the read-only bind is the only way to it.
	must(t, unix.Unmount(disk, 0))
	if c := Load(filepath.Join(mnt, "tools.conf"), Options{}); c.State != StateLoaded {
		t.Errorf("Load once only the read-only bind shows the tree = %s %v, want loaded", c.State, c.Err())
	}
}

func TestParseMountinfo(t *testing.T) {
	m, err := parseMountinfo(`36 35 98:0 /mnt\0401 /etc/tool\134gate ro,noatime master:1 - ext3 /dev/root rw,errors=continue`)
	if err != nil || m != (mountinfo{id: 36, dev: "98:0", root: "/mnt 1", point: `/etc/tool\gate`, rw: false, sbRW: true}) {
		t.Errorf("parseMountinfo = %+v %v", m, err)
	}
	if _, err := parseMountinfo("36 35 98:0 /mnt1 /mnt2 rw"); err == nil {
		t.Error("a line without its separator parsed")
	}
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"/", "/x", true},
		{"/x", "/x", true},
		{"/x/y", "/x", true},
		{"/x", "/x/y", true},
		{"/x", "/xy", false},
		{"/pods/u/etc-hosts", "/pods/u/volumes/cm", false},
	} {
		if got := overlaps(tc.a, tc.b); got != tc.want {
			t.Errorf("overlaps(%s, %s) = %v", tc.a, tc.b, got)
		}
	}
}

// TestLoadTrustReadOnlyOnlyKubeletVolumes: a read-only mount proves that
// no one writes a directory only where the kubelet alone writes it (a
// ConfigMap's, a projected or downward API volume's). The same layout in
// an emptyDir, a PVC, an NFS export or a host directory could be mounted
// read-write elsewhere (a sidecar, another pod or host) where toolgate's
// mount table cannot see it: refused, read-only or not. So is a Secret's
// tmpfs, which no mount tells from an emptyDir in memory.
func TestLoadTrustReadOnlyOnlyKubeletVolumes(t *testing.T) {
	requireRoot(t)
	for _, kind := range []string{"kubernetes.io~empty-dir", "kubernetes.io~nfs", "kubernetes.io~secret-as-dir"} {
		base := t.TempDir()
		must(t, os.Chmod(base, 0o755))
		disk := filepath.Join(base, "disk")
		must(t, os.Mkdir(disk, 0o755))
		mountOrSkip(t, "tmpfs", disk, "tmpfs", 0, "mode=0755,size=1m")
		src := filepath.Join(disk, "pods", "u", "volumes", kind, "shared")
		must(t, os.MkdirAll(src, 0o755))
		kubeVolume(t, src, map[string]string{"tools.conf": "# a tools.conf\n"}, 0o644)
		mnt := filepath.Join(base, "etc")
		must(t, os.Mkdir(mnt, 0o755))
		mountOrSkip(t, src, mnt, "", unix.MS_BIND, "")
		remountRO(t, mnt)
		must(t, unix.Unmount(disk, 0)) // the read-only bind is the only way to it here
		e := firstErr(t, Load(filepath.Join(mnt, "tools.conf"), Options{}))
		if !errors.Is(e, ErrUntrusted) || !strings.Contains(e.Error(), "not a kubelet's ConfigMap, projected or downward API volume") {
			t.Errorf("%s: Load = %q, want refused: not a kubelet volume", kind, e)
		}
	}
}

// TestLoadTokensKubeletSecret: the token file in a Secret volume as the
// kubelet makes it (a tmpfs of its own, 2777 with fsGroup, the atomic
// writer's symlinks, the file 0440 root:fsGroup) is refused, read-only or
// not: a tmpfs of its own is not told from an emptyDir in memory, which a
// sidecar may write. (A Secret whose directory others may not write
// passes the ordinary rule.)
func TestLoadTokensKubeletSecret(t *testing.T) {
	requireRoot(t)
	tokens := map[string]string{"tokens": "ci-runner sha256:" + strings.Repeat("ab", 32) + "\n"}
	for _, ro := range []bool{true, false} {
		base := t.TempDir()
		must(t, os.Chmod(base, 0o755))
		mnt := filepath.Join(base, "auth")
		must(t, os.Mkdir(mnt, 0o755))
		mountOrSkip(t, "tmpfs", mnt, "tmpfs", 0, "mode=0777,size=1m")
		kubeVolume(t, mnt, tokens, 0o440)
		if ro {
			remountRO(t, mnt)
		}
		_, err := LoadTokens(filepath.Join(mnt, "tokens"))
		if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "directory "+mnt+" (mode 2777, owner uid 0) is writable by group or others") {
			t.Errorf("read-only %v: LoadTokens = %v, want refused: the directory is writable by others", ro, err)
		}
	}
}
