// Package bwrap is the default sandbox backend: each call runs under
// bubblewrap with no network, the tool's dir read-only, nothing of the host
// but /usr and an /etc allow-list, a private /tmp, no capabilities, no new
// privileges, and exactly the four environment variables.
//
// SANDBOX.md records why each measure is needed. The ones outside bwrap's
// argv are here: bwrap is exec'd with the scrubbed environment (its own
// process would otherwise carry the server's into the sandbox), as the
// sandbox's own host ids when toolgate runs as root (a root-mapped sandbox
// reads root-only files through binds and is exempt from RLIMIT_NPROC),
// inside the call's cgroup, which bounds its processes and memory, and
// with a new session keyring of its own (keyrings are not namespaced, and
// bwrap makes none). The enter shim (shim.Enter) joins the v1 cgroups,
// drops the ids and joins the keyring, then execs bwrap; the init shim
// inside (or the service or standby shim) lowers the rlimits and execs
// the tool.
package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/internal/telemetry"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/shim"
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
	Cgroups *cgroup.Manager
	// Limits are the per-call limits.
	Limits rt.SandboxLimits
}

// Runner is the bwrap backend.
type Runner struct {
	bwrap  string
	shim   string
	cg     *cgroup.Manager
	limits rt.SandboxLimits
	// policy is the sandbox of every call, rendered by Args.
	policy bundle.Policy
	// ids hands out each sandbox's host ids (nil: the server's own, when
	// it is not root); rng is their range, for the access checks.
	ids *rt.IDs
	rng rt.IDRange
	// seccomp is the compiled filter of every sandbox: the OCI backend's
	// profile (bundle.DefaultSeccompBPF).
	seccomp []byte
	// prepared numbers the prepared sandboxes, for their cgroups' names.
	prepared atomic.Uint64
	// bg are the teardowns of finished calls' sandboxes (teardown).
	bg sync.WaitGroup
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
// sandbox with the full policy (bounded by ctx): Prepare, then SelfTest. An
// error says exactly why bwrap cannot run; the caller reports it and
// test-class tools answer isError (they never run unsandboxed).
func New(ctx context.Context, cfg Config) (*Runner, error) {
	r, err := Prepare(cfg)
	if err != nil {
		return nil, err
	}
	if err := r.SelfTest(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Prepare checks what can be known without starting a process (bwrap and
// the shim are there and usable by the sandbox uid, the cgroup controllers
// the limits need exist) and returns the backend, not yet proven to work:
// SelfTest does that.
func Prepare(cfg Config) (*Runner, error) {
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	r := &Runner{bwrap: cfg.Bwrap, shim: cfg.Shim, cg: cfg.Cgroups, limits: cfg.Limits}
	if r.bwrap == "" {
		p, err := Find()
		if err != nil {
			return nil, err
		}
		r.bwrap = p
	}
	ids, err := rt.NewIDs(cfg.Limits.IDs)
	if err != nil {
		return nil, err
	}
	r.ids, r.rng = ids, ids.Range()
	if r.limits.Pids > 0 && !r.cg.Has("pids") {
		return nil, fmt.Errorf("no usable pids cgroup controller for the per-call process limit (%s); run toolgate where one is delegated to it, or set --sandbox-pids 0 to rely on RLIMIT_NPROC alone", r.cg)
	}
	if r.limits.Memory > 0 && !r.cg.Has("memory") {
		return nil, fmt.Errorf("no usable memory cgroup controller for the per-call memory limit (%s); run toolgate where one is delegated to it, or set --sandbox-memory 0 to run without a memory limit", r.cg)
	}
	if err := rt.CanExecute(r.shim, r.rng); err != nil {
		return nil, fmt.Errorf("%s runs inside every sandbox: %w", rt.ShimName, err)
	}
	// The same filter as the OCI backend's, never none: a build without
	// seccomp support cannot run the bwrap backend either.
	prog, err := bundle.DefaultSeccompBPF()
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	r.seccomp = prog
	host, err := bundle.DetectHost(os.Lstat, os.Stat, os.Readlink)
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	r.policy = r.limits.Policy(host, r.shim)
	return r, nil
}

// Check reports whether a tool with this canonical dir and exe can be
// sandboxed: see rt.CheckSandboxTool.
func (r *Runner) Check(dir, exe string) error {
	return rt.CheckSandboxTool(dir, exe, r.rng)
}

// SelfTest runs /usr/bin/true (or /bin/true) in a sandbox with the full
// policy and reports bwrap's own message when it fails.
func (r *Runner) SelfTest(ctx context.Context) error {
	exe := "/usr/bin/true"
	if _, err := os.Stat(exe); err != nil {
		exe = "/bin/true"
	}
	dir, err := rt.SelfTestDir()
	if err != nil {
		return fmt.Errorf("bwrap self-test: %w", err)
	}
	defer os.Remove(dir)
	res, err := r.Run(ctx, rt.Invocation{
		ID:       "selftest",
		Template: rt.Template{Name: "selftest", Path: exe, Argv: []string{exe}, Dir: dir},
		Call:     rt.Call{Timeout: 10 * time.Second, MaxBytes: 4096},
	})
	if err != nil {
		return fmt.Errorf("bwrap self-test: %w", err)
	}
	if res.Limit == rt.LimitCancelled {
		return errors.New("bwrap self-test: cancelled (the server is stopping)")
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("bwrap cannot create the sandbox here (exit %d): %s%s", res.ExitCode,
			strings.TrimSpace(string(res.Output)), Hint(string(res.Output)))
	}
	return nil
}

// Hint turns a bwrap (or enter shim) failure message into the fix an
// operator needs. The container cases were found by experiment with podman
// 4.3 (docs/deploy.md, "Running the image"): podman's default seccomp profile allows
// sethostname only with CAP_SYS_ADMIN, and its masked /proc paths make the
// kernel refuse a new proc mount; images/seccomp.json and
// --security-opt systempaths=unconfined are the fixes that add no
// capability.
func Hint(msg string) string {
	switch {
	case strings.Contains(msg, "No permissions to create new namespace") || strings.Contains(msg, "setting up uid map"):
		return "; user namespaces cannot be created: on a host set sysctl kernel.unprivileged_userns_clone=1 (Debian) and user.max_user_namespaces > 0; in a container whose seccomp profile refuses new user namespaces, run it with podman --security-opt seccomp=images/seccomp.json (podman's default profile, which allows them, plus sethostname)"
	case strings.Contains(msg, "max_*_namespaces exceeded") || strings.Contains(msg, "ENOSPC"):
		return "; the user namespace limit is reached: raise sysctl user.max_user_namespaces on the host (a container shares it)"
	case strings.Contains(msg, "Can't set hostname"):
		return "; sethostname is refused: inside a container the seccomp profile allows it only with CAP_SYS_ADMIN (podman's default): run it with podman --security-opt seccomp=images/seccomp.json (podman's default profile plus sethostname), never --privileged"
	case strings.Contains(msg, "Can't mount proc"):
		return "; /proc cannot be mounted: inside a container the kernel refuses a new proc while /proc paths are masked: run it with podman --security-opt systempaths=unconfined"
	case strings.Contains(msg, "Unexpected capabilities but not setuid"):
		return "; bwrap refuses to run as a non-root user that holds capabilities: inside a container drop the --cap-add (as its default non-root user the image needs none)"
	case strings.Contains(msg, "sandbox: setgroups") || strings.Contains(msg, "sandbox: setresgid") || strings.Contains(msg, "sandbox: setresuid"):
		return "; as root, toolgate starts each sandbox as host ids of its own (--sandbox-id-range, or --sandbox-uid), which needs CAP_SETUID and CAP_SETGID: inside a container keep them (no --cap-drop ALL), or run the container as its default non-root user"
	case strings.Contains(msg, "sandbox: set rlimit"):
		return "; an rlimit cannot be raised above the hard limit toolgate got: lower the matching --sandbox-nofile/--sandbox-nproc/--sandbox-core/--sandbox-fsize, or raise the hard limit (podman --ulimit)"
	case strings.Contains(msg, "sandbox: new session keyring"):
		return "; every sandbox gets a session keyring of its own (keyctl KEYCTL_JOIN_SESSION_KEYRING, before bwrap): inside a container whose seccomp profile refuses keyctl, run it with podman --security-opt seccomp=images/seccomp.json (podman's default profile, which allows keyctl, plus sethostname); when the key quota is used up, raise sysctl kernel.keys.maxkeys and kernel.keys.maxbytes"
	case strings.Contains(msg, "sandbox: join cgroup"):
		return "; the call's cgroup cannot be joined: inside a container the cgroup hierarchies are read-only: run with --sandbox-pids 0 --sandbox-memory 0 and bound the container instead (podman --pids-limit, --memory)"
	case strings.Contains(msg, "loopback") || strings.Contains(msg, "RTM_NEWADDR"):
		return "; the loopback interface of the new network namespace cannot be configured: inside a container run toolgate as a non-root user (bwrap then configures it in its own user namespace), or as root add --cap-add NET_ADMIN"
	case strings.Contains(msg, "Operation not permitted"):
		return "; the kernel refused a namespace operation: inside a container see the README's \"Running the image\" for the podman flags"
	}
	return ""
}

// Run runs inv in a fresh sandbox.
func (r *Runner) Run(ctx context.Context, inv rt.Invocation) (rt.Result, error) {
	if inv.Session {
		return rt.Result{}, fmt.Errorf("bwrap: %s: a helper session's template runs through OpenSession", inv.Name)
	}
	plan := Plan{Template: inv.Template}
	// The sandbox made on the call's path: what toolgate does before bwrap
	// starts (ids, the egress proxy, the filter, the cgroup); bwrap's own
	// setup is in the process run's span.
	_, span := telemetry.Start(ctx, "sandbox make", trace.WithAttributes(attribute.String("toolgate.backend", "bwrap")))
	defer span.End() // at once when a step fails; else ended before the run
	// The cgroup and the host ids are given back after the call's answer,
	// off its path: the cgroup's directories empty some milliseconds after
	// bwrap's exit, as the pid namespace's last processes go, and the ids
	// are never handed out again before that.
	var held []func()
	defer func() { r.teardown(held) }()
	id, err := r.ids.Acquire()
	if err != nil {
		return rt.Result{}, err
	}
	held = append(held, id.Release)
	eg, err := inv.StartEgress(r.policy, id.UID, id.GID)
	if err != nil {
		return rt.Result{}, err
	}
	defer eg.Close() // nothing of the call's network outlives it
	if eg != nil {
		plan.EgressDir, plan.Trust = eg.Dir, eg.Trust
		if eg.Trust {
			plan.Env = append(slices.Clip(plan.Env), bundle.TrustEnv...)
		}
	}
	filter, err := r.seccompFile()
	if err != nil {
		return rt.Result{}, err
	}
	defer filter.Close()
	group, start, err := r.enter(inv.ID, plan, id)
	if err != nil {
		return rt.Result{}, err
	}
	held = append(held, func() { _ = group.Close() })
	span.End()
	res, err := rt.Exec(ctx, rt.Cmd{
		Proc: rt.Proc{Path: start.path, Args: start.argv, ExtraFiles: []*os.File{filter}, Env: rt.Env, Dir: "/", Group: group},
		Call: inv.Call,
	})
	res.Egress = eg.Use()
	return res, err
}

// teardown gives back what a finished call's sandbox held (held, in
// reverse order), off the call's path; Close waits for every teardown.
func (r *Runner) teardown(held []func()) {
	r.bg.Go(func() {
		for _, give := range slices.Backward(held) {
			give()
		}
	})
}

// Close waits until every finished call's sandbox has given back what it
// held on the host.
func (r *Runner) Close() error {
	r.bg.Wait()
	return nil
}

// Prepare starts a sandbox for t ahead of its call (rt.Preparer): the
// sandbox Run would make, with the same policy, cgroup and exec chain
// (Args of the same plan, Standby set), held at its last step by the
// standby shim until the call releases it. It returns once the process is
// started; the setup (namespaces, mounts, the cgroup join) goes on in the
// background until the shim says it is ready.
func (r *Runner) Prepare(t rt.Template) (*rt.Standby, error) {
	if len(t.Argv) == 0 {
		return nil, errors.New("bwrap: prepare: empty argv")
	}
	plan := Plan{Template: t, Standby: true}
	if t.Trusted {
		// The trust files the call's egress directory would hold, and
		// the variables that point at them.
		d, err := rt.TrustDir()
		if err != nil {
			return nil, err
		}
		plan.EgressDir, plan.Trust = d, true
		plan.Env = append(slices.Clip(plan.Env), bundle.TrustEnv...)
	}
	return r.prepare(plan, rt.Env, fixedPaths(t.Dir, t.Path))
}

// AttachEgress starts the egress proxy of inv for a sandbox prepared for
// its proxied template, with host ids id (rt.EgressAttacher): the socket
// the release hands over.
func (r *Runner) AttachEgress(inv rt.Invocation, id rt.SandboxID) (*rt.Egress, error) {
	return inv.StartEgress(r.policy, id.UID, id.GID)
}

// OpenSession opens a helper session for t (rt.OpenSession) in a sandbox
// of its own, prepared on the caller's path: the sandbox a call of a tool
// gets, whose session shim runs the commands toolgate sends it.
func (r *Runner) OpenSession(ctx context.Context, t rt.Template) (rt.Session, error) {
	return rt.OpenPrepared(ctx, r, t)
}

// prepare starts plan (a Standby plan) with env as bwrap's environment.
func (r *Runner) prepare(plan Plan, env, fixed []string) (*rt.Standby, error) {
	filter, err := r.seccompFile()
	if err != nil {
		return nil, err
	}
	defer filter.Close()
	extra := []*os.File{filter}
	if rt.ReleaseFD(len(extra)) != ReleaseFD {
		return nil, fmt.Errorf("bwrap: the release channel would be descriptor %d, the argv says %d", rt.ReleaseFD(len(extra)), ReleaseFD)
	}
	// A prepared sandbox holds its ids from now on: the Standby gives
	// them back once it is done with.
	id, err := r.ids.Acquire()
	if err != nil {
		return nil, err
	}
	group, st, err := r.enter("pool-"+strconv.FormatUint(r.prepared.Add(1), 10), plan, id)
	if err != nil {
		id.Release()
		return nil, err
	}
	sb, err := rt.StartStandby(rt.StandbyCmd{
		Proc:    rt.Proc{Path: st.path, Args: st.argv, ExtraFiles: extra, Env: env, Dir: "/", Group: group},
		Streams: rt.StreamsAtRelease,
		Fixed:   fixed,
		IDs:     id,
		// A tool's standby shim answers its status; a service's execs
		// the service, and a session's answers each command (rt.Session).
		Answers: !plan.Service && !plan.Session,
	})
	if err != nil {
		if group != nil {
			_ = group.Close()
		}
		id.Release()
		return nil, err
	}
	return sb, nil
}

// fixedPaths are the host paths a prepared sandbox bound that a release
// checks are still the same files: the dir (when there is one) and the
// executable.
func fixedPaths(dir, exe string) []string {
	if dir == "" {
		return []string{exe}
	}
	return []string{dir, exe}
}

// seccompFile returns a descriptor to read the seccomp program from (the
// read end of a pipe that holds it: 9 KiB, well within a pipe's buffer).
// The caller closes it once the process has started.
func (r *Runner) seccompFile() (*os.File, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("seccomp program pipe: %w", err)
	}
	defer pw.Close()
	if _, err := pw.Write(r.seccomp); err != nil {
		pr.Close()
		return nil, fmt.Errorf("seccomp program pipe: %w", err)
	}
	return pr, nil
}

// String summarises the backend for doctor: version, path and limits.
func (r *Runner) String() string {
	l := r.limits
	return fmt.Sprintf("%s at %s; limits pids %d, memory %d MiB, nofile %d, nproc %d, /tmp %d MiB",
		r.Version(), r.bwrap, l.Pids, l.Memory>>20, l.NoFile, l.NProc, l.TmpSize>>20)
}

// Version returns `bwrap --version`, for doctor.
func (r *Runner) Version() string {
	res, err := rt.RunHelper(context.Background(), rt.HelperCmd{
		Path: r.bwrap, Args: []string{"--version"}, Dir: "/",
		Timeout: 5 * time.Second, MaxStdout: 4096, MaxStderr: 4096,
	})
	if err != nil || res.Failed() {
		return "unknown"
	}
	return strings.TrimSpace(string(res.Stdout))
}

// start is how a sandbox is started: the enter shim that execs bwrap.
type start struct {
	path string
	argv []string
}

// enter creates the call's cgroup (when the host has one) and returns it
// with how to start plan: the enter shim, started inside the cgroup2 group
// (CLONE_INTO_CGROUP), joins the call's v1 cgroups (a hybrid host's pids
// and memory controllers) when there are any, drops to the sandbox's own
// host ids id (when toolgate is root), joins a new anonymous session
// keyring and execs bwrap. Every sandbox (a call's, a prepared one, a
// service's) starts so: bwrap gives no new session keyring, and without
// the shim's the sandbox would share toolgate's (issue 21). The rlimits
// are set by the shim inside the sandbox. The caller closes the group.
func (r *Runner) enter(name string, plan Plan, id rt.SandboxID) (*cgroup.Group, start, error) {
	var group *cgroup.Group
	if r.cg != nil && (r.cg.V2 != "" || r.limits.Pids > 0 || r.limits.Memory > 0) {
		g, err := r.cg.NewGroup(name, cgroup.Limits{Pids: r.limits.Pids, Memory: r.limits.Memory})
		if err != nil {
			return nil, start{}, fmt.Errorf("sandbox cgroup: %w", err)
		}
		group = g
	}
	argv := append([]string{r.bwrap}, Args(r.policy, plan)...)
	enter := shim.Spec{Mode: shim.Enter, Joins: group.Joins(), Drop: id.Drop(), Path: r.bwrap, Argv: argv}
	return group, start{path: r.shim, argv: append([]string{r.shim}, enter.Args()...)}, nil
}
