// Package battery is the sandbox escape and fault battery: the guarantees
// every sandbox backend must give, each a Case that runs the probe (package
// internal/probes) as a tool through a real rt.Runner and checks what it
// reports. The same cases are the backends' test suite (battery_test.go)
// and `toolgate selftest` on a deployed host.
//
// Running the battery changes nothing on the host, even where a guarantee
// is broken: the probe writes and runs its destructive modes only as PID 1
// of a pid namespace (a sandbox), and asks access(2) otherwise; the host
// side only starts a listener on 127.0.0.1 and files in a private temp dir.
package battery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/probes"
	rt "github.com/toolgate/toolgate/runtime"
)

// SecretVar is in the server's own environment while the battery runs; no
// sandbox may see it. It must be there from exec: /proc/PID/environ shows
// a process's initial environment, not later setenv calls (ReexecWithSecret).
const SecretVar = "TOOLGATE_BATTERY_SECRET"

// BaitVar names a descriptor the running program was started with,
// without close-on-exec, as whatever launches toolgate may leave one (fd 9
// of a shell, a supervisor's log): no sandboxed tool may see it.
const BaitVar = "TOOLGATE_BATTERY_BAIT_FD"

// ReexecWithSecret re-executes the running program with SecretVar in its
// initial environment, the BaitVar descriptor open and a session keyring
// of its own holding a key whose payload is the secret (KeyringVar),
// unless they are there already; call it first thing (TestMain,
// selftest), before rt.SealInheritedFDs as main does. It returns only
// when the variable is present.
func ReexecWithSecret() error {
	if os.Getenv(SecretVar) != "" {
		return nil
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	secret := "leaked-" + hex.EncodeToString(b[:])
	env := append(os.Environ(), SecretVar+"="+secret)
	// The session keyring is the calling thread's, and the exec below
	// keeps it: both on this thread.
	goruntime.LockOSThread()
	env = append(env, KeyringVar+"="+newSessionKeyring(hex.EncodeToString(b[:]), secret))
	// An unlinked temp file: nothing is left on disk, and a sandbox that
	// got the descriptor could write to the host through it.
	bait := filepath.Join(os.TempDir(), "toolgate-battery-bait-"+hex.EncodeToString(b[:]))
	if fd, err := syscall.Open(bait, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o600); err == nil {
		_ = os.Remove(bait)
		env = append(env, BaitVar+"="+strconv.Itoa(fd))
	}
	return syscall.Exec("/proc/self/exe", os.Args, env) //nolint:gosec // re-executes this very program with the secret set
}

// Probe says how to run the probe program: Path, then Prefix, then a mode.
type Probe struct {
	Path   string
	Prefix []string
}

// Env is what the cases share for one backend.
type Env struct {
	// Backend names the backend ("bwrap", "oci/runc").
	Backend string
	Runner  rt.Runner
	Probe   Probe
	// Limits are the limits the backend was configured with.
	Limits rt.SandboxLimits
	// Dir is the tool dir of every call: private, 0755, removed at the end.
	Dir string

	listener net.Listener
	secret   string // a root-only host file, for the hard link case
	tag      string // marks every process of this run
	seq      atomic.Int64
}

// Outcome is one case's result.
type Outcome struct {
	Case      string
	Guarantee string
	// State is "held", "broken" or "skipped".
	State   string
	Detail  string
	Elapsed time.Duration
}

// The outcome states.
const (
	Held    = "held"
	Broken  = "broken"
	Skipped = "skipped"
)

// errSkip marks a case that cannot run here (the reason follows).
var errSkip = errors.New("skipped")

// Case is one guarantee and how to check it. Run returns nil when the
// guarantee held.
type Case struct {
	Name      string
	Guarantee string
	// Slow cases (seconds) are left out of short runs.
	Slow bool
	Run  func(ctx context.Context, e *Env) error
}

// NewEnv prepares the host side for runner: a private tool dir, a listener
// on 127.0.0.1, a root-only file to hard-link, the secret in the server's
// environment. Close undoes it all.
func NewEnv(backend string, runner rt.Runner, probe Probe, limits rt.SandboxLimits) (*Env, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	dir := filepath.Join(os.TempDir(), "toolgate-battery-"+tag)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("battery: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("battery: %w", err)
	}
	e := &Env{Backend: backend, Runner: runner, Probe: probe, Limits: limits, Dir: dir, tag: "tag=" + tag}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("battery: listener: %w", err)
	}
	e.listener = l
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	e.secret = filepath.Join(os.TempDir(), "toolgate-battery-secret-"+tag)
	if err := os.WriteFile(e.secret, []byte("host secret\n"), 0o600); err != nil {
		e.Close()
		return nil, fmt.Errorf("battery: %w", err)
	}
	return e, nil
}

// Close removes what NewEnv made.
func (e *Env) Close() {
	if e.listener != nil {
		e.listener.Close()
	}
	os.Remove(e.secret)
	os.RemoveAll(e.Dir)
}

// invocation is a call of the probe with args.
func (e *Env) invocation(timeout time.Duration, max int, args ...string) rt.Invocation {
	argv := append(append([]string{e.Probe.Path}, e.Probe.Prefix...), args...)
	argv = append(argv, e.tag)
	return rt.Invocation{
		ID:       fmt.Sprintf("battery-%s-%d", e.tag[4:12], e.seq.Add(1)),
		Template: rt.Template{Name: "probe", Path: e.Probe.Path, Argv: argv, Dir: e.Dir},
		Call:     rt.Call{Timeout: timeout, MaxBytes: max},
	}
}

// call runs the probe with args through the backend. When the runner is a
// pool (rt.Pool) that can prepare its sandbox, the call runs in a sandbox
// prepared for it ahead of the call, and it is an error if it did not: the
// battery then proves every guarantee of a prepared sandbox.
func (e *Env) call(ctx context.Context, timeout time.Duration, max int, args ...string) (rt.Result, error) {
	return e.callInvocation(ctx, e.invocation(timeout, max, args...))
}

// callInvocation is call of an invocation made by e.invocation.
func (e *Env) callInvocation(ctx context.Context, inv rt.Invocation) (rt.Result, error) {
	var res rt.Result
	var err error
	if p, ok := e.Runner.(*rt.Pool); ok && p.CanPrepare(inv.Template) {
		res, err = e.callPrepared(ctx, p, inv)
	} else {
		res, err = e.Runner.Run(ctx, inv)
	}
	if err != nil {
		return res, fmt.Errorf("the call could not run: %w", err)
	}
	return res, nil
}

// callConcurrent runs the probe through the runner as a server would, with
// other calls in flight: through a pool, a prepared sandbox when one is
// there, else one prepared on the call's path.
func (e *Env) callConcurrent(ctx context.Context, timeout time.Duration, max int, args ...string) (rt.Result, error) {
	inv := e.invocation(timeout, max, args...)
	inv.Argv = inv.Argv[:len(inv.Argv)-1] // no tag: the same template for every call
	inv.Argv = append(inv.Argv, "tag=concurrent-"+e.tag[4:])
	if p, ok := e.Runner.(*rt.Pool); ok {
		p.Keep([]rt.Template{inv.Template})
		defer p.Keep(nil)
	}
	res, err := e.Runner.Run(ctx, inv)
	if err != nil {
		return res, fmt.Errorf("the call could not run: %w", err)
	}
	return res, nil
}

// callPrepared keeps a sandbox prepared for inv, waits until it is ready,
// and runs inv: it must take that sandbox.
func (e *Env) callPrepared(ctx context.Context, p *rt.Pool, inv rt.Invocation) (rt.Result, error) {
	p.Keep([]rt.Template{inv.Template})
	deadline := time.Now().Add(60 * time.Second)
	for p.Status().Ready == 0 {
		if time.Now().After(deadline) {
			st := p.Status()
			return rt.Result{}, fmt.Errorf("no sandbox was prepared within 60 s: %s; %+v", st, st.Entries)
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := p.Status().Hits
	res, err := p.Run(ctx, inv)
	if err == nil && p.Status().Hits != before+1 {
		err = fmt.Errorf("the call did not run in a sandbox prepared for it: %+v", p.Status())
	}
	// The pool has begun to prepare the next sandbox for the same argv:
	// discard it, so that what carries this run's tag on the host after
	// the call is what the call left (Env.survivors), never a sandbox
	// waiting for a call.
	p.Keep(nil)
	return res, err
}

// preparer is the backend that prepares sandboxes ahead of their calls,
// if the runner has one.
func (e *Env) preparer() rt.Preparer {
	if p, ok := e.Runner.(*rt.Pool); ok {
		return p.Backend().(rt.Preparer)
	}
	if p, ok := e.Runner.(rt.Preparer); ok {
		return p
	}
	return nil
}

// isRunsc reports whether the backend is gVisor's (pooled or not).
func (e *Env) isRunsc() bool { return strings.HasPrefix(e.Backend, "oci/runsc") }

// want returns an error naming every line of lines missing from out.
func want(out []byte, lines ...string) error {
	var missing []string
	for _, l := range lines {
		if !strings.Contains(string(out), l+"\n") {
			missing = append(missing, strconv.Quote(l))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("expected %s in the probe's report:\n%s", strings.Join(missing, ", "), clip(out))
	}
	return nil
}

func clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}

// Run runs cases through e and returns their outcomes in order. Each case
// gets a fresh tool dir content (the dir itself is shared).
func Run(ctx context.Context, e *Env, cases []Case) []Outcome {
	out := make([]Outcome, 0, len(cases))
	for _, c := range cases {
		start := time.Now()
		err := c.Run(ctx, e)
		o := Outcome{Case: c.Name, Guarantee: c.Guarantee, State: Held, Elapsed: time.Since(start)}
		switch {
		case errors.Is(err, errSkip):
			o.State, o.Detail = Skipped, strings.TrimPrefix(err.Error(), errSkip.Error()+": ")
		case err != nil:
			o.State, o.Detail = Broken, err.Error()
		}
		out = append(out, o)
		clean(e.Dir)
	}
	return out
}

// clean empties the tool dir between cases.
func clean(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		os.RemoveAll(filepath.Join(dir, en.Name()))
	}
}

// Cases returns the battery, in the order it runs.
func Cases() []Case {
	return []Case{
		{Name: "network", Guarantee: "no network: only lo, the host's 127.0.0.1 unreachable (the sandbox's own loopback works)", Run: caseNetwork},
		{Name: "read-only", Guarantee: "the tool's dir, /, /etc and /usr are read-only; /tmp is writable, private and gone after the call", Run: caseWrites},
		{Name: "environment", Guarantee: "exactly PATH, PAGER, GIT_PAGER, GIT_CONFIG_NOSYSTEM; no visible process carries the server's environment", Run: caseEnvironment},
		{Name: "privileges", Guarantee: "no capabilities, no_new_privs, PID 1 of its own pid namespace, hostname sandbox, no nested user namespace", Run: casePrivileges},
		{Name: "own-env", Guarantee: "a tool's env line adds exactly its variables to the four, in a fresh and in a prepared sandbox", Run: caseOwnEnv},
		{Name: "host-invisible", Guarantee: "/home, /root, /var, /boot, the server's runtime dir, /etc/shadow and /etc/ssh are absent; /etc/shadow is unreadable", Run: caseHostInvisible},
		{Name: "links", Guarantee: "symlinks and hard links placed in the dir read nothing outside it", Run: caseLinks},
		{Name: "ptrace", Guarantee: "no process is attachable with ptrace", Run: casePtrace},
		{Name: "fork-bomb", Guarantee: "a fork bomb is stopped by the process limit and the backend keeps serving", Run: caseForkBomb},
		{Name: "memory-bomb", Guarantee: "a memory bomb is stopped by the memory limit and the backend keeps serving", Run: caseMemoryBomb},
		{Name: "flood", Guarantee: "1 GB of output is capped at 1 MiB with bounded server memory", Slow: true, Run: caseFlood},
		{Name: "timeout", Guarantee: "a tool that ignores SIGTERM, and its children, die at the timeout", Run: caseTimeout},
		{Name: "daemon", Guarantee: "a daemonized grandchild neither delays the call nor survives it", Run: caseDaemon},
		{Name: "kill-all", Guarantee: "kill(-1, SIGKILL) from inside kills only the sandbox, and no signal sent to PID 1 ends a call before its tool's answer", Run: caseKillAll},
		{Name: "descriptors", Guarantee: "the tool has only stdin (empty), stdout and stderr (one stream): no descriptor the server inherited", Run: caseDescriptors},
		{Name: "dev-capped", Guarantee: "/dev is read-only and /dev/shm is a private tmpfs capped like /tmp", Run: caseDevCapped},
		{Name: "egress-reached", Guarantee: "with an egress allowlist, a listed destination (a server on the host's 127.0.0.1, listed by address) is reached through toolgate's proxy by HTTP and CONNECT; the proxy variables are the one addition to the environment", Run: caseEgressReached},
		{Name: "egress-refused", Guarantee: "with an egress allowlist, an unlisted name, an unlisted IP literal, a metadata address and a listed name resolving to loopback are refused by the proxy; a connection around the proxy, a name lookup and a DNS datagram reach nothing", Run: caseEgressRefused},
		{Name: "egress-limits", Guarantee: "with an egress allowlist, the call's connection and byte caps hold and its result names the cap it hit", Run: caseEgressLimits},
		{Name: "egress-audit-bounded", Guarantee: "with an egress allowlist, 512 CONNECTs naming 64 KiB hosts leave bounded audit records: each host escaped and cut at 253 bytes, at most 256 KiB charged a call, one summary for what was not recorded one by one", Slow: true, Run: caseEgressAuditBounded},
		{Name: "credential-injected", Guarantee: "a destination with a credential gets the operator's header on the tool's request, through the proxy, and the egress record says a credential was injected, never which", Run: caseCredentialInjected},
		{Name: "credential-replaced", Guarantee: "a credential header the tool sets itself (and its Authorization, Proxy-Authorization) is replaced at a credentialed destination, never added to", Run: caseCredentialReplaced},
		{Name: "credential-not-elsewhere", Guarantee: "the credential goes to its destination only: another listed destination is tunnelled with what the tool sent, plain HTTP to the credentialed one is refused, an unlisted one is reached by nothing", Run: caseCredentialNotElsewhere},
		{Name: "credential-unreadable", Guarantee: "the sandbox finds the credential nowhere it can read (every visible process's environment and command line, /.toolgate, /tmp, /dev/shm, /etc/ssl, its dir), nor the server CA's key", Run: caseCredentialUnreadable},
		{Name: "seccomp", Guarantee: "a seccomp filter (containers/common's default profile) is loaded: a syscall it refuses fails", Run: caseSeccomp},
		{Name: "keyring", Guarantee: "the server's session keyring is out of reach: its key can be neither read nor found, nothing can be linked into it, /proc/keys lists neither, and (bwrap) no process of the sandbox holds it; keyctl, add_key and request_key fail with EPERM", Run: caseKeyring},
		{Name: "fresh", Guarantee: "a call sees nothing an earlier call of the same tool left: no file in /tmp or /dev/shm, no process, exactly the four variables, no signal ignored that the server does not ignore", Run: caseFresh},
		{Name: "own-sandbox", Guarantee: "two calls never share a sandbox: calls in flight at once each have namespaces of their own", Run: caseOwnSandbox},
		{Name: "ids-apart", Guarantee: "each sandbox runs as host ids of its own, from a range no account uses: a host process with the previous call's uid can neither signal, read nor enter the next call", Run: caseIDsApart},
		{Name: "prepared-apart", Guarantee: "a sandbox prepared for one tool is out of reach of another tool's call (no process, descriptor or file of it), and runs its own tool only", Run: casePreparedApart},
		{Name: "session-shape", Guarantee: "a built-in's helper session runs only its helper, with exactly the argv toolgate sent; a command of another exe, prefix or verb is refused unrun, and the session goes on", Run: caseSessionShape},
		{Name: "session-unreachable", Guarantee: "a helper session's command cannot reach its shim or release channel (only fds 0-2, /proc/1 closed, no ptrace; signals do not stop it), and nothing it leaves meets the next command, which runs exactly what was sent", Run: caseSessionUnreachable},
		{Name: "session-fresh", Guarantee: "a helper session's sandbox is as fresh as a tool's: its first command sees nothing an earlier session left, exactly the four variables, and no signal ignored that the server does not ignore", Run: caseSessionFresh},
	}
}

func caseFresh(ctx context.Context, e *Env) error {
	exact := "env: GIT_CONFIG_NOSYSTEM=1 GIT_PAGER=cat PAGER=cat PATH=" + rt.DefaultPath
	for i := range 3 {
		res, err := e.call(ctx, 20*time.Second, 4096, "leftovers")
		if err != nil {
			return err
		}
		if err := want(res.Output, "leftover /tmp/toolgate-leftover: false", "leftover /dev/shm/toolgate-leftover: false",
			"processes: 1", exact); err != nil {
			return fmt.Errorf("call %d: %w", i+1, err)
		}
		if err := noSignalIgnored(res.Output); err != nil {
			return fmt.Errorf("call %d: %w", i+1, err)
		}
		// The traces were really left: the check above proves something.
		if err := want(res.Output, "leave /tmp/toolgate-leftover: ok", "leave /dev/shm/toolgate-leftover: ok", "leave a process: ok"); err != nil {
			return fmt.Errorf("call %d could not leave its traces, so the next proves nothing: %w", i+1, err)
		}
	}
	return e.survivors()
}

func caseOwnSandbox(ctx context.Context, e *Env) error {
	// Four calls of the same tool at once (with a pool: more than it
	// holds, so that some prepare their own on their path), each alive
	// for a second with a file of its own in /tmp: a call that shared its
	// sandbox would see the other's file and process. One call after
	// another is the case "fresh".
	type out struct {
		res rt.Result
		err error
	}
	results := make(chan out, 4)
	for range 4 {
		go func() {
			res, err := e.callConcurrent(ctx, 20*time.Second, 4096, "alone", "1000")
			results <- out{res, err}
		}()
	}
	for range 4 {
		o := <-results
		if o.err != nil {
			return o.err
		}
		if err := want(o.res.Output, "alone: 1 files, 1 processes"); err != nil {
			return fmt.Errorf("a call shared its sandbox: %w", err)
		}
	}
	return nil
}

func casePreparedApart(ctx context.Context, e *Env) error {
	prep := e.preparer()
	if prep == nil {
		return fmt.Errorf("%w: the backend prepares no sandbox ahead of a call", errSkip)
	}
	// A sandbox prepared for tool A (the probe, reporting what an
	// intruder may have left), waiting, while tool B's call tries to reach
	// it.
	argvA := append(append([]string{e.Probe.Path}, e.Probe.Prefix...), "exists", "/tmp/toolgate-intruder", "/dev/shm/toolgate-intruder", e.tag)
	a, err := prep.Prepare(rt.Template{Name: "probe-a", Path: e.Probe.Path, Argv: argvA, Dir: e.Dir})
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	defer func() {
		a.Discard()
		a.Cleanup()
	}()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = a.WaitReady(wctx)
	cancel()
	if err != nil {
		return err
	}
	res, err := e.call(ctx, 20*time.Second, 4096, "intrude")
	if err != nil {
		return err
	}
	if err := want(res.Output, "processes: 1", "fds: 0 1 2"); err != nil {
		return fmt.Errorf("tool B's call sees more than itself: %w", err)
	}
	if !a.IsReady() {
		return fmt.Errorf("the prepared sandbox of tool A ended while tool B ran (%w):\n%s", a.Stale(), clip(res.Output))
	}
	resA, err := a.Release(ctx, rt.Call{Timeout: 20 * time.Second, MaxBytes: 4096})
	if err != nil {
		return fmt.Errorf("release tool A: %w", err)
	}
	if err := want(resA.Output, "exists /tmp/toolgate-intruder: false", "exists /dev/shm/toolgate-intruder: false"); err != nil {
		return fmt.Errorf("tool A's sandbox saw what tool B wrote, or ran another tool: %w", err)
	}
	return nil
}

func caseDescriptors(ctx context.Context, e *Env) error {
	fd := os.Getenv(BaitVar)
	if _, err := os.Stat("/proc/self/fd/" + fd); fd == "" || err != nil {
		return fmt.Errorf("%w: the server was not started with an inherited descriptor (%s, ReexecWithSecret)", errSkip, BaitVar)
	}
	res, err := e.call(ctx, 20*time.Second, 4096, "fds")
	if err != nil {
		return err
	}
	if err := want(res.Output, "fds: 0 1 2"); err != nil {
		return err
	}
	// stdout and stderr are one stream: the call's pipe (bwrap), a pipe of
	// the runtime's (runc, crun) or a host file of the Sentry's (runsc).
	out, errOut := regexp.MustCompile(`fd 1: (.*)`).FindSubmatch(res.Output), regexp.MustCompile(`fd 2: (.*)`).FindSubmatch(res.Output)
	if out == nil || errOut == nil || string(out[1]) != string(errOut[1]) {
		return fmt.Errorf("stdout and stderr are not one stream:\n%s", clip(res.Output))
	}
	// stdin is /dev/null, or (runc, crun, runsc) the runtime's copy of it:
	// empty either way.
	res, err = e.call(ctx, 20*time.Second, 4096, "stdin")
	if err != nil {
		return err
	}
	return want(res.Output, "stdin bytes=0")
}

func caseSeccomp(ctx context.Context, e *Env) error {
	res, err := e.call(ctx, 20*time.Second, 4096, "status")
	if err != nil {
		return err
	}
	// gVisor applies the filter in its Sentry and reports no Seccomp line.
	if !e.isRunsc() {
		if err := want(res.Output, "Seccomp: 2"); err != nil {
			return fmt.Errorf("no seccomp filter is loaded: %w", err)
		}
	}
	res, err = e.call(ctx, 20*time.Second, 4096, "add_key")
	if err != nil {
		return err
	}
	if !regexp.MustCompile(`add_key: denied (ENOSYS|EPERM)`).Match(res.Output) {
		return fmt.Errorf("add_key was not refused:\n%s", clip(res.Output))
	}
	return nil
}

func caseDevCapped(ctx context.Context, e *Env) error {
	mib := int(e.Limits.TmpSize>>20) + 32
	res, err := e.call(ctx, 60*time.Second, 4096, "write", "/dev/x")
	if err != nil {
		return err
	}
	if !strings.Contains(string(res.Output), "write /dev/x: denied") {
		return fmt.Errorf("/dev is writable:\n%s", clip(res.Output))
	}
	res, err = e.call(ctx, 60*time.Second, 4096, "fill", "/dev/shm/x", strconv.Itoa(mib))
	if err != nil {
		return err
	}
	m := regexp.MustCompile(`fill /dev/shm/x: (\d+) bytes: denied ENOSPC`).FindSubmatch(res.Output)
	if m == nil {
		return fmt.Errorf("/dev/shm took %d MiB without running out of space (cap: /tmp's %d MiB):\n%s", mib, e.Limits.TmpSize>>20, clip(res.Output))
	}
	if n, _ := strconv.ParseInt(string(m[1]), 10, 64); n > e.Limits.TmpSize {
		return fmt.Errorf("/dev/shm took %d bytes, more than /tmp's cap of %d", n, e.Limits.TmpSize)
	}
	return nil
}

func caseNetwork(ctx context.Context, e *Env) error {
	addr := e.listener.Addr().String()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return fmt.Errorf("%w: the host cannot reach its own listener (%w), so the check would prove nothing", errSkip, err)
	}
	c.Close()
	res, err := e.call(ctx, 20*time.Second, 4096, "net", addr)
	if err != nil {
		return err
	}
	return want(res.Output, "interfaces: lo", "connect "+addr+": denied ECONNREFUSED", "loopback: ok")
}

func caseWrites(ctx context.Context, e *Env) error {
	if err := os.WriteFile(filepath.Join(e.Dir, "existing"), []byte("keep"), 0o666); err != nil {
		return err
	}
	paths := []string{e.Dir + "/new", e.Dir + "/existing", "/new", "/etc/new", "/etc/passwd", "/usr/new"}
	res, err := e.call(ctx, 20*time.Second, 4096, append([]string{"write"}, append(paths, "/tmp/mine")...)...)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range paths {
		if !strings.Contains(string(res.Output), "write "+p+": denied") {
			errs = append(errs, fmt.Errorf("write %s was not denied", p))
		}
	}
	if err := want(res.Output, "write /tmp/mine: ok"); err != nil {
		errs = append(errs, err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.Dir, "existing")); string(b) != "keep" {
		errs = append(errs, fmt.Errorf("the dir's file was modified: %q", b))
	}
	if _, err := os.Stat(filepath.Join(e.Dir, "new")); err == nil {
		errs = append(errs, errors.New("a file appeared in the dir on the host"))
	}
	res, err = e.call(ctx, 20*time.Second, 4096, "exists", "/tmp/mine")
	if err != nil {
		return err
	}
	if err := want(res.Output, "exists /tmp/mine: false"); err != nil {
		errs = append(errs, fmt.Errorf("/tmp outlived the call: %w", err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w\n%s", errors.Join(errs...), clip(res.Output))
	}
	return nil
}

func caseEnvironment(ctx context.Context, e *Env) error {
	res, err := e.call(ctx, 20*time.Second, 4096, "env")
	if err != nil {
		return err
	}
	exact := "GIT_CONFIG_NOSYSTEM=1\nGIT_PAGER=cat\nPAGER=cat\nPATH=" + rt.DefaultPath + "\n"
	if string(res.Output) != exact {
		return fmt.Errorf("environment is %q, want exactly %q", res.Output, exact)
	}
	own, _ := os.ReadFile("/proc/self/environ")
	if !strings.Contains(string(own), SecretVar+"=") {
		return fmt.Errorf("%w: the server was not started with %s in its environment (ReexecWithSecret)", errSkip, SecretVar)
	}
	res, err = e.call(ctx, 20*time.Second, 4096, "environ-all", SecretVar)
	if err != nil {
		return err
	}
	if !regexp.MustCompile(`environ: \d+ processes visible, 0 with the marker`).Match(res.Output) {
		return fmt.Errorf("the server's environment is visible in the sandbox:\n%s", clip(res.Output))
	}
	return nil
}

func caseOwnEnv(ctx context.Context, e *Env) error {
	inv := e.invocation(20*time.Second, 4096, "env")
	inv.Env = []string{"HOME=/tmp", "CODEX_HOME=/tmp/codex"}
	res, err := e.callInvocation(ctx, inv)
	if err != nil {
		return err
	}
	exact := "CODEX_HOME=/tmp/codex\nGIT_CONFIG_NOSYSTEM=1\nGIT_PAGER=cat\nHOME=/tmp\nPAGER=cat\nPATH=" + rt.DefaultPath + "\n"
	if string(res.Output) != exact {
		return fmt.Errorf("environment with an env line is %q, want exactly %q", res.Output, exact)
	}
	return nil
}

func casePrivileges(ctx context.Context, e *Env) error {
	res, err := e.call(ctx, 20*time.Second, 4096, "status")
	if err != nil {
		return err
	}
	if err := want(res.Output, "CapInh: 0000000000000000", "CapPrm: 0000000000000000", "CapEff: 0000000000000000",
		"CapBnd: 0000000000000000", "prctl no_new_privs: 1", "hostname: sandbox"); err != nil {
		return err
	}
	// Every capability line the kernel reports is empty (gVisor does not
	// report CapAmb).
	if m := regexp.MustCompile(`Cap[A-Za-z]+: (0*[1-9a-f][0-9a-f]*)`).Find(res.Output); m != nil {
		return fmt.Errorf("a capability is held: %s", m)
	}
	// PID 1 of its own pid namespace, or (a prepared sandbox, an egress
	// sandbox) the child of toolgate's shim there.
	res, err = e.call(ctx, 20*time.Second, 4096, "pid")
	if err != nil {
		return err
	}
	if !regexp.MustCompile(`^pid=1 ppid=0\n$|^pid=\d+ ppid=1\nparent: toolgate's shim\n$`).Match(res.Output) {
		return fmt.Errorf("the tool is neither PID 1 of its own pid namespace nor the child of toolgate's shim there:\n%s", clip(res.Output))
	}
	res, err = e.call(ctx, 20*time.Second, 4096, "userns")
	if err != nil {
		return err
	}
	if !strings.Contains(string(res.Output), "unshare user: denied") {
		return fmt.Errorf("a nested user namespace was created:\n%s", clip(res.Output))
	}
	return nil
}

func caseHostInvisible(ctx context.Context, e *Env) error {
	runDir := os.Getenv("XDG_RUNTIME_DIR")
	if runDir == "" {
		runDir = "/run"
	}
	hidden := []string{"/home", "/root", "/var", "/boot", runDir, "/etc/shadow", "/etc/ssh"}
	res, err := e.call(ctx, 20*time.Second, 4096, append([]string{"exists"}, hidden...)...)
	if err != nil {
		return err
	}
	for _, p := range hidden {
		if !strings.Contains(string(res.Output), "exists "+p+": false") {
			return fmt.Errorf("%s is visible in the sandbox:\n%s", p, clip(res.Output))
		}
	}
	res, err = e.call(ctx, 20*time.Second, 4096, "read", "/etc/shadow")
	if err != nil {
		return err
	}
	if !strings.Contains(string(res.Output), "read /etc/shadow: denied") {
		return fmt.Errorf("/etc/shadow is readable:\n%s", clip(res.Output))
	}
	return nil
}

func caseLinks(ctx context.Context, e *Env) error {
	links := map[string]string{
		"abs": "/etc/shadow", "up": "../../../../../../etc/shadow", "proc": "/proc/1/root/etc/shadow",
		"root": "/", "secret": e.secret,
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(e.Dir, name)); err != nil {
			return err
		}
	}
	args := []string{"read", e.Dir + "/abs", e.Dir + "/up", e.Dir + "/proc", e.Dir + "/root/etc/shadow", e.Dir + "/secret"}
	// A hard link to a root-only file: meaningful only when the server is
	// root, so that the sandbox runs as another uid than the file's owner
	// (a non-root server's sandboxes run as its own uid, which owns it).
	if os.Geteuid() == 0 {
		hard := filepath.Join(e.Dir, "hard")
		if err := os.Link(e.secret, hard); err == nil {
			args = append(args, hard)
		}
	}
	res, err := e.call(ctx, 20*time.Second, 4096, args...)
	if err != nil {
		return err
	}
	for _, p := range args[1:] {
		if !strings.Contains(string(res.Output), "read "+p+": denied") {
			return fmt.Errorf("read %s was not denied:\n%s", p, clip(res.Output))
		}
	}
	return nil
}

func casePtrace(ctx context.Context, e *Env) error {
	res, err := e.call(ctx, 20*time.Second, 1<<16, "ptrace")
	if err != nil {
		return err
	}
	if !regexp.MustCompile(`ptrace: \d+ visible, 0 attachable`).Match(res.Output) {
		return fmt.Errorf("a process is attachable:\n%s", clip(res.Output))
	}
	return nil
}

// stillServing checks the backend answers a trivial call after a bomb.
func stillServing(ctx context.Context, e *Env) error {
	res, err := e.call(ctx, 20*time.Second, 4096, "echo", "still serving")
	if err != nil {
		return err
	}
	return want(res.Output, "still serving")
}

func caseForkBomb(ctx context.Context, e *Env) error {
	res, err := e.call(ctx, 30*time.Second, 4096, "forkbomb", "2000")
	if err != nil {
		return err
	}
	m := regexp.MustCompile(`forkbomb: started (\d+) of 2000`).FindSubmatch(res.Output)
	bound := e.Limits.Pids
	if bound <= 0 || int64(e.Limits.NProc) < bound {
		bound = int64(e.Limits.NProc)
	}
	switch {
	case m != nil:
		n, _ := strconv.Atoi(string(m[1]))
		if int64(n) >= bound {
			return fmt.Errorf("the fork bomb started %d processes; the limit is %d", n, bound)
		}
	case e.isRunsc() && res.ExitCode != 0 && !res.TimedOut:
		// gVisor: the Sentry's own tasks count against the cgroup and the
		// bomb's memory kills the whole sandbox before it reports
		// (SANDBOX.md §3): stopped, without a report.
	default:
		return fmt.Errorf("the fork bomb was not stopped (exit %d, limit %q, timed out %v):\n%s", res.ExitCode, res.Limit, res.TimedOut, clip(res.Output))
	}
	// Where toolgate's own cgroup holds the call (bwrap) and its pids
	// limit is the lower bound, the result names it.
	if e.ownCgroup() && e.Limits.Pids > 0 && e.Limits.Pids <= int64(e.Limits.NProc) && res.Limit != rt.LimitPids {
		return fmt.Errorf("the fork bomb met the pids limit, but the result names limit %q", res.Limit)
	}
	if err := e.survivors(); err != nil {
		return err
	}
	return stillServing(ctx, e)
}

func caseMemoryBomb(ctx context.Context, e *Env) error {
	if e.Limits.Memory <= 0 {
		return fmt.Errorf("%w: no memory limit is configured (--sandbox-memory 0)", errSkip)
	}
	mib := int(e.Limits.Memory>>20) * 2
	res, err := e.call(ctx, 60*time.Second, 1<<16, "membomb", strconv.Itoa(mib))
	if err != nil {
		return err
	}
	if strings.Contains(string(res.Output), fmt.Sprintf("all %d MiB allocated", mib)) {
		return fmt.Errorf("%d MiB allocated under a %d MiB limit", mib, e.Limits.Memory>>20)
	}
	if res.ExitCode != 128+9 || res.TimedOut {
		return fmt.Errorf("the memory bomb ended with exit %d (timed out %v), not an OOM kill (137)", res.ExitCode, res.TimedOut)
	}
	if e.ownCgroup() && res.Limit != rt.LimitMemory {
		return fmt.Errorf("the memory bomb was OOM-killed, but the result names limit %q", res.Limit)
	}
	return stillServing(ctx, e)
}

// ownCgroup reports whether the calls run in toolgate's own per-call
// cgroup (the bwrap backend's), which the result reads the limits
// reached from; an OCI runtime makes its container's own.
func (e *Env) ownCgroup() bool { return strings.HasPrefix(e.Backend, "bwrap") }

func caseFlood(ctx context.Context, e *Env) error {
	before := vmHWM()
	res, err := e.call(ctx, 120*time.Second, 1<<20, "flood", strconv.Itoa(1<<30))
	if err != nil {
		return err
	}
	if len(res.Output) != 1<<20 || !res.Truncated || res.OutputBytes != 1<<30 || res.ExitCode != 0 {
		return fmt.Errorf("kept %d of %d bytes, truncated %v, exit %d", len(res.Output), res.OutputBytes, res.Truncated, res.ExitCode)
	}
	if grew := vmHWM() - before; grew > 32<<20 {
		return fmt.Errorf("the server's peak RSS grew by %d MiB for a 1 GB flood", grew>>20)
	}
	return nil
}

// vmHWM is this process's peak RSS in bytes.
func vmHWM() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n << 10
}

func caseTimeout(ctx context.Context, e *Env) error {
	start := time.Now()
	res, err := e.call(ctx, 2*time.Second, 4096, "ignoreterm")
	if err != nil {
		return err
	}
	if !res.TimedOut || res.Limit != rt.LimitTimeout {
		return fmt.Errorf("not timed out: exit %d, limit %q", res.ExitCode, res.Limit)
	}
	if d := time.Since(start); d > 5*time.Second {
		return fmt.Errorf("a 2 s timeout took %s", d)
	}
	return e.survivors()
}

func caseDaemon(ctx context.Context, e *Env) error {
	start := time.Now()
	if _, err := e.call(ctx, 20*time.Second, 4096, "exit", "0"); err != nil {
		return err
	}
	trivial := time.Since(start)
	start = time.Now()
	res, err := e.call(ctx, 30*time.Second, 4096, "daemon")
	if err != nil {
		return err
	}
	// Loose on purpose (shared, loaded machines): a daemon that held the
	// call would hold it for the grandchild's 60 s, or the call's timeout.
	if d := time.Since(start); d > 3*trivial+rt.DrainGrace+time.Second {
		return fmt.Errorf("the daemon delayed the call: %s (a trivial call: %s)", d, trivial)
	}
	if err := want(res.Output, "parent exiting"); err != nil {
		return err
	}
	return e.survivors()
}

func caseKillAll(ctx context.Context, e *Env) error {
	if _, err := e.call(ctx, 20*time.Second, 4096, "killall"); err != nil {
		return err
	}
	// Where toolgate's shim is the sandbox's PID 1 and the tool its child
	// (a prepared sandbox's, an egress sandbox's), no signal the tool
	// sends it ends the call before the tool's own answer.
	res, err := e.call(ctx, 20*time.Second, 4096, "signal-shim")
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || !strings.Contains(string(res.Output), "signals to the shim: ") {
		return fmt.Errorf("a tool that signalled PID 1 did not get its own answer: exit %d, %q", res.ExitCode, clip(res.Output))
	}
	return stillServing(ctx, e)
}

// noSignalIgnored fails unless the signals the probe's report says it
// started with ignored ("signals ignored: ...", probes.SignalsIgnored) are
// among those this process started with ignored: a disposition a
// sandbox's shim set for itself must not reach the tool (an ignored
// SIGTERM or SIGPIPE survives exec, and changes what a tool does).
func noSignalIgnored(out []byte) error {
	m := regexp.MustCompile(`(?m)^signals ignored: (.*)$`).FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("no ignored-signals line in the probe's report:\n%s", clip(out))
	}
	own := strings.Fields(probes.SignalsIgnored())
	var extra []string
	for sig := range strings.FieldsSeq(string(m[1])) {
		if sig != "none" && !slices.Contains(own, sig) {
			extra = append(extra, sig)
		}
	}
	if len(extra) > 0 {
		return fmt.Errorf("the tool started with signals %v ignored, which the server does not ignore (%v)", extra, own)
	}
	return nil
}

// survivors fails if a process of this battery run is alive on the host
// shortly after its call returned (found by the tag on its command line).
func (e *Env) survivors() error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		alive := e.alive()
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes survived their call: %v", alive)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *Env) alive() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, en := range entries {
		if _, err := strconv.Atoi(en.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + en.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(cmd), e.tag) {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + en.Name() + "/stat")
		if f := strings.Fields(string(stat)); len(f) > 2 && f[2] == "Z" {
			continue
		}
		out = append(out, en.Name())
	}
	return out
}
