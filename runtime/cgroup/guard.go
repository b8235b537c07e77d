package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// ServerDirs lists the directories of this server, in every mounted
// hierarchy, that hold what it starts, whether or not they exist yet: its
// own (Setup's V2 and V1) and, with oci, the places where an OCI runtime
// creates the parent of its containers' cgroups (Prefix + pid + OCISuffix:
// beside the server's own cgroup, which runc uses, or beside its parent,
// runc's choice on cgroup2, or at the root of the hierarchy, as crun and
// runsc do), in every hierarchy, those no limit uses included. It is what
// the server's guard (runtime/shim's guard mode) kills when the server
// dies; never the server's own cgroup (nor its ".server" leaf), which the
// guard shares.
func (c *Manager) ServerDirs(oci bool) []string {
	if c == nil {
		return nil
	}
	var dirs []string
	add := func(d string) {
		if d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	add(c.V2)
	for _, ctl := range []string{"pids", "memory"} {
		add(c.V1[ctl])
	}
	if !oci {
		return dirs
	}
	name := Prefix + strconv.Itoa(os.Getpid()) + OCISuffix
	for _, m := range c.host.Mounts {
		if m.FSType != "cgroup" && m.FSType != "cgroup2" {
			continue
		}
		add(filepath.Join(m.Point, name))
		p, ok := c.host.ownPath(m)
		if !ok {
			continue
		}
		base, ok := m.dir(p)
		if !ok {
			continue
		}
		add(filepath.Join(base, name))
		if base != m.Point {
			add(filepath.Join(filepath.Dir(base), name))
		}
	}
	return dirs
}

// ownPath is this process's cgroup in the hierarchy mounted at m, as
// /proc/self/cgroup names it.
func (h Host) ownPath(m Mount) (string, bool) {
	if m.FSType == "cgroup2" {
		p, ok := h.own["0"]
		return p, ok
	}
	for _, ctl := range m.Super {
		if p, ok := h.own[ctl]; ok {
			return p, true
		}
	}
	return "", false
}

// IsServerDir reports whether dir is named as a directory of the server
// whose pid is pid (ServerDirs): an absolute, clean path whose last
// element is Prefix + pid or Prefix + pid + OCISuffix. The server's
// ".server" leaf, where the server itself runs, is not one.
func IsServerDir(dir string, pid int) bool {
	if pid <= 0 || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return false
	}
	name := Prefix + strconv.Itoa(pid)
	base := filepath.Base(dir)
	return base == name || base == name+OCISuffix
}

// ErrNotCgroup is the error of a directory that is not on a cgroup
// filesystem: nothing in it is a cgroup's process list.
var ErrNotCgroup = errors.New("not on a cgroup filesystem")

// KillServerDirs kills every process in the server directories dirs of
// the server whose pid is pid (IsServerDir) and in every group below
// them, then removes them bottom-up, as Sweep does for a server that died:
// cgroup.kill where a directory is in a cgroup2 hierarchy, else SIGKILL of
// the pids its cgroup.procs lists until it is empty. The hierarchy's
// version is the filesystem's (statfs): a directory that is not on a
// cgroup filesystem is refused, and one that does not exist is nothing to
// do. Every directory is killed before any is waited for. It returns the
// directories it found, and what it could not do.
func KillServerDirs(dirs []string, pid int) ([]string, error) {
	var errs []error
	var found []string
	var v2 []bool
	for _, d := range dirs {
		if !IsServerDir(d, pid) {
			errs = append(errs, fmt.Errorf("%s is not a cgroup directory of server %d", d, pid))
			continue
		}
		var fs unix.Statfs_t
		if err := unix.Statfs(d, &fs); err != nil {
			if !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("%s: %w", d, err))
			}
			continue
		}
		switch fs.Type {
		case unix.CGROUP2_SUPER_MAGIC, unix.CGROUP_SUPER_MAGIC:
		default:
			errs = append(errs, fmt.Errorf("%s: %w", d, ErrNotCgroup))
			continue
		}
		found = append(found, d)
		v2 = append(v2, fs.Type == unix.CGROUP2_SUPER_MAGIC)
		killTree(d, fs.Type == unix.CGROUP2_SUPER_MAGIC)
	}
	for i, d := range found {
		removeTree(d, v2[i])
		if _, err := os.Stat(d); err == nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: still there", d))
		}
	}
	return found, errors.Join(errs...)
}

// killTree SIGKILLs every process in dir and its descendants, top-down
// (a cgroup2 directory's cgroup.kill takes its subtree at once).
func killTree(dir string, v2 bool) {
	dirGroup(dir, v2).Kill()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			killTree(filepath.Join(dir, e.Name()), v2)
		}
	}
}
