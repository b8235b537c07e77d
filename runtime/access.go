package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/toolgate/toolgate/bundle"
)

// SandboxUID and SandboxGID are the unprivileged ids sandboxes run tools as
// when toolgate runs as root (the sandbox policy's).
const (
	SandboxUID = bundle.SandboxUID
	SandboxGID = bundle.SandboxGID
)

// CheckSandboxTool checks that a test-class tool can be sandboxed safely:
// its canonical dir and exe pass the sandbox policy's rules (bundle.
// CheckToolDir, bundle.CheckExe: the same every backend's renderer
// applies), and uid:gid (the host ids the sandbox runs as) can traverse
// the dir and execute the exe. dir and exe are canonical (symlinks
// resolved).
func CheckSandboxTool(dir, exe string, uid, gid int) error {
	if err := bundle.CheckToolDir(dir); err != nil {
		return err
	}
	if err := bundle.CheckExe(exe); err != nil {
		return err
	}
	if uid < 0 {
		return nil
	}
	if err := canAccess(dir, uid, gid, 05); err != nil {
		return fmt.Errorf("the sandbox runs as uid %d gid %d, which cannot use the dir: %w", uid, gid, err)
	}
	return CanExecute(exe, uid, gid)
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

// CanExecute checks that uid:gid (no supplementary groups) can reach and
// execute p; uid < 0 means the server's own ids, which are not checked.
func CanExecute(p string, uid, gid int) error {
	if uid < 0 {
		return nil
	}
	if err := canAccess(p, uid, gid, 05); err != nil {
		return fmt.Errorf("the sandbox runs as uid %d gid %d, which cannot execute %q: %w", uid, gid, p, err)
	}
	return nil
}

// canAccess checks the mode bits of p (want: 4 read, 1 execute/search) and
// search permission on every ancestor, for uid:gid with no supplementary
// groups. ACLs are not consulted; uid 0 is not special.
func canAccess(p string, uid, gid int, want uint32) error {
	p = filepath.Clean(p)
	var chain []string
	for d := p; d != "/"; d = filepath.Dir(d) {
		chain = append(chain, d)
	}
	chain = append(chain, "/")
	for i := len(chain) - 1; i >= 0; i-- {
		need := uint32(01)
		if i == 0 {
			need = want
		}
		fi, err := os.Stat(chain[i])
		if err != nil {
			return err
		}
		if !allowed(fi, uid, gid, need) {
			return fmt.Errorf("%q (mode %04o, owner %s) does not allow it: make it and its parents searchable by others (chmod o+x), or use another dir",
				chain[i], fi.Mode().Perm(), owner(fi))
		}
	}
	return nil
}

func allowed(fi os.FileInfo, uid, gid int, need uint32) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	perm := uint32(fi.Mode().Perm())
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
}

func owner(fi os.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
	}
	return "?"
}
