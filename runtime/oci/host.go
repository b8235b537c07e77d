package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/bundle"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/shim"
)

// prepare lays out the server directory once: RunDir/<pid> (0700) with the
// skeleton rootfs, the runtime state dir and the bundles dir; it first
// sweeps what dead servers left.
func (r *Runner) prepare() error {
	if err := os.MkdirAll(r.cfg.RunDir, 0o700); err != nil {
		return fmt.Errorf("oci: run dir: %w", err)
	}
	swept, err := r.Sweep()
	if err != nil {
		return err
	}
	r.swept = swept
	if err := os.Mkdir(r.dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("oci: server dir: %w", err)
	}
	for _, d := range []string{r.state, r.bundles} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("oci: %w", err)
		}
	}
	if err := makeSkeleton(r.rootfs, r.policy.Host); err != nil {
		return err
	}
	if r.mask != "" {
		if err := os.WriteFile(r.mask, nil, 0o444); err != nil {
			return fmt.Errorf("oci: crun cgroup mask: %w", err)
		}
	}
	return nil
}

// makeSkeleton creates the empty rootfs every container starts from: the
// mount points usr etc proc dev tmp (tmp mode 1777: runc gives a tmpfs
// mount point the mode of the directory below it), .toolgate for the shim,
// and the policy's usr-merge names: symlinks into usr where the host has
// them so, directories (to be bound) where it is not usr-merged.
func makeSkeleton(root string, h bundle.Host) error {
	if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("oci: skeleton rootfs: %w", err)
	}
	for _, d := range []string{"usr", "etc", "proc", "dev", "tmp", ".toolgate"} {
		p := filepath.Join(root, d)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("oci: skeleton rootfs: %w", err)
		}
	}
	if err := unix.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return fmt.Errorf("oci: skeleton rootfs: %w", err)
	}
	shim := filepath.Join(root, bundle.ShimPath)
	if err := os.WriteFile(shim, nil, 0o755); err != nil {
		return fmt.Errorf("oci: skeleton rootfs: %w", err)
	}
	for _, n := range h.UsrLinks {
		if err := os.Symlink("usr/"+n, filepath.Join(root, n)); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("oci: skeleton rootfs: %w", err)
		}
	}
	for _, d := range h.RootDirs {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("oci: skeleton rootfs: %w", err)
		}
	}
	return nil
}

// Sweep removes what servers that died without cleaning up left in RunDir:
// for every RunDir/<pid> whose process is gone, it kills and deletes every
// container in its state directories (with the runtime that made them,
// when installed) and removes the directory. It returns what it removed.
func (r *Runner) Sweep() ([]string, error) {
	entries, err := os.ReadDir(r.cfg.RunDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("oci: sweep: %w", err)
	}
	var removed []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() || pid == os.Getpid() || alive(pid) {
			continue
		}
		dir := filepath.Join(r.cfg.RunDir, e.Name())
		states, _ := filepath.Glob(filepath.Join(dir, "state-*"))
		for _, st := range states {
			name := Name(strings.TrimPrefix(filepath.Base(st), "state-"))
			if name == r.cfg.Runtime {
				r.sweepState(st)
				continue
			}
			if other, err := r.sibling(name); err == nil {
				other.sweepState(st)
			}
		}
		removeCgroupParents(pid)
		if err := os.RemoveAll(dir); err != nil {
			return removed, fmt.Errorf("oci: sweep %s: %w", dir, err)
		}
		removed = append(removed, dir)
	}
	return removed, nil
}

// sibling is a runner for another runtime, used to sweep its state.
func (r *Runner) sibling(name Name) (*Runner, error) {
	fl, ok := flavours[name]
	if !ok {
		return nil, fmt.Errorf("unknown runtime %q", name)
	}
	bin, err := findBinary(string(name))
	if err != nil {
		return nil, err
	}
	p := *r.plan
	p.cfg.Runtime, p.fl, p.bin = name, fl, bin
	if name == Crun && cgroup.ReadHost().Roots().HybridControllers {
		p.mask = filepath.Join(r.dir, "empty-cgroup.controllers")
		_ = os.WriteFile(p.mask, nil, 0o444)
	}
	return &Runner{plan: &p}, nil
}

// sweepState kills and deletes every container listed in state dir st.
func (r *Runner) sweepState(st string) {
	if _, err := os.Stat(st); err != nil {
		return
	}
	res, err := r.op(r.fl.listArgv(r.bin, st))
	if err != nil {
		return
	}
	for id := range strings.FieldsSeq(string(res.Output)) {
		if !strings.HasPrefix(id, IDPrefix) {
			continue
		}
		_, _ = r.op(r.fl.killArgv(r.bin, st, id))
		_, _ = r.op(r.fl.deleteArgv(r.bin, st, id))
	}
}

// removeCgroupParents removes the empty toolgate-<pid> directories that the
// runtimes create (as parents of the relative cgroupsPath) in every cgroup
// hierarchy, including those no limit uses (cpu, blkio, ...). A directory
// that still holds a container is left alone: rmdir fails on it.
func removeCgroupParents(pid int) {
	name := cgroupParent(pid)
	for _, pat := range []string{"/sys/fs/cgroup/%s", "/sys/fs/cgroup/*/%s", "/sys/fs/cgroup/*/*/%s", "/sys/fs/cgroup/*/*/*/%s"} {
		dirs, _ := filepath.Glob(fmt.Sprintf(pat, name))
		for _, d := range dirs {
			kids, _ := os.ReadDir(d)
			for _, k := range kids {
				if k.IsDir() && strings.HasPrefix(k.Name(), IDPrefix) {
					_ = unix.Rmdir(filepath.Join(d, k.Name()))
				}
			}
			_ = unix.Rmdir(d)
		}
	}
}

// cgroupParent is the parent of the containers' relative cgroupsPath: a
// directory of its own, never the server's cgroup directory (cgroup.Manager,
// cgroup.Prefix + pid), which the direct and bwrap backends keep using when
// this backend is closed (doctor and selftest set up every backend).
// cgroup.Manager.Sweep removes it after a crash too.
func cgroupParent(pid int) string {
	return cgroup.Prefix + strconv.Itoa(pid) + cgroup.OCISuffix
}

func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// probe runs one trivial container and returns why the runtime cannot run
// here when it fails.
func (r *Runner) probe(ctx context.Context) error {
	exe := r.cfg.Probe
	if exe == "-" {
		return nil
	}
	if exe == "" {
		exe = "/usr/bin/true"
	}
	if _, err := os.Stat(exe); err != nil {
		r.notes = append(r.notes, fmt.Sprintf("start-up probe skipped: %v", err))
		return nil
	}
	dir, err := rt.SelfTestDir()
	if err != nil {
		return fmt.Errorf("oci runtime %s: probe: %w", r.cfg.Runtime, err)
	}
	defer os.Remove(dir)
	inv := rt.Invocation{
		ID:       "probe",
		Template: rt.Template{Name: "probe", Path: exe, Argv: []string{exe}, Dir: dir},
		Call:     rt.Call{Timeout: 30 * time.Second, MaxBytes: 8 << 10},
	}
	res, err := r.Run(ctx, inv)
	if err != nil {
		return fmt.Errorf("oci runtime %s cannot run a container here: %w", r.cfg.Runtime, err)
	}
	if res.ExitCode != 0 || res.TimedOut {
		return fmt.Errorf("oci runtime %s cannot run a container here: probe %s exited %d: %s", r.cfg.Runtime, exe, res.ExitCode, firstLine(res.Output))
	}
	return nil
}

// masked returns c run through the mask shim (shim.Mask): in a private
// mount namespace in which the unified hierarchy's cgroup.controllers
// reads empty, the workaround that lets crun 1.8 start on a hybrid-cgroup
// host. The shim makes the namespace and execs c's program in it, so that
// no thread of the server ever changes its own namespace (a thread that
// did could not be given back; ending it would send the parent-death
// signal to every process it had started, prepared sandboxes included).
func masked(shimPath, mask string, c rt.Cmd) rt.Cmd {
	spec := shim.Spec{Mode: shim.Mask, Mask: mask + "=" + cgroup.UnifiedControllers, Path: c.Path, Argv: c.Args}
	c.Path = shimPath
	c.Args = append([]string{shimPath}, spec.Args()...)
	return c
}
