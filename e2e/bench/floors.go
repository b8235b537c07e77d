package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/bundle"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/shim"
)

// sandboxAttr runs a process as the sandbox uid when the bench is root, as
// the bwrap backend runs bwrap.
func sandboxAttr() *syscall.SysProcAttr {
	if os.Geteuid() != 0 {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: rt.SandboxUID, Gid: rt.SandboxGID, Groups: []uint32{}}}
}

// bwrapStep is a step of the backend's bwrap argv that a floor leaves
// out, to isolate what it costs (breakdown).
type bwrapStep int

const (
	// withoutSeccomp renders the policy with its seccomp off: no
	// --seccomp, no filter loaded.
	withoutSeccomp bwrapStep = iota + 1
	// withoutInitShim has bwrap exec the tool itself, not the init shim
	// that sets the rlimits and execs it with exactly the policy's
	// environment.
	withoutInitShim
)

// bwrapArgv is the exact argv the bwrap backend builds for the probe tool
// (bwrap.Args of the default policy): the init shim bound inside and run
// first, the seccomp program read from bwrap.SeccompFD (seccompFile);
// without leaves steps out.
func (b *bench) bwrapArgv(without ...bwrapStep) ([]string, error) {
	bin, err := bwrap.Find()
	if err != nil {
		return nil, err
	}
	h, err := bundle.DetectHost(os.Lstat, os.Stat, os.Readlink)
	if err != nil {
		return nil, err
	}
	pol := rt.DefaultSandboxLimits().Policy(h, b.shim)
	if slices.Contains(without, withoutSeccomp) {
		pol.Seccomp = false
	}
	p := bwrap.Plan{Template: rt.Template{Path: b.probe, Argv: b.toolArgv(), Dir: b.work}}
	args := bwrap.Args(pol, p)
	if slices.Contains(without, withoutInitShim) {
		i := slices.IndexFunc(args[:len(args)-1], func(a string) bool { return a == "--" })
		if i < 0 || args[i+1] != bundle.ShimPath {
			return nil, fmt.Errorf("bwrap argv: no \"-- %s\" to replace with the tool", bundle.ShimPath)
		}
		args = append(args[:i+1:i+1], p.Argv...)
	}
	return append([]string{bin}, args...), nil
}

// seccompFile is a descriptor holding the backend's seccomp program, as
// the backend hands bwrap one per sandbox.
func seccompFile() (*os.File, error) {
	prog, err := bundle.DefaultSeccompBPF()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	if _, err := w.Write(prog); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// runcPath runs `runc run` of a hand-written minimal bundle: an empty
// rootfs with /usr and the tool's dirs bound read-only, /proc, new pid,
// net, ipc, uts and mount namespaces, uid 65534, the tool's argv. No
// seccomp, no cgroup limits, no rlimits: the least a runc container costs
// here.
func (b *bench) runcPath() (*path, error) {
	p := &path{group: "floor", name: "raw runc run", note: "hand-written minimal bundle: no seccomp, no cgroup limits, no rlimits, no masked paths"}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return p, err
	}
	dir := filepath.Join(b.cache, "runc-floor")
	_ = os.RemoveAll(dir)
	root := filepath.Join(dir, "rootfs")
	bin := filepath.Dir(b.probe)
	for _, d := range []string{"usr", "proc", "dev", "tmp", strings.TrimPrefix(b.work, "/"), strings.TrimPrefix(bin, "/")} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return p, err
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if t, err := os.Readlink("/" + l); err == nil {
			_ = os.Symlink(t, filepath.Join(root, l))
		}
	}
	s := &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: root, Readonly: true},
		Process: &specs.Process{
			Args: b.toolArgv(), Cwd: b.work, Env: rt.Env, NoNewPrivileges: true,
			User: specs.User{UID: rt.SandboxUID, GID: rt.SandboxGID},
		},
		Hostname: "sandbox",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/usr", Type: "bind", Source: "/usr", Options: []string{"rbind", "ro"}},
			{Destination: b.work, Type: "bind", Source: b.work, Options: []string{"rbind", "ro"}},
			{Destination: bin, Type: "bind", Source: bin, Options: []string{"rbind", "ro"}},
		},
		Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}}},
	}
	data, err := json.Marshal(s)
	if err != nil {
		return p, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		return p, err
	}
	state := filepath.Join(dir, "state")
	i := 0
	p.call = func() error {
		i++
		id := "toolgate-bench-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
		var out bytes.Buffer
		cmd := &exec.Cmd{Path: runc, Args: []string{runc, "--root", state, "run", "--bundle", dir, id}, Env: rt.Env, Dir: dir, Stdout: &out, Stderr: &out}
		if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "hello") {
			_ = exec.Command(runc, "--root", state, "delete", "--force", id).Run()
			return fmt.Errorf("runc run: %w: %s", err, firstLine(out.String()))
		}
		return nil
	}
	p.close = func() { _ = os.RemoveAll(dir) }
	return p, nil
}

// ownBundle is the bundle toolgate generates for the test tool (`toolgate
// spec --backend oci`: seccomp, pids and memory cgroup, rlimits, masked
// paths, the init shim), on a skeleton rootfs laid out as the oci backend
// lays out its own, for runc by hand.
type ownBundle struct {
	runc, dir, state, cgParent string
}

func (b *bench) newOwnBundle(conf, name string) (*ownBundle, error) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(b.toolgate, "spec", "--conf", conf, "--backend", "oci", "ts").Output()
	if err != nil {
		return nil, fmt.Errorf("toolgate spec: %w", err)
	}
	var s specs.Spec
	if err := json.Unmarshal(out, &s); err != nil {
		return nil, fmt.Errorf("toolgate spec: %w", err)
	}
	o := &ownBundle{runc: runc, dir: filepath.Join(b.cache, name), cgParent: "toolgate-bench-" + strconv.Itoa(os.Getpid())}
	o.state = filepath.Join(o.dir, "state")
	_ = os.RemoveAll(o.dir)
	root := filepath.Join(o.dir, "rootfs")
	for _, d := range []string{"usr", "etc", "proc", "dev", "tmp", ".toolgate"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return nil, err
	}
	for _, m := range s.Mounts {
		if strings.HasPrefix(m.Destination, "/.toolgate/") {
			if err := os.WriteFile(filepath.Join(root, m.Destination), nil, 0o755); err != nil {
				return nil, err
			}
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if t, err := os.Readlink("/" + l); err == nil {
			_ = os.Symlink(t, filepath.Join(root, l))
		}
	}
	s.Root.Path = root
	s.Linux.CgroupsPath = o.cgParent + "/" + name
	data, err := json.Marshal(&s)
	if err != nil {
		return nil, err
	}
	return o, os.WriteFile(filepath.Join(o.dir, "config.json"), data, 0o600)
}

// runc runs runc with args on the bundle's state, with out as its stdout
// and stderr.
func (o *ownBundle) cmd(out *os.File, args ...string) *exec.Cmd {
	c := &exec.Cmd{Path: o.runc, Args: append([]string{o.runc, "--root", o.state}, args...), Env: rt.Env, Dir: o.dir}
	if out != nil {
		c.Stdout, c.Stderr = out, out
	}
	return c
}

func (o *ownBundle) close(name string) {
	_ = os.RemoveAll(o.dir)
	// runc leaves the parent of a relative cgroupsPath in every
	// hierarchy.
	_ = filepath.WalkDir("/sys/fs/cgroup", func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == o.cgParent {
			_ = os.Remove(filepath.Join(path, name))
			_ = os.Remove(path)
			return filepath.SkipDir
		}
		return nil
	})
}

// runcOwnBundlePath runs `runc run` of toolgate's own bundle by hand: what
// runc itself costs with toolgate's policy, without toolgate.
func (b *bench) runcOwnBundlePath(conf string) (*path, error) {
	p := &path{group: "floor", name: "runc run, toolgate's own bundle", note: "`toolgate spec --backend oci` of the same tool, run by hand: runc's cost of the full policy"}
	o, err := b.newOwnBundle(conf, "runc-own")
	if err != nil {
		return p, err
	}
	i := 0
	p.call = func() error {
		i++
		id := "toolgate-bench-own-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
		var out bytes.Buffer
		cmd := o.cmd(nil, "run", "--bundle", o.dir, id)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "hello") {
			_ = o.cmd(nil, "delete", "--force", id).Run()
			return fmt.Errorf("runc run: %w: %s", err, firstLine(out.String()))
		}
		return nil
	}
	p.close = func() { o.close("runc-own") }
	return p, nil
}

// runcStartPath runs `runc start` of a container of toolgate's own bundle
// that `runc create` made before the call, untimed, by hand: the least a
// prepared runc container costs a call (the pool's create and start,
// without the hold shim and toolgate). The call is the start and the wait
// for the container's output to end; with untilExit, also the wait for
// its init to have exited (its pidfd readable), which the hold shim's
// status waits for: the kernel's teardown of the container's namespaces
// comes between the two. The delete and the next create are untimed.
func (b *bench) runcStartPath(conf string, untilExit bool) (*path, error) {
	p := &path{group: "floor", name: runcStartRow, note: "`runc create` untimed before the call, then timed: `runc start` and the tool's output to its end"}
	name := "runc-start"
	if untilExit {
		p.name, name = runcStartExitRow, "runc-start-exit"
		p.note = "the same, and then the wait for the container's init to have exited (its pidfd readable), as the hold shim waits for it before it answers the status"
	}
	o, err := b.newOwnBundle(conf, name)
	if err != nil {
		return p, err
	}
	i := 0
	var id string
	var r *os.File
	pidfd := -1
	create := func() error {
		i++
		id = "toolgate-bench-start-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
		pr, pw, err := os.Pipe()
		if err != nil {
			return err
		}
		pidFile := filepath.Join(o.dir, "pid")
		err = o.cmd(pw, "create", "--bundle", o.dir, "--pid-file", pidFile, id).Run()
		pw.Close()
		if err != nil {
			pr.Close()
			return fmt.Errorf("runc create: %w", err)
		}
		r = pr
		if untilExit {
			pidfd, err = openInit(pidFile)
		}
		return err
	}
	exited := func() error {
		if pidfd < 0 {
			return nil
		}
		defer func() { _ = unix.Close(pidfd); pidfd = -1 }()
		return awaitExit(pidfd)
	}
	p.settle = func() {
		_ = o.cmd(nil, "delete", "--force", id).Run()
		if err := create(); err != nil {
			p.err = err
		}
	}
	if err := create(); err != nil {
		return p, err
	}
	p.call = func() error {
		if r == nil {
			return fmt.Errorf("no created container")
		}
		defer func() { r.Close(); r = nil }()
		if out, err := o.cmd(nil, "start", id).CombinedOutput(); err != nil {
			return fmt.Errorf("runc start: %w: %s", err, firstLine(string(out)))
		}
		out, err := io.ReadAll(r)
		if err != nil || !strings.Contains(string(out), "hello") {
			return fmt.Errorf("runc start: output %q: %w", out, err)
		}
		return exited()
	}
	p.close = func() {
		_ = o.cmd(nil, "delete", "--force", id).Run()
		if pidfd >= 0 {
			_ = unix.Close(pidfd)
		}
		o.close(name)
	}
	return p, nil
}

// openInit opens a pidfd of the created container's init, named by its
// pid file.
func openInit(pidFile string) (int, error) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return -1, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1, fmt.Errorf("runc create: pid file %q", b)
	}
	return unix.PidfdOpen(pid, 0)
}

// awaitExit waits until the process of pidfd has exited, 5 s at most.
func awaitExit(pidfd int) error {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, 5000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err == nil && fds[0].Revents == 0 {
			return errors.New("the container's init did not exit within 5 s")
		}
		return err
	}
}

// enterCgroups are the cgroups a by-hand bwrap call through the enter
// shim makes and enters.
type enterCgroups int

const (
	enterNoCgroup enterCgroups = iota
	// enterV2Group is the call's cgroup2 group alone, entered at clone
	// (CLONE_INTO_CGROUP), with the limits cgroup2 itself enforces: on a
	// hybrid host none (killed as one), the limits being v1's.
	enterV2Group
	// enterCallGroups are the backend's groups: the cgroup2 group and,
	// on a hybrid host, the v1 pids and memory groups the enter shim
	// joins.
	enterCallGroups
)

// enterPath runs the same bwrap argv the way the backend does, by hand:
// through the enter shim (the v1 cgroup joins, uid 65534, a new session
// keyring, no_new_privs), with the cgroups which says made per call and
// given back after the call, untimed (teardown), as the backend gives
// them back after the answer. It separates what the policy costs per
// call from what toolgate adds.
func (b *bench) enterPath(bwrapArgv []string, cg *cgroup.Manager, which enterCgroups) (*path, error) {
	lim := rt.DefaultSandboxLimits()
	limits := cgroup.Limits{Pids: lim.Pids, Memory: lim.Memory}
	m, prefix := cg, "bench-cg-"
	p := &path{group: "floor"}
	switch which {
	case enterNoCgroup:
		p.name, p.note = enterNoCgroupRow, "toolgate-shim enter (uid 65534, a new session keyring, no_new_privs), bwrap: what the extra exec costs"
		m = nil
	case enterV2Group:
		p.name = enterV2Row
		switch {
		case cg.V2 == "":
			return p, fmt.Errorf("no cgroup2 hierarchy usable here (%s)", cg)
		case len(cg.V1) == 0:
			return p, errors.New("cgroup2 only: the per-call cgroups row is the cgroup2 group alone")
		}
		m, prefix = &cgroup.Manager{V2: cg.V2, V2Controllers: cg.V2Controllers}, "bench-v2-"
		if !slices.Contains(cg.V2Controllers, "pids") {
			limits.Pids = 0
		}
		if !slices.Contains(cg.V2Controllers, "memory") {
			limits.Memory = 0
		}
		p.note = "the enter shim started in a cgroup2 group of its own (CLONE_INTO_CGROUP), " + cgroupLayout(m, limits) + ", made per call; no v1 groups"
	case enterCallGroups:
		p.name = enterFullRow
		p.note = "the backend's exec chain without toolgate: cgroup.Manager.NewGroup (" + cgroupLayout(cg, limits) + ") entered at clone and joined by toolgate-shim enter (uid 65534, a new session keyring), bwrap"
		p.side = &path{group: "floor", name: teardownRow, note: "after the call above, untimed in it: its cgroups killed and removed (cgroup.Group.Close) once bwrap has exited; toolgate does it after the call's answer, off its path"}
	}
	var drop *shim.IDs
	if os.Geteuid() == 0 {
		drop = &shim.IDs{UID: rt.SandboxUID, GID: rt.SandboxGID}
	}
	i := 0
	var g *cgroup.Group
	p.call = func() error {
		i++
		spec := shim.Spec{Mode: shim.Enter, Drop: drop, Path: bwrapArgv[0], Argv: bwrapArgv}
		var attr *syscall.SysProcAttr
		if m != nil {
			var err error
			if g, err = m.NewGroup(prefix+strconv.Itoa(i), limits); err != nil {
				return err
			}
			spec.Joins = g.Joins()
			if fd := g.FD(); fd >= 0 {
				attr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
			}
		}
		argv := append([]string{b.shim}, spec.Args()...)
		filter, err := seccompFile()
		if err != nil {
			return err
		}
		defer filter.Close()
		var out bytes.Buffer
		cmd := &exec.Cmd{Path: b.shim, Args: argv, Env: rt.Env, Dir: "/", Stdout: &out, Stderr: &out, ExtraFiles: []*os.File{filter}, SysProcAttr: attr}
		if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "hello") {
			return fmt.Errorf("enter shim: %w: %s", err, firstLine(out.String()))
		}
		return nil
	}
	if m != nil {
		p.teardown = func() error {
			err := g.Close()
			g = nil
			return err
		}
		p.close = func() { _ = g.Close() }
	}
	return p, nil
}

// cgroupPath times a call's cgroups alone, in this process: made with
// the backend's limits (cgroup.Manager.NewGroup), then removed (Close),
// with no process ever in them.
func (b *bench) cgroupPath(cg *cgroup.Manager) (*path, error) {
	lim := rt.DefaultSandboxLimits()
	limits := cgroup.Limits{Pids: lim.Pids, Memory: lim.Memory}
	p := &path{group: "floor", name: cgroupRow, note: "cgroup.Manager.NewGroup (" + cgroupLayout(cg, limits) + ") then Close, in the bench's own process: no process in them, no exec"}
	if cg.V2 == "" && len(cg.V1) == 0 {
		return p, fmt.Errorf("no usable cgroups here (%s)", cg)
	}
	i := 0
	p.call = func() error {
		i++
		g, err := cg.NewGroup("bench-alone-"+strconv.Itoa(i), limits)
		if err != nil {
			return err
		}
		return g.Close()
	}
	return p, nil
}

// cgroupLayout says which groups m makes per call with lim, as detected
// (runtime/cgroup), for the rows' notes.
func cgroupLayout(m *cgroup.Manager, lim cgroup.Limits) string {
	limit := func(ctl string) string {
		switch {
		case ctl == "pids" && lim.Pids > 0:
			return fmt.Sprintf("pids %d", lim.Pids)
		case ctl == "memory" && lim.Memory > 0:
			return fmt.Sprintf("memory %d MiB", lim.Memory>>20)
		}
		return ""
	}
	var parts []string
	if m.V2 != "" {
		var in []string
		for _, ctl := range []string{"pids", "memory"} {
			if l := limit(ctl); l != "" && slices.Contains(m.V2Controllers, ctl) {
				in = append(in, l)
			}
		}
		if len(in) == 0 {
			parts = append(parts, "a cgroup2 group, no controllers")
		} else {
			parts = append(parts, "a cgroup2 group, "+strings.Join(in, ", "))
		}
	}
	for _, ctl := range []string{"pids", "memory"} {
		if l := limit(ctl); l != "" && !slices.Contains(m.V2Controllers, ctl) && m.V1[ctl] != "" {
			parts = append(parts, "v1 "+l)
		}
	}
	if len(parts) == 0 {
		return "no cgroup"
	}
	return strings.Join(parts, "; ")
}

// gitHostPath runs, on the host, the git commands a git_diff_input call
// of HEAD~1..HEAD over the built-in workspace runs in its sandbox, with
// toolgate's exact argv (builtin.GitDiffArgv, which TestGitDiffArgv holds
// to what the call runs): the floor of that call.
func (b *bench) gitHostPath() (*path, error) {
	p := &path{
		group: "floor", name: gitHostRow,
		note: fmt.Sprintf("rev-parse, rev-parse, diff (%d changed files) exec'd one after another from Go (os/exec) with the argv builtin.GitDiffArgv gives, as root, the workspace as working directory; no sandbox", diffFiles),
	}
	ws, err := b.builtinWorkspace()
	if err != nil {
		return p, err
	}
	git, err := findGit()
	if err != nil {
		return p, err
	}
	ids := make([]string, 2)
	for i, rev := range []string{"HEAD~1", "HEAD"} {
		out, err := exec.Command(git, "-C", ws, "rev-parse", "--verify", rev).Output()
		if err != nil {
			return p, fmt.Errorf("git rev-parse %s: %w", rev, err)
		}
		ids[i] = strings.TrimSpace(string(out))
	}
	runs := builtin.GitDiffArgv(git, ws, "HEAD~1", "HEAD", ids[0], ids[1])
	p.call = func() error {
		for i, argv := range runs {
			var out, errOut bytes.Buffer
			cmd := &exec.Cmd{Path: argv[0], Args: argv, Env: rtEnv(), Dir: ws, Stdout: &out, Stderr: &errOut}
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("git run %d: %w: %s", i+1, err, firstLine(errOut.String()))
			}
			switch {
			case i < 2 && strings.TrimSpace(out.String()) != ids[i]:
				return fmt.Errorf("git rev-parse printed %q, want %s", firstLine(out.String()), ids[i])
			case i == 2 && strings.Count(out.String(), "\ndiff --git ")+1 != diffFiles:
				return fmt.Errorf("git diff: %d files, want %d", strings.Count(out.String(), "\ndiff --git ")+1, diffFiles)
			}
		}
		return nil
	}
	return p, nil
}

// findGit is the git a toolgate server of the bench finds: the first in
// the absolute entries of the default PATH, symlinks resolved.
func findGit() (string, error) {
	for _, dir := range filepath.SplitList(rt.DefaultPath) {
		p, err := filepath.EvalSymlinks(filepath.Join(dir, "git"))
		if err != nil {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("git not found in %s", rt.DefaultPath)
}
