package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// SandboxUID and SandboxGID are the unprivileged ids sandboxes run tools as
// when toolgate runs as root (nobody:nogroup).
const (
	SandboxUID = 65534
	SandboxGID = 65534
)

// forbiddenDirs may never be a sandboxed tool's dir: binding them would
// hand the sandbox the host's private state (all of /etc, /run, /var, home
// directories) or its kernel interfaces, or hide the private /tmp.
var forbiddenDirs = []string{"/", "/etc", "/run", "/var", "/home", "/root", "/boot", "/tmp", "/usr", "/mnt", "/media", "/srv", "/opt"}

// forbiddenTrees may not contain a sandboxed tool's dir at any depth.
var forbiddenTrees = []string{"/proc", "/sys", "/dev"}

// CheckSandboxTool checks that a test-class tool can be sandboxed safely:
// its canonical dir is not a host root that must stay private, and uid:gid
// (the host ids the sandbox runs as) can traverse the dir and execute the
// exe. dir and exe are canonical (symlinks resolved).
func CheckSandboxTool(dir, exe string, uid, gid int) error {
	for _, f := range forbiddenDirs {
		if dir == f {
			return fmt.Errorf("dir %q cannot be bound into a sandbox: it would expose the host's %s (use a project directory below it)", dir, f)
		}
	}
	for _, f := range forbiddenTrees {
		if dir == f || strings.HasPrefix(dir, f+"/") {
			return fmt.Errorf("dir %q is under %s, a kernel interface that is never bound into a sandbox", dir, f)
		}
	}
	if uid < 0 {
		return nil
	}
	if err := canAccess(dir, uid, gid, 05); err != nil {
		return fmt.Errorf("the sandbox runs as uid %d gid %d, which cannot use the dir: %w", uid, gid, err)
	}
	return CanExecute(exe, uid, gid)
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
