package conf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
// The file's own mode is not checked here but by the caller. It returns
// the Lstat of the file path resolves to. It only reads metadata (lstat,
// readlink): conf stays free of execution.
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
	if err := trustedDir(cur, curFi, euid, path); err != nil {
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
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
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
		if err := trustedDir(next, fi, euid, path); err != nil {
			return nil, err
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

// trustedDir checks a directory on the way to the file.
func trustedDir(dir string, fi fs.FileInfo, euid int, path string) error {
	uid, ok := trustedOwner(fi, euid)
	if !ok {
		return untrusted("directory %s (mode %04o) is owned by uid %d, not by %s: its owner can replace %s and run code as toolgate; chown root %s, or keep the file elsewhere",
			dir, fi.Mode().Perm(), uid, owners(euid), path, dir)
	}
	if fi.Mode().Perm()&0o022 != 0 && !stickyRoot(fi) {
		return untrusted("directory %s (mode %04o, owner uid %d) is writable by group or others: they can replace %s and run code as toolgate; chmod go-w %s",
			dir, fi.Mode().Perm(), uid, path, dir)
	}
	return nil
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
