package conf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrUntrusted marks a tools.conf or registry file that someone other than
// root and toolgate's own user could change: the file, or a directory on
// its way from /, is owned by another user or writable by group or others.
var ErrUntrusted = errors.New("untrusted path")

// maxLinks bounds the symlinks followed in one path, as the kernel does.
const maxLinks = 40

// checkTrusted refuses path unless every directory traversed to resolve
// it, from / down and through every symlink, and the file it names, are
// owned by root or by euid and writable by no one else: whoever could
// change one of them could make toolgate load a conf of theirs, and run
// its tools as toolgate. This is sshd's StrictModes rule, applied from /.
//
// One exception, the sticky bit: a directory writable by others is
// accepted when it is sticky and owned by root (/tmp, /var/tmp, /dev/shm),
// because the kernel lets no one but an entry's owner (and root) remove or
// rename it there; the entry the path goes through in such a directory (a
// directory, the file, or a symlink) must then itself be owned by root or
// euid. So /tmp/d/tools.conf is trusted when d is ours and not writable by
// others, and never when d (or a symlink /tmp/d) belongs to someone else.
//
// A second exception, a read-only mount of a volume only the kubelet
// writes (ConfigMap, projected, downward API): a directory others may
// write by its mode is accepted when the mount shows such a volume
// (kubeletVolume) and no one can write it through any mount toolgate's
// mount namespace has (readOnlyDir): the mount it is on is read-only, and
// its filesystem has no read-write mount there that reaches it. Any other
// volume (an emptyDir, a PVC, NFS, a host directory, a Secret's tmpfs)
// may be mounted read-write where this namespace cannot see it. From that directory on,
// the rest of the path — every entry, directory, symlink and the file —
// must be on that same mount, so the symlinks of the kubelet's atomic
// writer (tools.conf -> ..data/tools.conf, ..data -> ..2026_12_02_...)
// are followed inside it and never out of it (an absolute target, or a
// ".." above its root, is refused). The owner rules are unchanged there.
// What this trusts: whoever can write the filesystem beneath the mount
// from outside toolgate's mount namespace — on Kubernetes the kubelet,
// root on the node, as for every directory: node root is trusted anyway.
//
// The file's own mode is not checked here but by the caller. It returns
// the Lstat of the file path resolves to. It only reads metadata (lstat,
// statx, statfs, readlink, /proc/self/mountinfo): conf stays free of
// execution.
func checkTrusted(path string, euid int) (fs.FileInfo, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	rest := splitPath(abs)
	cur := "/"
	curFi, err := os.Lstat(cur)
	if err != nil {
		return nil, err
	}
	// ro is the read-only mount a directory others may write was
	// accepted on: the rest of the path must stay on it.
	var ro *roMount
	if ro, err = trustedDir(cur, curFi, euid, path); err != nil {
		return nil, err
	}
	links := 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			if curFi, err = os.Lstat(cur); err != nil {
				return nil, err
			}
			if err := ro.holds(cur, path); err != nil {
				return nil, err
			}
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return nil, err
		}
		if err := ro.holds(next, path); err != nil {
			return nil, err
		}
		if err := trustedEntry(cur, curFi, next, fi, euid, path); err != nil {
			return nil, err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if links++; links > maxLinks {
				return nil, &fs.PathError{Op: "resolve", Path: path, Err: syscall.ELOOP}
			}
			target, err := os.Readlink(next)
			if err != nil {
				return nil, err
			}
			if filepath.IsAbs(target) {
				cur = "/"
				if curFi, err = os.Lstat(cur); err != nil {
					return nil, err
				}
				if err := ro.holds(cur, path); err != nil {
					return nil, err
				}
			}
			rest = append(splitPath(target), rest...)
			continue
		}
		if len(rest) == 0 {
			if err := trustedFile(next, fi, euid, path); err != nil {
				return nil, err
			}
			return fi, nil
		}
		if !fi.IsDir() {
			return nil, &fs.PathError{Op: "resolve", Path: next, Err: syscall.ENOTDIR}
		}
		m, err := trustedDir(next, fi, euid, path)
		if err != nil {
			return nil, err
		}
		if ro == nil {
			ro = m
		}
		cur, curFi = next, fi
	}
	// The path named a directory ("/", or one ending in "/.."): the
	// directory itself, already checked, is what it names.
	return curFi, nil
}

func splitPath(p string) []string {
	return strings.Split(strings.Trim(p, "/"), "/")
}

func ownerOf(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

func trustedOwner(fi fs.FileInfo, euid int) (uint32, bool) {
	uid, ok := ownerOf(fi)
	return uid, ok && (uid == 0 || int64(uid) == int64(euid))
}

// stickyRoot reports a directory others may write but, sticky and owned
// by root, not take entries from.
func stickyRoot(fi fs.FileInfo) bool {
	uid, ok := ownerOf(fi)
	return ok && uid == 0 && fi.Mode()&fs.ModeSticky != 0
}

// owners names who may own what toolgate loads.
func owners(euid int) string {
	if euid == 0 {
		return "root"
	}
	return fmt.Sprintf("root or toolgate's uid %d", euid)
}

func untrusted(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUntrusted}, a...)...)
}

// trustedDir checks a directory on the way to the file. A directory
// others may write by its mode passes when it is sticky and root's, or on
// a read-only mount no one can write it through (readOnlyDir): then it
// returns that mount, which the rest of the path must not leave.
func trustedDir(dir string, fi fs.FileInfo, euid int, path string) (*roMount, error) {
	uid, ok := trustedOwner(fi, euid)
	if !ok {
		return nil, untrusted("directory %s (mode %04o) is owned by uid %d, not by %s: its owner can replace %s and run code as toolgate; chown root %s, or keep the file elsewhere",
			dir, fi.Mode().Perm(), uid, owners(euid), path, dir)
	}
	if fi.Mode().Perm()&0o022 == 0 || stickyRoot(fi) {
		return nil, nil
	}
	m, err := readOnlyDir(dir, fi)
	if err != nil {
		return nil, untrusted("directory %s (mode %04o, owner uid %d) is writable by group or others: they can replace %s and run code as toolgate; chmod go-w %s (not a read-only mount toolgate can trust: %v)",
			dir, fi.Mode().Perm()|specialBits(fi), uid, path, dir, err)
	}
	return m, nil
}

// trustedEntry checks an entry found in dir: in a sticky directory others
// can write, it must be ours (or root's), since its owner may remove or
// rename it.
func trustedEntry(dir string, dirFi fs.FileInfo, entry string, fi fs.FileInfo, euid int, path string) error {
	if dirFi.Mode().Perm()&0o022 == 0 {
		return nil
	}
	if uid, ok := trustedOwner(fi, euid); !ok {
		return untrusted("%s is owned by uid %d, not by %s, in %s (mode %04o), a directory others can write: its owner can swap it, and with it what toolgate loads as %s; chown root %s, or keep the file in a directory of root's",
			entry, uid, owners(euid), dir, dirFi.Mode().Perm()|stickyBits(dirFi), path, entry)
	}
	return nil
}

func stickyBits(fi fs.FileInfo) fs.FileMode {
	if fi.Mode()&fs.ModeSticky != 0 {
		return 0o1000
	}
	return 0
}

// specialBits are the setgid and sticky bits of fi as chmod writes them
// (the kubelet leaves a volume's directory 2777).
func specialBits(fi fs.FileInfo) fs.FileMode {
	m := stickyBits(fi)
	if fi.Mode()&fs.ModeSetgid != 0 {
		m |= 0o2000
	}
	return m
}

// trustedFile checks the owner of the file itself; its mode is the
// caller's check (Load, registry.Load), which words it for what
// the file is.
func trustedFile(file string, fi fs.FileInfo, euid int, path string) error {
	uid, ok := trustedOwner(fi, euid)
	if ok {
		return nil
	}
	name := path
	if file != path {
		name = fmt.Sprintf("%s (resolved: %s)", path, file)
	}
	return untrusted("%s is owned by uid %d (mode %04o), not by %s: its owner can change it and run code as toolgate; chown root %s",
		name, uid, fi.Mode().Perm(), owners(euid), file)
}

// CheckTrusted refuses the file or directory a caller opened at path
// (opened is its Stat) unless path is trusted (checkTrusted, for toolgate's
// euid) and still resolves to that file: the check of every file toolgate
// reads its configuration from, for the loaders outside this package.
func CheckTrusted(path string, opened fs.FileInfo) error {
	checked, err := checkTrusted(path, os.Geteuid())
	if err != nil {
		return err
	}
	return checkSame(path, opened, checked)
}

// checkSame refuses a file that is not the one checkTrusted resolved: the
// path changed between the open and the check.
func checkSame(path string, opened, checked fs.FileInfo) error {
	if os.SameFile(opened, checked) {
		return nil
	}
	return untrusted("%s changed while it was being checked; try again", path)
}

// roMount is a read-only mount a directory others may write was accepted
// on (readOnlyDir).
type roMount struct {
	id    uint64 // the mount's id (statx STATX_MNT_ID, mountinfo's first field)
	point string // where it is mounted, for the messages
	dir   string // the directory accepted on it
}

// holds refuses p unless it is on m: once the path went through a
// directory trusted for its read-only mount, nothing after it may be
// elsewhere (a symlink out of the mount, a ".." above its root, a mount
// on top of an entry). A nil m holds everything.
func (m *roMount) holds(p, path string) error {
	if m == nil {
		return nil
	}
	id, err := mountID(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return untrusted("%s, on the way to %s after %s (trusted only for its read-only mount %s): %v", p, path, m.dir, m.point, err)
	}
	if id != m.id {
		return untrusted("%s is not on the read-only mount %s that %s is trusted for: the path to %s leaves it, and a directory others may write is trusted only for what it holds itself",
			p, m.point, m.dir, path)
	}
	return nil
}

// readOnlyDir reports why dir (whose Lstat is fi) could be written by
// someone in toolgate's mount namespace despite its mode, or returns the
// read-only mount that makes it unwritable: dir itself, opened without
// following a symlink and the same inode as fi, is on a read-only mount
// (fstatfs ST_RDONLY; mountinfo's "ro"), and no read-write mount of the
// same filesystem in /proc/self/mountinfo reaches into the part of it
// that mount shows (a bind of the same tree, of a directory above it, or
// of one inside it). Only root can make such a mount writable again:
// remounting it needs CAP_SYS_ADMIN over its mount namespace, and a mount
// inherited by a less privileged user namespace (a pod's, a sandbox's)
// stays read-only there (MNT_LOCK_READONLY); root may write anything
// anyway. What the mount table cannot show is trusted as it is for every
// directory the mode protects: writes beneath the filesystem (an
// overlay's upper directory, a network filesystem's server, a FUSE
// daemon) and mounts of other namespaces (the node's, for a pod).
func readOnlyDir(dir string, fi fs.FileInfo) (*roMount, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat: %w", err)
	}
	if want, ok := fi.Sys().(*syscall.Stat_t); !ok || want.Dev != st.Dev || want.Ino != st.Ino {
		return nil, errors.New("it changed while it was being checked")
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return nil, fmt.Errorf("fstatfs: %w", err)
	}
	if sfs.Flags&unix.ST_RDONLY == 0 {
		return nil, errors.New("its mount is read-write")
	}
	id, err := mountID(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		return nil, err
	}
	mounts, err := readMountinfo()
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(mounts, func(m mountinfo) bool { return m.id == id })
	if i < 0 {
		return nil, fmt.Errorf("its mount %d is not in /proc/self/mountinfo", id)
	}
	self := mounts[i]
	if self.writable() {
		return nil, fmt.Errorf("its mount %s is read-write", self.point)
	}
	if !kubeletVolume(self.root) {
		return nil, fmt.Errorf("its read-only mount %s shows %s, not a kubelet's ConfigMap, projected or downward API volume (…/volumes/kubernetes.io~configmap/NAME): another mount of it elsewhere (a sidecar's, another pod's, an NFS client's) could write it", self.point, self.root)
	}
	for _, m := range mounts {
		if m.dev == self.dev && m.writable() && overlaps(m.root, self.root) {
			return nil, fmt.Errorf("it is on the read-only mount %s, but its filesystem is also mounted read-write at %s, through which it can be written", self.point, m.point)
		}
	}
	return &roMount{id: id, point: self.point, dir: dir}, nil
}

// kubeletVolumes are the volume kinds whose only writer is the kubelet
// (its atomic writer), by the directory the kubelet keeps them in.
var kubeletVolumes = []string{"kubernetes.io~configmap", "kubernetes.io~projected", "kubernetes.io~downward-api"}

// kubeletVolume reports whether root, the directory a mount shows of its
// filesystem, is a volume the kubelet alone writes:
// …/volumes/kubernetes.io~configmap/NAME (or ~projected, ~downward-api),
// a path only the node's root makes. An emptyDir, a PVC, an NFS export or
// a hostPath may be mounted read-write elsewhere, by a sidecar or another
// pod or host, where toolgate's mount table cannot see it, so a read-only
// mount of one proves nothing. A Secret's is a tmpfs of its own, which a
// mount cannot tell from an emptyDir in memory: it is not trusted so.
func kubeletVolume(root string) bool {
	parts := strings.Split(root, "/")
	n := len(parts)
	return n >= 3 && parts[n-3] == "volumes" && slices.Contains(kubeletVolumes, parts[n-2]) && parts[n-1] != ""
}

// ReadOnlyDir returns nil when dir (fi is its Stat), a directory whose
// mode lets group or others write it, can be trusted as checkTrusted
// trusts one on its way: on a read-only mount no one can write it through
// (readOnlyDir); else why not. For a caller that checks the mode of the
// directory it names itself, as the registry does its own.
func ReadOnlyDir(dir string, fi fs.FileInfo) error {
	_, err := readOnlyDir(dir, fi)
	return err
}

// mountID is the id of the mount p (relative to dirfd) is on, by statx.
func mountID(dirfd int, p string, flags int) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(dirfd, p, flags, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, fmt.Errorf("statx: %w", err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return 0, errors.New("the kernel names no mount id (statx STATX_MNT_ID, Linux 5.8)")
	}
	return stx.Mnt_id, nil
}

// overlaps reports whether one of two paths inside a filesystem contains
// the other.
func overlaps(a, b string) bool {
	within := func(p, dir string) bool {
		return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
	}
	return within(a, b) || within(b, a)
}

// mountinfo is one line of /proc/self/mountinfo, as far as the trust
// check needs it (proc_pid_mountinfo(5)).
type mountinfo struct {
	id    uint64
	dev   string // major:minor of the filesystem
	root  string // the directory of the filesystem the mount shows
	point string // where it is mounted
	rw    bool   // the mount's own option
	sbRW  bool   // the filesystem's (super options)
}

// writable reports whether files can be written through the mount.
func (m mountinfo) writable() bool { return m.rw && m.sbRW }

func readMountinfo() ([]mountinfo, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	var out []mountinfo
	for line := range strings.Lines(string(data)) {
		m, err := parseMountinfo(strings.TrimSuffix(line, "\n"))
		if err != nil {
			return nil, fmt.Errorf("/proc/self/mountinfo: %w: %q", err, line)
		}
		out = append(out, m)
	}
	return out, nil
}

// parseMountinfo reads "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3
// /dev/root rw,errors=continue".
func parseMountinfo(line string) (mountinfo, error) {
	pre, post, ok := strings.Cut(line, " - ")
	f := strings.Fields(pre)
	g := strings.Fields(post)
	if !ok || len(f) < 6 || len(g) < 3 {
		return mountinfo{}, errors.New("malformed line")
	}
	id, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return mountinfo{}, errors.New("malformed mount id")
	}
	return mountinfo{
		id: id, dev: f[2], root: unescapeMount(f[3]), point: unescapeMount(f[4]),
		rw: slices.Contains(strings.Split(f[5], ","), "rw"), sbRW: slices.Contains(strings.Split(g[2], ","), "rw"),
	}, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, \011,
// \012, \134).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
