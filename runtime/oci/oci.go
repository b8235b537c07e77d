// Package oci runs sandboxed tools in OCI containers: runc by default, crun
// or runsc (gVisor) when chosen. Every call gets a runtime spec from package
// bundle, a private bundle directory, and a unique container id with the
// server's prefix; however the call ends, the container is killed and
// deleted and the bundle removed. At start-up the runner lays out the
// skeleton rootfs once and sweeps what servers killed without cleaning up
// left behind.
//
// The container process is toolgate's own init shim (shim.Init), bound
// read-only at bundle.ShimPath: it makes stderr the same descriptor as
// stdout inside the sandbox and execs the tool with exactly rt.Env (the
// runtimes inject HOME; the shim removes it).
package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/internal/telemetry"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/shim"
)

// IDPrefix starts every container id: toolgate-<server pid>-<call id>.
const IDPrefix = "toolgate-"

// opTimeout bounds one runtime housekeeping command (kill, delete, list).
const opTimeout = 10 * time.Second

// opMaxBytes caps the output kept from a housekeeping command.
const opMaxBytes = 64 << 10

// Config configures a Runner.
type Config struct {
	// Runtime is runc, crun or runsc; empty means runc.
	Runtime Name
	// Shim is the binary that provides rt's init shim mode (toolgate
	// itself, or the toolgate-shim installed next to it): bound read-only
	// into every container at bundle.ShimPath and run as its process.
	Shim string
	// RunDir is the server runtime base directory; each server uses
	// RunDir/<pid>. Empty means DefaultRunDir().
	RunDir string
	// Limits are the per-call limits.
	Limits rt.SandboxLimits
	// Probe is the executable of the start-up probe container; empty
	// means /usr/bin/true. "-" skips the probe.
	Probe string
}

// DefaultRunDir is /run/toolgate for root, else $XDG_RUNTIME_DIR/toolgate.
func DefaultRunDir() string {
	if os.Geteuid() != 0 {
		if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
			return filepath.Join(d, "toolgate")
		}
	}
	return "/run/toolgate"
}

// binDirs are searched, in order, for the runtime binaries (the server's
// PATH is not used).
var binDirs = filepath.SplitList(rt.DefaultPath)

// findBinary returns the absolute path of an executable named name in
// binDirs.
func findBinary(name string) (string, error) {
	for _, d := range binDirs {
		p := filepath.Join(d, name)
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s (install the Debian package %q)", name, rt.DefaultPath, debPackage(name))
}

func debPackage(name string) string {
	if name == "runsc" {
		return "runsc"
	}
	return name
}

// plan is everything about a Runner that needs no side effect: paths,
// the base policy, the runtime flavour. `toolgate spec` uses it alone.
type plan struct {
	cfg     Config
	fl      flavour
	bin     string
	dir     string // RunDir/<pid>
	rootfs  string
	state   string
	bundles string
	prefix  string // IDPrefix + pid + "-"
	policy  bundle.Policy
	// mask is the empty file bound over the unified hierarchy's
	// cgroup.controllers for crun on a hybrid host; "" when not needed.
	mask string
	// notes are facts for doctor.
	notes []string
}

// newPlan validates cfg and computes the plan. It reads host facts (which
// binaries and /etc files exist, which cgroup controllers) but changes
// nothing.
func newPlan(cfg Config) (*plan, error) {
	if cfg.Runtime == "" {
		cfg.Runtime = Runc
	}
	fl, ok := flavours[cfg.Runtime]
	if !ok {
		_, err := ParseRuntime(string(cfg.Runtime))
		return nil, err
	}
	if !filepath.IsAbs(cfg.Shim) {
		return nil, fmt.Errorf("oci: shim binary %q: not an absolute path", cfg.Shim)
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	if cfg.RunDir == "" {
		cfg.RunDir = DefaultRunDir()
	}
	if !filepath.IsAbs(cfg.RunDir) {
		return nil, fmt.Errorf("oci: run dir %q: not an absolute path", cfg.RunDir)
	}
	bin, err := findBinary(string(cfg.Runtime))
	if err != nil {
		return nil, fmt.Errorf("oci runtime %s: %w", cfg.Runtime, err)
	}
	host, err := bundle.DetectHost(os.Lstat, os.Stat, os.Readlink)
	if err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	pid := strconv.Itoa(os.Getpid())
	p := &plan{
		cfg:    cfg,
		fl:     fl,
		bin:    bin,
		dir:    filepath.Join(cfg.RunDir, pid),
		prefix: IDPrefix + pid + "-",
	}
	p.rootfs = filepath.Join(p.dir, "rootfs")
	p.state = filepath.Join(p.dir, "state-"+string(cfg.Runtime))
	p.bundles = filepath.Join(p.dir, "bundles")
	p.policy = cfg.Limits.Policy(host, cfg.Shim)
	// No user namespace: the tool runs as its sandbox's host ids, set per
	// sandbox (spec); the policy shows the range's first.
	if cfg.Limits.IDs.Count > 0 {
		p.policy.UID, p.policy.GID = cfg.Limits.IDs.UID, cfg.Limits.IDs.GID
	}
	p.policy.Rootfs = p.rootfs
	// The cgroup limits the host can enforce; the rest are notes for
	// doctor.
	p.policy.Pids, p.policy.Memory = 0, 0
	cg := cgroup.ReadHost().Roots()
	if cfg.Limits.Pids > 0 {
		if cg.Pids {
			p.policy.Pids = max(cfg.Limits.Pids, fl.pidsFloor)
			if fl.pidsFloor > cfg.Limits.Pids {
				p.notes = append(p.notes, fmt.Sprintf("%s: pids cgroup limit raised to %d (it counts the sandbox kernel's own tasks); processes are bounded by RLIMIT_NPROC %d", cfg.Runtime, fl.pidsFloor, cfg.Limits.NProc))
			}
		} else {
			p.notes = append(p.notes, "no pids cgroup controller: processes are bounded by RLIMIT_NPROC only")
		}
	}
	if cfg.Limits.Memory > 0 {
		if cg.Memory {
			p.policy.Memory = cfg.Limits.Memory
			p.policy.MemorySwap = cg.Swap
		} else {
			p.notes = append(p.notes, "no memory cgroup controller: per-call memory is not limited")
		}
	}
	if cfg.Runtime == Crun && cg.HybridControllers {
		p.mask = filepath.Join(p.dir, "empty-cgroup.controllers")
		p.notes = append(p.notes, "crun: hybrid cgroups with controllers in the unified hierarchy; crun is run in a private mount namespace where "+cgroup.UnifiedControllers+" reads empty")
	}
	return p, nil
}

// containerID is the id of call callID.
func (p *plan) containerID(callID string) (string, error) {
	if !validCallID.MatchString(callID) {
		return "", fmt.Errorf("oci: call id %q: want 1-64 of [A-Za-z0-9_.-]", callID)
	}
	return p.prefix + callID, nil
}

var validCallID = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// cgroupsPath is the container's cgroup: relative, so that runc nests it
// under the server's own cgroups (toolgate-<pid>/<id>, the directory that
// the server's cgroup sweep removes after a crash).
func (p *plan) cgroupsPath(id string) string {
	return cgroupParent(os.Getpid()) + "/" + id
}

// spec returns the runtime spec of inv run as container id with host ids
// sid (-1: the policy's), egressDir its egress proxy's directory
// (rt.Egress.Dir; "" without an allowlist).
func (p *plan) spec(inv rt.Invocation, id, egressDir string, sid rt.SandboxID) (*specs.Spec, error) {
	pol := p.policy
	if sid.UID >= 0 {
		pol.UID, pol.GID = uint32(sid.UID), uint32(sid.GID)
	}
	pol.CgroupsPath = p.cgroupsPath(id)
	return render(pol, p.fl, inv, egressDir)
}

// RenderSpec is the OCI rendering of the sandbox policy pol for call inv
// under runtime name: bundle.Spec of the call's tool (the init shim at
// bundle.ShimPath, which execs inv's argv; the runtime sets the rlimits),
// with the runtime's own adjustments. A pure function of its inputs: the
// bwrap backend's parity test renders it beside bwrap.Args. egressDir is
// the host directory of the call's egress proxy socket, "" for a call
// without an allowlist.
func RenderSpec(pol bundle.Policy, name Name, inv rt.Invocation, egressDir string) (*specs.Spec, error) {
	fl, ok := flavours[name]
	if !ok {
		_, err := ParseRuntime(string(name))
		return nil, err
	}
	return render(pol, fl, inv, egressDir)
}

func render(pol bundle.Policy, fl flavour, inv rt.Invocation, egressDir string) (*specs.Spec, error) {
	if len(inv.Argv) == 0 {
		return nil, errors.New("oci: empty argv")
	}
	if (egressDir != "") != (len(inv.Egress) > 0) {
		return nil, fmt.Errorf("oci: spec of %s: an egress directory without an allowlist, or the reverse", inv.Name)
	}
	initSpec := shim.Spec{Mode: shim.Init, KeepStderr: inv.SplitStderr, Env: inv.Env, Path: inv.Path, Argv: inv.Argv}
	if egressDir != "" {
		initSpec.Egress = bundle.EgressSocketPath
	}
	t := bundle.Tool{
		Exe:    inv.Path,
		Dir:    inv.Dir,
		Args:   append([]string{bundle.ShimPath}, initSpec.Args()...),
		Egress: egressDir,
		Trust:  egressDir != "" && len(inv.Inject) > 0,
	}
	s, err := bundle.Spec(t, pol, fl.opts...)
	if err != nil {
		return nil, fmt.Errorf("oci: spec of %s: %w", inv.Name, err)
	}
	return s, nil
}

// Spec returns the runtime spec a call of inv would use, with no side
// effect (for `toolgate spec`).
func Spec(cfg Config, inv rt.Invocation) (*specs.Spec, error) {
	p, err := newPlan(cfg)
	if err != nil {
		return nil, err
	}
	id, err := p.containerID(inv.ID)
	if err != nil {
		return nil, err
	}
	var egressDir string
	if len(inv.Egress) > 0 {
		egressDir = rt.EgressDirExample
	}
	return p.spec(inv, id, egressDir, rt.SandboxID{UID: -1, GID: -1})
}

// Runner runs invocations in containers of one OCI runtime.
type Runner struct {
	*plan
	// ids hands out each container's host ids (nil when toolgate is not
	// root: the policy's).
	ids   *rt.IDs
	swept []string
	// prepared numbers the prepared containers (Prepare).
	prepared atomic.Uint64
}

// New checks that the chosen runtime can run here, prepares the skeleton
// rootfs and the state and bundle directories, sweeps what dead servers
// left, and runs a probe container: Prepare, then Start. The error says
// exactly why the runtime cannot be used; callers never fall back to
// running unsandboxed.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	r, err := Prepare(cfg)
	if err != nil {
		return nil, err
	}
	if err := r.Start(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Prepare checks what can be known without starting a process or changing
// the host (the runtime binary, root, the seccomp profile, the shim) and
// returns the backend, not set up yet: Start does that.
func Prepare(cfg Config) (*Runner, error) {
	p, err := newPlan(cfg)
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("oci runtime %s: the oci backend needs root (rootless runtimes are not supported); use --backend bwrap", p.cfg.Runtime)
	}
	if _, err := bundle.DefaultSeccomp(); err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	if err := checkShimReadable(p.cfg.Shim); err != nil {
		return nil, err
	}
	ids, err := rt.NewIDs(p.cfg.Limits.IDs)
	if err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	return &Runner{plan: p, ids: ids}, nil
}

// Start sweeps what dead servers left, lays out the server's directories
// and runs a probe container (bounded by ctx). On error nothing of this
// server is left on the host.
func (r *Runner) Start(ctx context.Context) error {
	if err := r.prepare(); err != nil {
		return err
	}
	if err := r.probe(ctx); err != nil {
		_ = r.Close()
		return err
	}
	return nil
}

// checkShimReadable refuses a toolgate binary the sandbox uid could not
// execute.
func checkShimReadable(self string) error {
	fi, err := os.Stat(self)
	if err != nil {
		return fmt.Errorf("oci: shim binary: %w", err)
	}
	if fi.Mode()&0o005 != 0o005 {
		return fmt.Errorf("oci: shim binary %q has mode %s: the sandbox uid must be able to read and execute it (chmod o+rx)", self, fi.Mode().Perm())
	}
	return nil
}

// Swept lists the directories of dead servers that New removed.
func (r *Runner) Swept() []string { return append([]string(nil), r.swept...) }

// String summarises the runner for doctor.
func (r *Runner) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s at %s; state %s; limits", r.cfg.Runtime, r.bin, r.state)
	if r.policy.Pids > 0 {
		fmt.Fprintf(&b, " pids %d,", r.policy.Pids)
	}
	if r.policy.Memory > 0 {
		fmt.Fprintf(&b, " memory %d MiB,", r.policy.Memory>>20)
	}
	l := r.cfg.Limits
	fmt.Fprintf(&b, " nofile %d, nproc %d, core %d, fsize %d, /tmp %d MiB; seccomp on", l.NoFile, l.NProc, l.Core, l.FSize, l.TmpSize>>20)
	for _, n := range r.notes {
		b.WriteString("; ")
		b.WriteString(n)
	}
	return b.String()
}

// Runtime is the chosen runtime's name.
func (r *Runner) Runtime() Name { return r.cfg.Runtime }

// Run runs inv in a fresh container. However the call ends, the container
// is killed and deleted and its bundle removed.
func (r *Runner) Run(ctx context.Context, inv rt.Invocation) (rt.Result, error) {
	if inv.Session {
		return rt.Result{}, fmt.Errorf("oci: %s: a helper session's template runs through rt.OpenSession", inv.Name)
	}
	id, err := r.containerID(inv.ID)
	if err != nil {
		return rt.Result{}, err
	}
	// The sandbox made on the call's path: what toolgate does before the
	// runtime starts (ids, the egress proxy, the spec, the bundle); the
	// runtime's own setup is in the process run's span.
	_, span := telemetry.Start(ctx, "sandbox make", trace.WithAttributes(attribute.String("toolgate.backend", string(r.cfg.Runtime))))
	defer span.End() // at once when a step fails; else ended before the run
	// The container's own host ids, given back once it is deleted (the
	// deferred calls below run first).
	sid, err := r.ids.Acquire()
	if err != nil {
		return rt.Result{}, err
	}
	defer sid.Release()
	uid, gid := r.hostIDs(sid)
	eg, err := inv.StartEgress(r.policy, uid, gid)
	if err != nil {
		return rt.Result{}, err
	}
	defer eg.Close()
	var egressDir string
	if eg != nil {
		egressDir = eg.Dir
		if eg.Trust {
			inv.Env = append(slices.Clip(inv.Env), bundle.TrustEnv...)
		}
	}
	s, err := r.spec(inv, id, egressDir, sid)
	if err != nil {
		return rt.Result{}, err
	}
	b := filepath.Join(r.bundles, id)
	if err := writeBundle(b, s); err != nil {
		return rt.Result{}, err
	}
	defer os.RemoveAll(b)

	argv := r.fl.runArgv(r.bin, r.state, b, id)
	c := rt.Cmd{
		Proc: rt.Proc{Path: r.bin, Args: argv, Env: rt.Env, Dir: b},
		Call: inv.Call,
		// Killing `runc run` leaves the container running: stop it
		// through the runtime, and always kill and delete it after.
		Stop:   func(int) { r.kill(id) },
		Finish: func() { r.cleanup(id) },
	}
	if eg != nil {
		c.Args = r.fl.runArgvEgress(r.bin, r.state, b, id)
	}
	span.End()
	res, err := r.exec(ctx, c)
	res.Egress = eg.Use()
	return res, err
}

// hostIDs are the container process's ids on the host (the runtime runs
// as root here, with no user namespace): the owner of its egress socket.
func (r *Runner) hostIDs(sid rt.SandboxID) (int, int) {
	if sid.UID >= 0 {
		return sid.UID, sid.GID
	}
	return int(r.policy.UID), int(r.policy.GID)
}

// Prepare creates a container for t ahead of its call (rt.Preparer): the
// container Run would make, from the same spec (bundle.Spec of the same
// policy), through the runtime's own split of run: the runtime's create
// sets it up (namespaces, mounts, cgroups and limits, the seccomp
// profile's place) and leaves it waiting in the runtime's init; the call
// runs the runtime's start. The hold shim (shim.Hold) owns the two
// steps on the host, as a child subreaper, so that the container's exit
// status reaches the call as `run`'s does. The container's stdio are the
// call's pipes, made now (the runtime fixes them at create); a release
// checks nothing was written to them. Cleanup deletes the container and
// its bundle, off the call's path.
func (r *Runner) Prepare(t rt.Template) (*rt.Standby, error) {
	if t.Session {
		// Its container's process is fixed at create: each command of a
		// session runs in a container of its own (rt.OpenSession).
		return nil, fmt.Errorf("oci: %s: a helper session is not prepared in one container", t.Name)
	}
	if t.Proxied {
		// Its egress directory is bound at create: the call's proxy is
		// made with its container.
		return nil, fmt.Errorf("oci: %s: a tool with an egress allowlist is not prepared ahead of its call", t.Name)
	}
	if len(t.Argv) == 0 {
		return nil, errors.New("oci: prepare: empty argv")
	}
	id, err := r.containerID("pool-" + strconv.FormatUint(r.prepared.Add(1), 10))
	if err != nil {
		return nil, err
	}
	inv := rt.Invocation{ID: id, Template: t}
	// A prepared container holds its ids from now on: the Standby gives
	// them back once it is deleted.
	sid, err := r.ids.Acquire()
	if err != nil {
		return nil, err
	}
	s, err := r.spec(inv, id, "", sid) // never an egress proxy: it is the call's own
	if err != nil {
		sid.Release()
		return nil, err
	}
	b := filepath.Join(r.bundles, id)
	if err := writeBundle(b, s); err != nil {
		sid.Release()
		return nil, err
	}
	hold := shim.Spec{
		Mode:      shim.Hold,
		Answer:    true,
		ReleaseFD: rt.ReleaseFD(0),
		PidFile:   filepath.Join(b, "pid"),
		Start:     r.fl.startArgv(r.bin, r.state, id),
		Path:      r.bin,
		Argv:      r.fl.createArgv(r.bin, r.state, b, filepath.Join(b, "pid"), id),
	}
	if r.mask != "" {
		hold.Mask = r.mask + "=" + cgroup.UnifiedControllers
	}
	dirs := []string{t.Path}
	if t.Dir != "" {
		dirs = []string{t.Dir, t.Path}
	}
	sb, err := rt.StartStandby(rt.StandbyCmd{
		Proc:        rt.Proc{Path: r.cfg.Shim, Args: append([]string{r.cfg.Shim}, hold.Args()...), Env: rt.Env, Dir: b},
		Streams:     rt.StreamsAtPrepare,
		SplitStderr: t.SplitStderr,
		Stdin:       t.Stdin,
		// As for run: stop it through the runtime (the container is not
		// in the hold shim's process group).
		Stop: func(int) { r.kill(id) },
		Cleanup: func() {
			r.cleanup(id)
			_ = os.RemoveAll(b)
		},
		Fixed: dirs,
		IDs:   sid,
		// The hold shim answers the container's status, and the call
		// ends there; the shim, the container's deletion after it.
		Answers: true,
	})
	if err != nil {
		_ = os.RemoveAll(b)
		sid.Release()
		return nil, err
	}
	return sb, nil
}

var _ rt.Preparer = (*Runner)(nil)

// op runs one housekeeping command of the runtime (killArgv, deleteArgv,
// listArgv), returning its output when it failed.
func (r *Runner) op(argv []string) (rt.Result, error) {
	sub := argv[3+len(r.fl.global)]
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := r.exec(ctx, rt.Cmd{
		Proc: rt.Proc{Path: r.bin, Args: argv, Env: rt.Env, Dir: "/"},
		Call: rt.Call{Timeout: opTimeout, MaxBytes: opMaxBytes},
	})
	if err != nil {
		return res, fmt.Errorf("%s %s: %w", r.cfg.Runtime, sub, err)
	}
	if res.Failed() {
		return res, fmt.Errorf("%s %s: exit %d: %s", r.cfg.Runtime, strings.Join(argv[1:], " "), res.ExitCode, firstLine(res.Output))
	}
	return res, nil
}

// cleanup kills and deletes container id after its `run` process exited,
// unless the runtime already removed every trace of it from the state dir
// (a run that ended normally deletes its container; runc, crun and runsc
// all keep their state under --root as <id> or <id>_...). That check saves
// two runtime processes per call; anything left is killed and deleted.
func (r *Runner) cleanup(id string) {
	if !r.stateExists(id) {
		return
	}
	r.kill(id)
	r.delete(id)
}

// stateExists reports whether the state dir holds anything of container id.
// An unreadable state dir counts as holding it.
func (r *Runner) stateExists(id string) bool {
	entries, err := os.ReadDir(r.state)
	if err != nil {
		return true
	}
	for _, e := range entries {
		if n := e.Name(); n == id || strings.HasPrefix(n, id+"_") || strings.HasPrefix(n, id+".") {
			return true
		}
	}
	return false
}

// kill sends SIGKILL to every process of container id. A container that is
// already gone is not an error.
func (r *Runner) kill(id string) {
	_, _ = r.op(r.fl.killArgv(r.bin, r.state, id))
}

// delete removes container id and its state, forcefully.
func (r *Runner) delete(id string) {
	_, _ = r.op(r.fl.deleteArgv(r.bin, r.state, id))
}

// writeBundle creates the private bundle directory b and its config.json.
func writeBundle(b string, s *specs.Spec) error {
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("oci: encode spec: %w", err)
	}
	if err := os.Mkdir(b, 0o700); err != nil {
		return fmt.Errorf("oci: bundle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(b, "config.json"), data, 0o600); err != nil {
		_ = os.RemoveAll(b)
		return fmt.Errorf("oci: bundle: %w", err)
	}
	return nil
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// exec runs c through rt.Exec, inside the crun mount namespace when the
// host needs it.
func (r *Runner) exec(ctx context.Context, c rt.Cmd) (rt.Result, error) {
	if r.mask != "" {
		c = masked(r.cfg.Shim, r.mask, c)
	}
	return rt.Exec(ctx, c)
}

// Close kills and deletes any container of this server still known to the
// runtime and removes the server's directory.
func (r *Runner) Close() error {
	if r == nil {
		return nil
	}
	r.sweepState(r.state)
	removeCgroupParents(os.Getpid())
	if err := os.RemoveAll(r.dir); err != nil {
		return fmt.Errorf("oci: remove %s: %w", r.dir, err)
	}
	return nil
}
