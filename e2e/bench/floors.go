package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/toolgate/toolgate/bundle"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
)

// sandboxAttr runs a process as the sandbox uid when the bench is root, as
// the bwrap backend runs bwrap.
func sandboxAttr() *syscall.SysProcAttr {
	if os.Geteuid() != 0 {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: rt.SandboxUID, Gid: rt.SandboxGID, Groups: []uint32{}}}
}

// bwrapArgv is the exact argv the bwrap backend builds for the probe tool
// (bwrap.Args of the default policy): the init shim bound inside and run
// first, the seccomp program read from bwrap.SeccompFD (seccompFile).
func (b *bench) bwrapArgv() ([]string, error) {
	bin, err := bwrap.Find()
	if err != nil {
		return nil, err
	}
	h, err := bundle.DetectHost(os.Lstat, os.Stat, os.Readlink)
	if err != nil {
		return nil, err
	}
	pol := rt.DefaultSandboxLimits().Policy(h, b.shim)
	p := bwrap.Plan{Exe: b.probe, ExeResolved: b.probe, Argv: b.toolArgv(), Dir: b.work}
	return append([]string{bin}, bwrap.Args(pol, p)...), nil
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
		Process: &specs.Process{Args: b.toolArgv(), Cwd: b.work, Env: rt.Env, NoNewPrivileges: true,
			User: specs.User{UID: rt.SandboxUID, GID: rt.SandboxGID}},
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

// runcOwnBundlePath runs `runc run` of the bundle toolgate generates for the
// test tool (`toolgate spec --backend oci`: seccomp, pids and memory
// cgroup, rlimits, masked paths, the init shim), on a skeleton rootfs laid
// out as the oci backend lays out its own: what runc itself costs with
// toolgate's policy, without toolgate.
func (b *bench) runcOwnBundlePath(conf string) (*path, error) {
	p := &path{group: "floor", name: "runc run, toolgate's own bundle", note: "`toolgate spec --backend oci` of the same tool, run by hand: runc's cost of the full policy"}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return p, err
	}
	out, err := exec.Command(b.toolgate, "spec", "--conf", conf, "--backend", "oci", "ts").Output()
	if err != nil {
		return p, fmt.Errorf("toolgate spec: %w", err)
	}
	var s specs.Spec
	if err := json.Unmarshal(out, &s); err != nil {
		return p, fmt.Errorf("toolgate spec: %w", err)
	}
	dir := filepath.Join(b.cache, "runc-own")
	_ = os.RemoveAll(dir)
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"usr", "etc", "proc", "dev", "tmp", ".toolgate"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return p, err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return p, err
	}
	for _, m := range s.Mounts {
		if strings.HasPrefix(m.Destination, "/.toolgate/") {
			if err := os.WriteFile(filepath.Join(root, m.Destination), nil, 0o755); err != nil {
				return p, err
			}
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if t, err := os.Readlink("/" + l); err == nil {
			_ = os.Symlink(t, filepath.Join(root, l))
		}
	}
	s.Root.Path = root
	cgParent := "toolgate-bench-" + strconv.Itoa(os.Getpid())
	s.Linux.CgroupsPath = cgParent + "/own"
	data, err := json.Marshal(&s)
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
		id := "toolgate-bench-own-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
		var out bytes.Buffer
		cmd := &exec.Cmd{Path: runc, Args: []string{runc, "--root", state, "run", "--bundle", dir, id}, Env: rt.Env, Dir: dir, Stdout: &out, Stderr: &out}
		if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "hello") {
			_ = exec.Command(runc, "--root", state, "delete", "--force", id).Run()
			return fmt.Errorf("runc run: %w: %s", err, firstLine(out.String()))
		}
		return nil
	}
	p.close = func() {
		_ = os.RemoveAll(dir)
		// runc leaves the parent of a relative cgroupsPath in every
		// hierarchy.
		_ = filepath.WalkDir("/sys/fs/cgroup", func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == cgParent {
				_ = os.Remove(filepath.Join(path, "own"))
				_ = os.Remove(path)
				return filepath.SkipDir
			}
			return nil
		})
	}
	return p, nil
}

// enterPath runs the same bwrap argv the way the backend does, by hand:
// through the enter shim (join of the call's v1 pids and memory cgroups,
// rlimits, uid 65534, no_new_privs), with a fresh cgroup per call. It
// separates what the policy costs per call from what toolgate adds.
func (b *bench) enterPath(bwrapArgv []string, withGroup bool) (*path, error) {
	p := &path{group: "floor", name: "bwrap through the enter shim, per-call cgroups (by hand)",
		note: "the backend's exec chain without toolgate: rt.Cgroups.NewGroup (v1 pids 256, memory 512 MiB) joined by toolgate-shim enter (rlimits, uid 65534), bwrap"}
	if !withGroup {
		p.name = "bwrap through the enter shim, no cgroup (by hand)"
		p.note = "toolgate-shim enter (rlimits, uid 65534, no_new_privs), bwrap: what the extra exec costs"
	}
	cg := rt.SetupCgroups()
	lim := rt.DefaultSandboxLimits()
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		uid, gid = rt.SandboxUID, rt.SandboxGID
	}
	i := 0
	p.call = func() error {
		i++
		spec := rt.ShimSpec{Mode: rt.ShimEnter, UID: uid, GID: gid, Path: bwrapArgv[0], Argv: bwrapArgv}
		if withGroup {
			g, err := cg.NewGroup("bench-"+strconv.Itoa(i), rt.Limits{Pids: lim.Pids, Memory: lim.Memory})
			if err != nil {
				return err
			}
			defer g.Close()
			spec.Joins = g.Joins()
		}
		argv := append([]string{b.shim}, spec.Args()...)
		filter, err := seccompFile()
		if err != nil {
			return err
		}
		defer filter.Close()
		var out bytes.Buffer
		cmd := &exec.Cmd{Path: b.shim, Args: argv, Env: rt.Env, Dir: "/", Stdout: &out, Stderr: &out, ExtraFiles: []*os.File{filter}}
		if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "hello") {
			return fmt.Errorf("enter shim: %w: %s", err, firstLine(out.String()))
		}
		return nil
	}
	p.close = cg.Close
	return p, nil
}
