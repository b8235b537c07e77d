// Package bwrap is the default sandbox backend: each call runs under
// bubblewrap with no network, the tool's dir read-only, nothing of the host
// but /usr and an /etc allow-list, a private /tmp, no capabilities, no new
// privileges, and exactly the four environment variables.
//
// SANDBOX.md records why each measure is needed. The ones outside bwrap's
// argv are here: bwrap is exec'd with the scrubbed environment (its own
// process would otherwise carry the server's into the sandbox), as an
// unprivileged uid when toolgate runs as root (a root-mapped sandbox reads
// root-only files through binds and is exempt from RLIMIT_NPROC), with
// lowered rlimits, and inside the call's cgroup, which bounds its processes
// and memory. The enter shim (rt.ShimEnter) does the last three steps and
// execs bwrap.
package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	rt "github.com/toolgate/toolgate/runtime"
)

// Config configures the bwrap backend.
type Config struct {
	// Bwrap is the bubblewrap binary; empty means look it up once in the
	// system directories (never a relative PATH entry).
	Bwrap string
	// Shim is the toolgate-shim binary: the enter shim outside the sandbox
	// and, bound read-only at ShimPath, the init shim inside it.
	Shim string
	// Cgroups is the host's cgroup support.
	Cgroups *rt.Cgroups
	// Limits are the per-call limits.
	Limits rt.SandboxLimits
}

// Runner is the bwrap backend.
type Runner struct {
	bwrap  string
	shim   string
	cg     *rt.Cgroups
	limits rt.SandboxLimits
	host   Host
	// uid and gid are the host ids bwrap runs as, or -1 to keep the
	// server's (when it is not root).
	uid, gid int
}

// systemDirs are where bwrap is looked up: fixed, absolute.
var systemDirs = []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin"}

// Find returns the absolute path of bubblewrap in the system directories.
func Find() (string, error) {
	for _, d := range systemDirs {
		p := d + "/bwrap"
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("bubblewrap (bwrap) not found in " + strings.Join(systemDirs, ", ") + ": install it (Debian: apt-get install bubblewrap)")
}

// New sets up the backend and proves it works here by running one trivial
// sandbox with the full policy. An error says exactly why bwrap cannot run;
// the caller reports it and test-class tools answer isError (they never run
// unsandboxed).
func New(cfg Config) (*Runner, error) {
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	r := &Runner{bwrap: cfg.Bwrap, shim: cfg.Shim, cg: cfg.Cgroups, limits: cfg.Limits, uid: -1, gid: -1}
	if r.bwrap == "" {
		p, err := Find()
		if err != nil {
			return nil, err
		}
		r.bwrap = p
	}
	if os.Geteuid() == 0 {
		r.uid, r.gid = rt.SandboxUID, rt.SandboxGID
	}
	if r.limits.Pids > 0 && !r.cg.Has("pids") {
		return nil, fmt.Errorf("no usable pids cgroup controller for the per-call process limit (%s); run toolgate where one is delegated to it, or set --sandbox-pids 0 to rely on RLIMIT_NPROC alone", r.cg)
	}
	if r.limits.Memory > 0 && !r.cg.Has("memory") {
		return nil, fmt.Errorf("no usable memory cgroup controller for the per-call memory limit (%s); run toolgate where one is delegated to it, or set --sandbox-memory 0 to run without a memory limit", r.cg)
	}
	if err := rt.CanExecute(r.shim, r.uid, r.gid); err != nil {
		return nil, fmt.Errorf("%s runs inside every sandbox: %w", rt.ShimName, err)
	}
	r.host = DetectHost(lstat, os.Readlink)
	if err := r.selfTest(); err != nil {
		return nil, err
	}
	return r, nil
}

func lstat(p string) (isLink, isDir bool, err error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return false, false, err
	}
	return fi.Mode()&os.ModeSymlink != 0, fi.IsDir(), nil
}

// Path returns the bwrap binary in use.
func (r *Runner) Path() string { return r.bwrap }

// UID returns the host uid sandboxes run as (-1: the server's own).
func (r *Runner) UID() (int, int) { return r.uid, r.gid }

// Check reports whether a tool with this canonical dir and exe can be
// sandboxed: see rt.CheckSandboxTool.
func (r *Runner) Check(dir, exe string) error {
	return rt.CheckSandboxTool(dir, exe, r.uid, r.gid)
}

// selfTest runs /usr/bin/true (or /bin/true) in a sandbox with the full
// policy and reports bwrap's own message when it fails.
func (r *Runner) selfTest() error {
	exe := "/usr/bin/true"
	if _, err := os.Stat(exe); err != nil {
		exe = "/bin/true"
	}
	dir, err := os.MkdirTemp("", "toolgate-selftest-")
	if err != nil {
		return fmt.Errorf("bwrap self-test: %w", err)
	}
	defer os.Remove(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("bwrap self-test: %w", err)
	}
	res, err := r.Run(context.Background(), rt.Invocation{
		ID: "selftest", Name: "selftest", Path: exe, Argv: []string{exe}, Dir: dir,
		Timeout: 10 * time.Second, MaxBytes: 4096,
	})
	if err != nil {
		return fmt.Errorf("bwrap self-test: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("bwrap cannot create the sandbox here (exit %d): %s%s", res.ExitCode,
			strings.TrimSpace(string(res.Output)), Hint(string(res.Output)))
	}
	return nil
}

// Hint turns a bwrap failure message into the fix an operator needs.
func Hint(msg string) string {
	switch {
	case strings.Contains(msg, "No permissions to create new namespace") || strings.Contains(msg, "setting up uid map"):
		return "; unprivileged user namespaces are disabled: set sysctl kernel.unprivileged_userns_clone=1 (Debian) and user.max_user_namespaces > 0; inside a container run it with user namespaces available (podman: --security-opt seccomp=unconfined, or as root in the container --cap-add SYS_ADMIN)"
	case strings.Contains(msg, "Can't mount proc"):
		return "; /proc cannot be mounted: inside a container the host masks /proc paths (podman: --security-opt systempaths=unconfined)"
	case strings.Contains(msg, "loopback") || strings.Contains(msg, "RTM_NEWADDR"):
		return "; the loopback interface of the new network namespace cannot be configured: inside a container add --cap-add NET_ADMIN"
	case strings.Contains(msg, "Operation not permitted"):
		return "; the kernel refused a namespace operation: inside a container see the README's list of podman flags"
	}
	return ""
}

// Run runs inv in a fresh sandbox.
func (r *Runner) Run(ctx context.Context, inv rt.Invocation) (rt.Result, error) {
	var group *rt.Group
	if r.cg != nil && (r.cg.V2 != "" || r.limits.Pids > 0 || r.limits.Memory > 0) {
		g, err := r.cg.NewGroup(inv.ID, rt.Limits{Pids: r.limits.Pids, Memory: r.limits.Memory})
		if err != nil {
			return rt.Result{}, fmt.Errorf("sandbox cgroup: %w", err)
		}
		defer g.Close()
		group = g
	}
	plan := Plan{Shim: r.shim, Exe: inv.Argv[0], ExeResolved: inv.Path, Argv: inv.Argv, Dir: inv.Dir, TmpSize: r.limits.TmpSize}
	shim := rt.ShimSpec{
		Mode:    rt.ShimEnter,
		Joins:   group.Joins(),
		Rlimits: r.limits.Rlimits(),
		UID:     r.uid,
		GID:     r.gid,
		Path:    r.bwrap,
		Argv:    append([]string{r.bwrap}, Args(r.host, plan)...),
	}
	return rt.Exec(ctx, rt.Cmd{
		Path:     r.shim,
		Args:     append([]string{r.shim}, shim.Args()...),
		Env:      rt.Env,
		Dir:      "/",
		Timeout:  inv.Timeout,
		MaxBytes: inv.MaxBytes,
		Seen:     inv.Seen,
		Group:    group,
	})
}

// Version returns `bwrap --version`, for doctor.
func (r *Runner) Version() string {
	out, err := exec.Command(r.bwrap, "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
