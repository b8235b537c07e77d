package cgroup

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount is one line of /proc/self/mountinfo, as far as cgroups need it.
type Mount struct {
	// Root is the path within the filesystem that is mounted.
	Root string
	// Point is where it is mounted.
	Point string
	// FSType is the filesystem type ("cgroup", "cgroup2", ...).
	FSType string
	// Super are the super options (a v1 cgroup's controllers).
	Super []string
}

// dir returns where the cgroup at path (as /proc/self/cgroup names it) is
// under this mount: a container's cgroup mount may show only a subtree.
func (m Mount) dir(path string) (string, bool) {
	rel, ok := strings.CutPrefix(path, m.Root)
	if !ok || (rel != "" && rel[0] != '/' && m.Root != "/") {
		return "", false
	}
	return filepath.Join(m.Point, rel), true
}

// Mounts parses /proc/self/mountinfo.
func Mounts() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent maj:min root point opts [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || len(fields) < sep+4 {
			continue
		}
		out = append(out, Mount{
			Root:   unescapeMount(fields[3]),
			Point:  unescapeMount(fields[4]),
			FSType: fields[sep+1],
			Super:  strings.Split(fields[sep+3], ","),
		})
	}
	return out, sc.Err()
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// ownCgroups parses /proc/self/cgroup: "0" → cgroup2 path, controller →
// v1 path.
func ownCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for l := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			out["0"] = parts[2]
			continue
		}
		for ctl := range strings.SplitSeq(parts[1], ",") {
			out[ctl] = parts[2]
		}
	}
	return out, nil
}

// Host is this host's cgroup layout as this process sees it: the
// mounted hierarchies and this process's cgroup in each. ReadHost
// only reads (/proc/self/mountinfo, /proc/self/cgroup, the hierarchies'
// files); it is the one detector of both backends: Setup creates the
// server's directories from it, the OCI backend reads from it what a
// runtime making its cgroups from the roots can use (Roots).
type Host struct {
	Mounts []Mount
	// own maps "0" to this process's cgroup2 path, a v1 controller to its
	// path in that hierarchy (as /proc/self/cgroup names them).
	own map[string]string
	// Notes say what could not be read.
	Notes []string
}

// ReadHost reads the host's cgroup layout. It changes nothing.
func ReadHost() Host {
	var h Host
	var err error
	if h.Mounts, err = Mounts(); err != nil {
		h.Notes = append(h.Notes, "read mountinfo: "+err.Error())
		return h
	}
	if h.own, err = ownCgroups(); err != nil {
		h.Notes = append(h.Notes, "read /proc/self/cgroup: "+err.Error())
	}
	return h
}

// Roots is what the hierarchies offer at their roots, where an OCI
// runtime creates its containers' cgroups.
type Roots struct {
	Pids, Memory bool
	// Swap: memory+swap can be capped (v1 memsw accounting).
	Swap bool
	// HybridControllers: /sys/fs/cgroup is not cgroup2 but a cgroup2
	// hierarchy at /sys/fs/cgroup/unified lists controllers (crun 1.8
	// refuses to start then).
	HybridControllers bool
}

// UnifiedControllers is the file crun 1.8 checks on a hybrid host.
const UnifiedControllers = "/sys/fs/cgroup/unified/cgroup.controllers"

// Roots reads what the hierarchies offer at their roots. It changes
// nothing.
func (h Host) Roots() Roots {
	var c Roots
	for _, m := range h.Mounts {
		switch m.FSType {
		case "cgroup":
			if slices.Contains(m.Super, "pids") {
				c.Pids = true
			}
			if slices.Contains(m.Super, "memory") {
				c.Memory = true
				if _, err := os.Stat(filepath.Join(m.Point, "memory.memsw.limit_in_bytes")); err == nil {
					c.Swap = true
				}
			}
		case "cgroup2":
			if m.Point == "/sys/fs/cgroup" {
				ctls := ReadWords(filepath.Join(m.Point, "cgroup.controllers"))
				c.Pids = c.Pids || slices.Contains(ctls, "pids")
				c.Memory = c.Memory || slices.Contains(ctls, "memory")
			}
		}
	}
	var root, unified unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &root) == nil && root.Type != unix.CGROUP2_SUPER_MAGIC &&
		unix.Statfs("/sys/fs/cgroup/unified", &unified) == nil && unified.Type == unix.CGROUP2_SUPER_MAGIC {
		c.HybridControllers = len(ReadWords(UnifiedControllers)) > 0
	}
	return c
}

// ReadWords returns the whitespace-separated words of a (cgroup) file, nil
// when it cannot be read.
func ReadWords(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}
