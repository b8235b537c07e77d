package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/toolgate/toolgate/bundle"
)

// SandboxUID and SandboxGID are the ids a bwrap sandbox's tool sees inside
// its user namespace (nobody), whatever host ids the sandbox has.
const (
	SandboxUID = bundle.SandboxUID
	SandboxGID = bundle.SandboxGID
)

// CheckSandboxTool checks that a test-class tool can be sandboxed safely:
// its canonical dir and exe pass the sandbox policy's rules (bundle.
// CheckToolDir, bundle.CheckExe: the same every backend's renderer
// applies), and every sandbox, whatever host ids of ids it has, can
// traverse the dir and execute the exe (a zero range: toolgate's own ids,
// not checked). dir and exe are canonical (symlinks resolved).
func CheckSandboxTool(dir, exe string, ids IDRange) error {
	if err := bundle.CheckToolDir(dir); err != nil {
		return err
	}
	if err := bundle.CheckExe(exe); err != nil {
		return err
	}
	if err := ids.Access(dir, 0o5); err != nil {
		return fmt.Errorf("the sandbox runs as %s, which cannot use the dir: %w", ids, err)
	}
	return CanExecute(exe, ids)
}

// SelfTestDir makes the tool dir of a backend's self-test: empty, 0755
// (the sandbox uid traverses it), in the system temp dir. The caller
// removes it.
func SelfTestDir() (string, error) {
	dir, err := os.MkdirTemp("", "toolgate-selftest-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.Remove(dir)
		return "", err
	}
	return dir, nil
}

// CanExecute checks that every sandbox, whatever ids of the range it has
// (no supplementary groups), can reach and execute p; a zero range means
// the server's own ids, which are not checked.
func CanExecute(p string, ids IDRange) error {
	if err := ids.Access(p, 0o5); err != nil {
		return fmt.Errorf("the sandbox runs as %s, which cannot execute %q: %w", ids, p, err)
	}
	return nil
}

// canAccess checks the mode bits of p (want: 4 read, 1 execute/search) and
// search permission on every ancestor, for uid:gid with no supplementary
// groups. ACLs are not consulted; uid 0 is not special.
func canAccess(p string, uid, gid int, want uint32) error {
	return canAccessBy(p, want, func(st *syscall.Stat_t, perm, need uint32) bool {
		var bits uint32
		switch {
		case int(st.Uid) == uid:
			bits = perm >> 6
		case int(st.Gid) == gid:
			bits = perm >> 3
		default:
			bits = perm
		}
		return bits&need == need
	})
}

// canAccessBy is canAccess with allow judging each path's mode bits
// (perm) and owner (st) against need.
func canAccessBy(p string, want uint32, allow func(st *syscall.Stat_t, perm, need uint32) bool) error {
	p = filepath.Clean(p)
	var chain []string
	for d := p; d != "/"; d = filepath.Dir(d) {
		chain = append(chain, d)
	}
	chain = append(chain, "/")
	for i, c := range slices.Backward(chain) {
		need := uint32(0o1)
		if i == 0 {
			need = want
		}
		fi, err := os.Stat(c)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || !allow(st, uint32(fi.Mode().Perm()), need) {
			return fmt.Errorf("%q (mode %04o, owner %s) does not allow it: make it and its parents searchable by others (chmod o+x), or use another dir",
				c, fi.Mode().Perm(), owner(fi))
		}
	}
	return nil
}

func owner(fi os.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
	}
	return "?"
}
