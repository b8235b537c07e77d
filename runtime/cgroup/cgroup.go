// Package cgroup is the cgroups toolgate makes for what it runs: the
// detection, which only reads (ReadHost: the mounted hierarchies and this
// process's place in each), the server's directories (Setup, a Manager),
// one Group per call, service or prepared sandbox (created with its
// limits, entered at clone time or by the enter shim, killed as one,
// removed), and the sweep of what a killed server left. It starts no
// process and imports nothing of toolgate.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Prefix starts the name of every cgroup directory toolgate creates:
// toolgate-<server pid>/<call id>.
const Prefix = "toolgate-"

// OCISuffix ends the name of the OCI backend's parent of its
// containers' cgroups (Prefix + pid + OCISuffix): the runtimes
// create it, and the server's sweep removes it after a crash.
const OCISuffix = ".oci"

// Manager is the cgroup support the host gives toolgate, set up once at
// start-up (Setup): the server's directories, under which every call's
// Group is made. Either part may be missing: the cgroup2 hierarchy gives every
// call a group that is killed as one (cgroup.kill), which also catches
// daemons that escaped the process group; the pids and memory controllers,
// from cgroup2 or from the v1 hierarchies of a hybrid host, bound a call's
// processes and memory.
type Manager struct {
	// V2 is the directory under which call groups are created in the
	// cgroup2 hierarchy, or "" when none is usable.
	V2 string
	// V2Controllers are the controllers enabled for call groups in V2.
	V2Controllers []string
	// V1 maps a v1 controller ("pids", "memory") to the directory under
	// which call groups are created in its hierarchy.
	V1 map[string]string
	// Notes say why a part is unusable, for doctor.
	Notes []string
	// host is the layout Setup made the directories in (ServerDirs).
	host Host
}

// Limits are the per-call cgroup limits; zero means unlimited.
type Limits struct {
	Pids   int64
	Memory int64
}

// Has reports whether call groups can enforce the controller ("pids" or
// "memory"), from either hierarchy.
func (c *Manager) Has(controller string) bool {
	if c == nil {
		return false
	}
	if slices.Contains(c.V2Controllers, controller) {
		return true
	}
	_, ok := c.V1[controller]
	return ok
}

// String summarises the detection for logs and doctor.
func (c *Manager) String() string {
	if c == nil {
		return "no cgroups"
	}
	var parts []string
	if c.V2 != "" {
		parts = append(parts, fmt.Sprintf("cgroup2 %s (controllers: %s)", c.V2, orNone(c.V2Controllers)))
	}
	for _, ctl := range []string{"pids", "memory"} {
		if d, ok := c.V1[ctl]; ok {
			parts = append(parts, fmt.Sprintf("v1 %s %s", ctl, d))
		}
	}
	if len(parts) == 0 {
		return "no usable cgroups"
	}
	return strings.Join(parts, "; ")
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

// Setup reads the host (ReadHost) and creates the server's
// directories (Prefix + pid) in each usable hierarchy; see Setup.
func Setup() *Manager { return ReadHost().Setup() }

// Setup creates the server's directories (Prefix + pid) in each
// usable hierarchy of h and returns the cgroup support they give. It never
// fails: what is unusable is recorded in Notes. Call Close at exit.
func (h Host) Setup() *Manager {
	c := &Manager{V1: map[string]string{}, Notes: slices.Clone(h.Notes), host: h}
	if h.own == nil {
		return c
	}
	mounts, own := h.Mounts, h.own
	name := Prefix + strconv.Itoa(os.Getpid())
	for _, m := range mounts {
		if m.FSType == "cgroup2" && c.V2 == "" {
			p, ok := own["0"]
			if !ok {
				continue
			}
			base, ok := m.dir(p)
			if !ok {
				c.Notes = append(c.Notes, fmt.Sprintf("cgroup2: own cgroup %s is outside the mounted subtree %s", p, m.Root))
				continue
			}
			c.setupV2(base, name)
		}
	}
	if c.V2 == "" && !slices.ContainsFunc(mounts, func(m Mount) bool { return m.FSType == "cgroup2" }) {
		c.Notes = append(c.Notes, "no cgroup2 hierarchy mounted")
	}
	for _, ctl := range []string{"pids", "memory"} {
		if slices.Contains(c.V2Controllers, ctl) {
			continue
		}
		for _, m := range mounts {
			if m.FSType != "cgroup" || !slices.Contains(m.Super, ctl) {
				continue
			}
			p, ok := own[ctl]
			if !ok {
				continue
			}
			base, ok := m.dir(p)
			if !ok {
				c.Notes = append(c.Notes, fmt.Sprintf("v1 %s: own cgroup %s is outside the mounted subtree %s", ctl, p, m.Root))
				break
			}
			dir := filepath.Join(base, name)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				c.Notes = append(c.Notes, fmt.Sprintf("v1 %s: %v", ctl, err))
				break
			}
			if ctl == "memory" {
				// Without use_hierarchy the limit would not cover the
				// subtree; it is the default on every current kernel.
				_ = os.WriteFile(filepath.Join(dir, "memory.use_hierarchy"), []byte("1"), 0)
			}
			c.V1[ctl] = dir
			break
		}
	}
	for _, ctl := range []string{"pids", "memory"} {
		if !c.Has(ctl) {
			c.Notes = append(c.Notes, fmt.Sprintf("no usable %s controller: per-call %s limits cannot be enforced by a cgroup", ctl, ctl))
		}
	}
	return c
}

// setupV2 sets up the server directory under base, the cgroup2 directory
// of this process, and the controllers it can hand to call groups.
func (c *Manager) setupV2(base, name string) {
	dir := filepath.Join(base, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		c.Notes = append(c.Notes, fmt.Sprintf("cgroup2 %s: %v", base, err))
		return
	}
	c.V2 = dir
	want := []string{"pids", "memory"}
	avail := ReadWords(filepath.Join(base, "cgroup.controllers"))
	var enable []string
	for _, w := range want {
		if slices.Contains(avail, w) {
			enable = append(enable, w)
		}
	}
	if len(enable) == 0 {
		return
	}
	// A non-root cgroup cannot hold processes and hand controllers to its
	// children. When this process is alone in its cgroup, it moves itself
	// into a leaf so that the controllers can be enabled below.
	if err := enableControllers(base, enable); err != nil {
		procs := ReadWords(filepath.Join(base, "cgroup.procs"))
		if len(procs) == 1 && procs[0] == strconv.Itoa(os.Getpid()) {
			leaf := filepath.Join(base, name+".server")
			if err := os.Mkdir(leaf, 0o755); err == nil || errors.Is(err, os.ErrExist) {
				// Best effort: the retry below says whether it worked.
				_ = os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte("0"), 0)
			}
		}
		if err := enableControllers(base, enable); err != nil {
			c.Notes = append(c.Notes, fmt.Sprintf("cgroup2 controllers %s not delegable at %s: %v", strings.Join(enable, ","), base, err))
			return
		}
	}
	if err := enableControllers(dir, enable); err != nil {
		c.Notes = append(c.Notes, fmt.Sprintf("cgroup2 controllers at %s: %v", dir, err))
		return
	}
	c.V2Controllers = enable
}

func enableControllers(dir string, ctls []string) error {
	have := ReadWords(filepath.Join(dir, "cgroup.subtree_control"))
	var add []string
	for _, ctl := range ctls {
		if !slices.Contains(have, ctl) {
			add = append(add, "+"+ctl)
		}
	}
	if len(add) == 0 {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(add, " ")), 0)
}

// Close removes the server directories (and any call group left in them).
func (c *Manager) Close() {
	if c == nil {
		return
	}
	if c.V2 != "" {
		removeTree(c.V2, true)
		_ = os.Remove(c.V2 + ".server")
	}
	for _, d := range c.V1 {
		removeTree(d, false)
	}
}

// Sweep removes what servers that died without cleaning up (SIGKILL) left
// in every hierarchy: their directories, after killing any process still in
// them. It returns the directories removed.
func (c *Manager) Sweep() []string {
	if c == nil {
		return nil
	}
	var parents []string
	if c.V2 != "" {
		parents = append(parents, filepath.Dir(c.V2))
	}
	for _, d := range c.V1 {
		parents = append(parents, filepath.Dir(d))
	}
	var removed []string
	for _, parent := range parents {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			rest, ok := strings.CutPrefix(e.Name(), Prefix)
			if !ok || !e.IsDir() {
				continue
			}
			rest = strings.TrimSuffix(strings.TrimSuffix(rest, ".server"), OCISuffix)
			pid, err := strconv.Atoi(rest)
			if err != nil || pid == os.Getpid() || processAlive(pid) {
				continue
			}
			dir := filepath.Join(parent, e.Name())
			removeTree(dir, parent == filepath.Dir(c.V2))
			removed = append(removed, dir)
		}
	}
	return removed
}

func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// removeTree kills every process in dir and its descendants, then removes
// them bottom-up.
func removeTree(dir string, v2 bool) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeTree(filepath.Join(dir, e.Name()), v2)
		}
	}
	g := dirGroup(dir, v2)
	g.Kill()
	_ = g.remove()
}

// dirGroup is the Group of the one cgroup directory dir, of the cgroup2
// hierarchy or (v2 false) of a v1 one: what Sweep and the guard kill and
// remove.
func dirGroup(dir string, v2 bool) *Group {
	g := &Group{fd: -1}
	if v2 {
		g.v2 = dir
	} else {
		g.v1 = []string{dir}
	}
	return g
}

// Group is one call's cgroup: a directory in the cgroup2 hierarchy (joined
// at clone time with CLONE_INTO_CGROUP) and/or directories in the v1
// pids and memory hierarchies (joined by the enter shim before it execs).
type Group struct {
	v2 string
	fd int
	v1 []string
	// events are the files whose counts say a limit was reached
	// (Exceeded): one for each limit the group set, memory's first.
	events []event
}

// event is a flat-keyed cgroup file whose key counts the times a
// controller's limit was reached.
type event struct {
	file, key, controller string
}

// NewGroup creates the cgroup of call id with the given limits. A limit
// that the host cannot enforce by cgroup is an error: callers check Has
// first and decide.
func (c *Manager) NewGroup(id string, lim Limits) (*Group, error) {
	g := &Group{fd: -1}
	fail := func(err error) (*Group, error) {
		_ = g.remove()
		return nil, err
	}
	if c.V2 != "" {
		dir := filepath.Join(c.V2, id)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fail(fmt.Errorf("create cgroup: %w", err))
		}
		g.v2 = dir
		if lim.Pids > 0 && slices.Contains(c.V2Controllers, "pids") {
			if err := writeLimit(dir, "pids.max", lim.Pids); err != nil {
				return fail(err)
			}
			g.events = append(g.events, event{filepath.Join(dir, "pids.events"), "max", Pids})
			lim.Pids = 0
		}
		if lim.Memory > 0 && slices.Contains(c.V2Controllers, "memory") {
			if err := writeLimit(dir, "memory.max", lim.Memory); err != nil {
				return fail(err)
			}
			_ = writeLimit(dir, "memory.swap.max", 0)
			g.events = append([]event{{filepath.Join(dir, "memory.events"), "oom_kill", Memory}}, g.events...)
			lim.Memory = 0
		}
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(fmt.Errorf("open cgroup: %w", err))
		}
		g.fd = fd
	}
	if lim.Pids > 0 {
		base, ok := c.V1["pids"]
		if !ok {
			return fail(errors.New("no pids controller for the per-call process limit"))
		}
		dir := filepath.Join(base, id)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fail(fmt.Errorf("create v1 pids cgroup: %w", err))
		}
		g.v1 = append(g.v1, dir)
		if err := writeLimit(dir, "pids.max", lim.Pids); err != nil {
			return fail(err)
		}
		g.events = append(g.events, event{filepath.Join(dir, "pids.events"), "max", Pids})
	}
	if lim.Memory > 0 {
		base, ok := c.V1["memory"]
		if !ok {
			return fail(errors.New("no memory controller for the per-call memory limit"))
		}
		dir := filepath.Join(base, id)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fail(fmt.Errorf("create v1 memory cgroup: %w", err))
		}
		g.v1 = append(g.v1, dir)
		if err := writeLimit(dir, "memory.limit_in_bytes", lim.Memory); err != nil {
			return fail(err)
		}
		g.events = append([]event{{filepath.Join(dir, "memory.oom_control"), "oom_kill", Memory}}, g.events...)
		// Swap counts against the same limit where swap accounting exists.
		if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
			if err := writeLimit(dir, "memory.memsw.limit_in_bytes", lim.Memory); err != nil {
				return fail(err)
			}
		}
	}
	return g, nil
}

func writeLimit(dir, file string, v int64) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(v, 10)), 0); err != nil {
		return fmt.Errorf("set %s: %w", file, err)
	}
	return nil
}

// FD is the group's cgroup2 directory opened O_PATH, for
// CLONE_INTO_CGROUP (SysProcAttr.CgroupFD); -1 when the group has no
// cgroup2 part.
func (g *Group) FD() int {
	if g == nil {
		return -1
	}
	return g.fd
}

// Joins lists the cgroup.procs files a process must write itself into to
// enter the v1 part of the group (the cgroup2 part is entered at clone).
func (g *Group) Joins() []string {
	if g == nil {
		return nil
	}
	out := make([]string, 0, len(g.v1))
	for _, d := range g.v1 {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

// Kill SIGKILLs every process in the group.
func (g *Group) Kill() {
	if g == nil {
		return
	}
	if g.v2 != "" {
		if err := os.WriteFile(filepath.Join(g.v2, "cgroup.kill"), []byte("1"), 0); err != nil {
			killProcs(g.v2)
		}
	}
	for _, d := range g.v1 {
		killProcs(d)
	}
}

// killProcs SIGKILLs the processes listed in dir/cgroup.procs until it is
// empty or a bounded number of rounds passed (forks race the reads).
func killProcs(dir string) {
	for range 50 {
		procs := ReadWords(filepath.Join(dir, "cgroup.procs"))
		if len(procs) == 0 {
			return
		}
		for _, p := range procs {
			if pid, err := strconv.Atoi(p); err == nil && pid > 0 {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
}

// Close kills what remains in the group, waits for it to empty and removes
// it.
func (g *Group) Close() error {
	if g == nil {
		return nil
	}
	g.Kill()
	return g.remove()
}

// remove waits (bounded) for the directories to empty and removes them.
func (g *Group) remove() error {
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
	var errs []error
	dirs := append([]string(nil), g.v1...)
	if g.v2 != "" {
		dirs = append(dirs, g.v2)
	}
	for _, d := range dirs {
		var err error
		for i := range 200 {
			err = os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			if i%20 == 19 {
				killProcs(d)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// The controllers whose limits a Group can report as reached (Exceeded).
const (
	Pids   = "pids"
	Memory = "memory"
)

// Exceeded reports the controller whose limit the group's processes ran
// into (Memory before Pids), or "" for none.
func (g *Group) Exceeded() string {
	if g == nil {
		return ""
	}
	// Only the limits the group set can be reached: a call's path reads
	// their files and no other.
	for _, e := range g.events {
		if eventCount(e.file, e.key) > 0 {
			return e.controller
		}
	}
	return ""
}

// eventCount reads "key N" from a flat-keyed cgroup file.
func eventCount(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(l, " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
