package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/cgroup"
)

// bench is one run of the benchmark.
type bench struct {
	common
	calls int
	warm  int
	// pace is the least time from the end of one per-call measurement to
	// the start of the next, as an agent's calls are apart.
	pace        time.Duration
	starts      int
	floodCalls  int
	rssCalls    int
	sections    []string
	ociRuntimes []string
	out         string
	doc         string // the page whose benchmark section the run writes
	srt         string
	srtSettings string
	node        string
	commands    string
	podmanImage string
	podmanNote  string
	baseline    string
	// ws is the built-in workspace, made once a run (builtinWorkspace).
	ws    string
	wsErr error
	// egressAddr is the bench's own HTTP server on 127.0.0.1, the one
	// destination of the egress tools.
	egressAddr string
	stderr     io.Writer
	log        io.WriteCloser

	res Results
}

// Results is everything one run measured: bench.json.
type Results struct {
	Machine map[string]string `json:"machine"`
	Started time.Time         `json:"started"`
	Seconds float64           `json:"seconds"`
	// PaceMS is how far apart the per-call rounds' calls were (-pace).
	PaceMS float64 `json:"pace_ms"`
	Rows   []Row   `json:"per_call"`
	// Breakdown is the pool-off bwrap call, step by step (breakdown).
	Breakdown []Step `json:"bwrap_breakdown,omitempty"`
	// PoolBreakdown is the pool-on bwrap and runc calls, step by step
	// (poolBreakdown).
	PoolBreakdown []Step       `json:"pool_breakdown,omitempty"`
	Throughput    []Throughput `json:"throughput"`
	Pool          []PoolCost   `json:"pool_idle_cost"`
	Startup       []Startup    `json:"startup"`
	Flood         []Flood      `json:"flood"`
	RSS           []RSS        `json:"rss"`
	Targets       []Target     `json:"targets"`
}

func runBench(args []string, stdout, stderr io.Writer) int {
	b := &bench{stderr: stderr}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b.register(fs)
	fs.IntVar(&b.calls, "calls", 200, "measured calls per path")
	fs.IntVar(&b.warm, "warm", 10, "unmeasured warm-up calls per path")
	fs.DurationVar(&b.pace, "pace", 40*time.Millisecond, "per-call rounds: the least time from the end of one call to the start of the next, untimed (an agent's calls are about 40 ms apart); 0: back to back")
	fs.IntVar(&b.starts, "starts", 200, "server starts per start-up figure")
	fs.IntVar(&b.floodCalls, "flood-calls", 20, "1 GB flood calls per path")
	fs.IntVar(&b.rssCalls, "rss-calls", 5000, "calls of the RSS run")
	var sections, runtimes string
	fs.StringVar(&sections, "only", "", "comma list of sections to run: floors,toolgate,tracing,peers,throughput,pool,startup,flood,rss (default all)")
	fs.StringVar(&runtimes, "oci-runtimes", "runc,crun,runsc", "OCI runtimes to measure through toolgate")
	fs.StringVar(&b.out, "out", "", "directory for bench.md and bench.json (default CACHE/results)")
	fs.StringVar(&b.doc, "doc", "", "also write the figures to this page's benchmark section (docs/performance.md), after a full run only")
	fs.StringVar(&b.srt, "srt", "", "srt (@anthropic-ai/sandbox-runtime); empty skips it")
	fs.StringVar(&b.srtSettings, "srt-settings", "", "srt settings file")
	fs.StringVar(&b.node, "node", "node", "node, for mcp-server-commands")
	fs.StringVar(&b.commands, "commands", "", "mcp-server-commands' build/index.js; empty skips it")
	fs.StringVar(&b.podmanImage, "podman-image", "", "image with the probe for podman run; empty skips it")
	fs.StringVar(&b.podmanNote, "podman-note", "", "how podman was set up, for the table")
	fs.StringVar(&b.baseline, "baseline", "", "a toolgate built from an earlier commit (toolgate-shim next to it): its direct, bwrap and oci/runc paths are measured in the same rounds, for before/after figures")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	b.sections, b.ociRuntimes = splitList(sections), splitList(runtimes)
	if err := b.setup(); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	if b.out == "" {
		b.out = filepath.Join(b.cache, "results")
	}
	b.log = logFile(b.logPath)
	defer b.log.Close()
	if b.pace < 0 {
		fmt.Fprintf(stderr, "bench: -pace %s: want 0 or more\n", b.pace)
		return 2
	}
	b.res.Started = time.Now().UTC()
	b.res.PaceMS = ms(b.pace)
	b.res.Machine = machine(b.toolgate)

	stopTarget, err := b.startEgressTarget()
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	defer stopTarget()
	conf, err := b.writeConf("bench.conf", b.benchConf())
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	for _, s := range []struct {
		name string
		run  func(conf string)
	}{
		{"percall", b.perCall},
		{"throughput", b.throughput},
		{"pool", b.poolCost},
		{"startup", b.startup},
		{"flood", b.flood},
		{"rss", b.rss},
	} {
		if want(b.sections, s.name) || s.name == "percall" && (want(b.sections, "floors") || want(b.sections, "toolgate") || want(b.sections, "tracing") || want(b.sections, "peers")) {
			logf(stderr, "== %s", s.name)
			s.run(conf)
		}
	}
	b.conclude()
	b.res.Seconds = time.Since(b.res.Started).Seconds()

	md := b.markdown()
	fmt.Fprint(stdout, md)
	if err := b.write(md, sections); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	return 0
}

// write puts the run's report in the results directory (bench.md,
// bench.json) and, after a full run, in the -doc page.
func (b *bench) write(md, sections string) error {
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(b.res, "", "  ")
	for name, data := range map[string][]byte{"bench.md": []byte(md), "bench.json": append(js, '\n')} {
		if err := os.WriteFile(filepath.Join(b.out, name), data, 0o644); err != nil {
			return err
		}
	}
	logf(b.stderr, "wrote %s and %s", filepath.Join(b.out, "bench.md"), filepath.Join(b.out, "bench.json"))
	switch {
	case b.doc == "":
	case len(b.sections) > 0:
		logf(b.stderr, "not writing %s: a partial run (-only %s)", b.doc, sections)
	default:
		if err := writeDoc(b.doc, docRun, md); err != nil {
			return err
		}
		logf(b.stderr, "wrote %s", b.doc)
	}
	return nil
}

// conclude computes, from the figures measured, the targets and the
// breakdowns.
func (b *bench) conclude() {
	b.res.Targets = b.targets()
	b.res.Breakdown = breakdown(b.res.Rows)
	b.res.PoolBreakdown = poolBreakdown(b.res.Rows)
}

// benchConf is the tools.conf of the toolgate paths.
func (b *bench) benchConf() string {
	return fmt.Sprintf(`# toolgate bench
tool rd %[1]s read 60 65536 off %[2]s -- echo hello
tool ts %[1]s test 60 65536 on %[2]s -- echo hello
tool flood %[1]s read 60 1048576 off %[2]s -- flood 1073741824
tool tflood %[1]s test 60 1048576 on %[2]s -- flood 1073741824
tool tse %[1]s test 60 65536 on %[2]s -- echo hello
egress tse %[3]s
tool tsg %[1]s test 60 65536 on %[2]s -- egress connects:%[4]d:%[3]s
egress tsg %[3]s
`, b.probe, b.work, b.egressAddr, egressConns)
}

// egressConns is how many connections the tsg tool makes through its
// proxy per call: the per-connection cost is the difference to tse over
// this many.
const egressConns = 20

// startEgressTarget starts the egress tools' destination: an HTTP server
// on 127.0.0.1 (a CONNECT to it is answered 200 by the proxy once dialled).
func (b *bench) startEgressTarget() (func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("egress target: %w", err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})}
	go func() { _ = srv.Serve(l) }()
	b.egressAddr = l.Addr().String()
	return func() { srv.Close() }, nil
}

func (b *bench) add(r Row) {
	if r.Skipped != "" {
		logf(b.stderr, "%s / %s: skipped: %s", r.Group, r.Name, r.Skipped)
	} else {
		logf(b.stderr, "%s / %s: median %s ms, p99 %s ms (%d calls)", r.Group, r.Name, fmtMS(r.MedianMS), fmtMS(r.P99MS), r.Calls)
	}
	b.res.Rows = append(b.res.Rows, r)
}

// row returns the measured row named name, if any.
func (b *bench) row(name string) (Row, bool) { return findRow(b.res.Rows, name) }

// path is one per-call path of the table: call runs one call and checks
// its answer.
type path struct {
	group, name, note string
	call              func() error
	close             func()
	d                 sample
	err               error
	// files, when set, gives an execPath's process its ExtraFiles.
	files func() (*os.File, error)
	// settle, when set, runs after each call, untimed: a pool-on path
	// waits there until its server has prepared the next sandbox, so
	// that the preparation does not fall on the next path's call.
	settle func()
	// teardown, when set, runs after each call and its settle, untimed
	// in the call's figure: it gives back what the call held (its
	// cgroups), after the answer as toolgate does. Its own time is the
	// figure of side, when set: a row of its own after this one.
	teardown func() error
	side     *path
}

// perCall measures every per-call path in rounds, one call of each per
// round, so that a shared machine's load falls on all of them alike and
// the ratios stay fair.
func (b *bench) perCall(conf string) {
	var paths []*path
	add := func(p *path, err error) {
		if err != nil {
			p.err = err
		}
		paths = append(paths, p)
	}
	if want(b.sections, "floors") {
		add(b.execPath("floor", "fork+exec from Go", "os/exec, one pipe for stdout+stderr", b.toolArgv(), b.work, nil, rtEnv()), nil)
		add(b.startPath(minimalStartRow, "e2e/bench/minimal: a static Go binary whose main does nothing (exit 0)",
			filepath.Join(filepath.Dir(b.toolgate), "minimal"), 0))
		add(b.startPath(shimStartRow, "toolgate-shim with no shim argument: the Go runtime's start, the shim's init, its refusal (exit 2)",
			b.shim, 2))
		// The pool-off bwrap call, one step added per row (breakdown).
		bare, err := b.bwrapArgv(withoutSeccomp, withoutInitShim)
		add(b.execPath("floor", bwrapBareRow, "the same argv with the policy's seccomp off and the tool exec'd by bwrap itself, not through the init shim (no rlimits; bwrap's PWD is kept): bwrap's own namespaces and mounts", bare, "/", sandboxAttr(), rtEnv()), err)
		noSeccomp, err := b.bwrapArgv(withoutSeccomp)
		add(b.execPath("floor", bwrapNoSeccompRow, "the backend's argv with the policy's seccomp off (no --seccomp): the init shim inside, no filter", noSeccomp, "/", sandboxAttr(), rtEnv()), err)
		argv, err := b.bwrapArgv()
		raw := b.execPath("floor", rawBwrapRow, "runtime/bwrap.Args argv (init shim inside, seccomp filter) as uid 65534; no enter shim, no cgroup", argv, "/", sandboxAttr(), rtEnv())
		raw.files = seccompFile
		add(raw, err)
		cg := cgroup.Setup()
		defer cg.Close() // after every path's own close
		if err == nil {
			for _, which := range []enterCgroups{enterNoCgroup, enterV2Group, enterCallGroups} {
				add(b.enterPath(argv, cg, which))
			}
		}
		add(b.cgroupPath(cg))
		b.inProcessPaths(cg, add)
		add(b.runcPath())
		add(b.runcOwnBundlePath(conf))
		add(b.runcStartPath(conf, false))
		add(b.runcStartPath(conf, true))
		add(b.gitHostPath())
	}
	if want(b.sections, "toolgate") {
		const g = "toolgate (MCP stdio)"
		s, err := b.sessionFor(conf, "bwrap")
		add(b.mcpPath(s, g, "direct (read tool)", "per-call cgroup2 group (CLONE_INTO_CGROUP, cgroup.kill)", "rd", nil), err)
		add(b.mcpPath(s, g, "bwrap", "pool off: the full bwrap policy made on the call's path; host ids of its own; the enter shim (v1 cgroup joins on a hybrid host, the uid, a new session keyring); rlimits set inside; the cgroups and ids given back after the answer", "ts", nil), err)
		add(b.mcpPath(s, g, "bwrap + egress", "the same tool with an egress line: a proxy per call, the shim as PID 1 bridging 127.0.0.1:3128", "tse", nil), err)
		add(b.mcpPathWant(s, g, egressConnsRow("bwrap"), "the egress tool making 20 CONNECTs in a row through its proxy (each dialled to a server on 127.0.0.1)", "tsg", nil, fmt.Sprintf("200=%d", egressConns)), err)
		s, err = b.sessionFor(conf, "bwrap"+poolSuffix)
		add(pooled(b.mcpPath(s, g, pathName("bwrap"+poolSuffix), "--sandbox-pool 1: the same sandbox prepared ahead of the call (cgroups joined, standby shim waiting); the call passes its pipe and the shim execs the tool; the next is prepared after the call", "ts", nil), s), err)
		for _, name := range b.ociRuntimes {
			s, err := b.sessionFor(conf, "oci/"+name)
			add(b.mcpPath(s, g, "oci/"+name, "pool off: generated spec: seccomp, pids+memory cgroup, rlimits, uid 65534, masked paths; `"+name+" run`", "ts", nil), err)
			if name == "runc" {
				add(b.mcpPath(s, g, "oci/runc + egress", "the same tool with an egress line", "tse", nil), err)
				add(b.mcpPathWant(s, g, egressConnsRow("oci/runc"), "20 CONNECTs through the proxy", "tsg", nil, fmt.Sprintf("200=%d", egressConns)), err)
			}
			s, err = b.sessionFor(conf, "oci/"+name+poolSuffix)
			add(pooled(b.mcpPath(s, g, pathName("oci/"+name+poolSuffix), "--sandbox-pool 1: the same spec, `"+name+" create` ahead of the call; the call runs `"+name+" start`", "ts", nil), s), err)
		}
		b.builtinPaths(conf, add)
		b.httpPaths(conf, add)
		if b.baseline != "" {
			const g = "toolgate before this change (same rounds)"
			s, err := dial([]string{b.baseline, "serve", "--conf", conf}, os.Environ(), b.log)
			add(b.mcpPath(s, g, "before: direct (read tool)", "", "rd", nil), err)
			add(b.mcpPath(s, g, "before: bwrap", "", "ts", nil), err)
			s, err = dial([]string{b.baseline, "serve", "--conf", conf, "--backend", "oci", "--oci-runtime", "runc"}, os.Environ(), b.log)
			add(b.mcpPath(s, g, "before: oci/runc", "", "ts", nil), err)
		}
	}
	if want(b.sections, "tracing") {
		b.tracingPaths(conf, add)
	}
	if want(b.sections, "peers") {
		b.peerPaths(add)
	}
	// Each round runs every path once, in a fresh random order: a call
	// pays for what its predecessor left the kernel to do (a container's
	// network namespace is torn down asynchronously, a memory cgroup is
	// offlined later), and only a shuffled order spreads that evenly.
	//
	// The calls are paced (-pace) as an agent's are: the next call, of
	// whichever path, starts pace after this one ended at the earliest,
	// what settle and teardown waited counting towards it. What a call
	// leaves to finish after its answer (a cgroup's removal, a pool's
	// next sandbox) then has an agent's time to do it in, on every path
	// alike.
	rng := rand.New(rand.NewPCG(7, 7))
	order := slices.Clone(paths)
	for i := range b.warm + b.calls {
		rng.Shuffle(len(order), func(x, y int) { order[x], order[y] = order[y], order[x] })
		for _, p := range order {
			if p.err != nil {
				continue
			}
			t0 := time.Now()
			err := p.call()
			el := time.Since(t0)
			if err != nil {
				p.err = fmt.Errorf("call %d: %w", i, err)
				continue
			}
			if i >= b.warm {
				p.d = append(p.d, el)
			}
			if p.settle != nil {
				p.settle()
			}
			if p.teardown != nil {
				t1 := time.Now()
				if err := p.teardown(); err != nil {
					p.err = fmt.Errorf("call %d: teardown: %w", i, err)
					continue
				}
				if p.side != nil && i >= b.warm {
					p.side.d = append(p.side.d, time.Since(t1))
				}
			}
			time.Sleep(time.Until(t0.Add(el + b.pace)))
		}
		if (i+1)%50 == 0 {
			logf(b.stderr, "per-call: %d/%d rounds", i+1, b.warm+b.calls)
		}
	}
	for _, p := range paths {
		if p.close != nil {
			p.close()
		}
		b.addSample(p.group, p.name, p.note, p.d, p.err)
		if p.side != nil {
			b.addSample(p.side.group, p.side.name, p.side.note, p.side.d, cmp.Or(p.err, p.side.err))
		}
	}
}

// pooled makes p wait, after each call and untimed, until s's pool has
// prepared the next sandbox.
func pooled(p *path, s *session) *path {
	if s != nil {
		p.settle = func() { _ = waitPoolReady(s, 1, 60*time.Second) }
	}
	return p
}

func rtEnv() []string { return append([]string(nil), rt.Env...) }

func (b *bench) execPath(group, name, note string, argv []string, dir string, attr *syscall.SysProcAttr, env []string) *path {
	p := &path{group: group, name: name, note: note}
	p.call = func() error {
		var out bytes.Buffer
		cmd := &exec.Cmd{Path: argv[0], Args: argv, Env: env, Dir: dir, Stdout: &out, Stderr: &out, SysProcAttr: attr}
		if p.files != nil {
			f, err := p.files()
			if err != nil {
				return err
			}
			defer f.Close()
			cmd.ExtraFiles = []*os.File{f}
		}
		err := cmd.Run()
		if err != nil || !strings.Contains(out.String(), "hello") {
			return fmt.Errorf("%s: %w: %s", filepath.Base(argv[0]), err, firstLine(out.String()))
		}
		return nil
	}
	return p
}

// The rows of a program's start, fork+exec+exit: the shim starts on
// every sandboxed call that takes no prepared sandbox, so its start is held
// to a small multiple of a Go program's that does nothing.
const (
	minimalStartRow = "start of a minimal static Go binary"
	shimStartRow    = "start of toolgate-shim"
)

// startPath measures fork, exec and exit of bin run with no arguments,
// which must exit with code.
func (b *bench) startPath(name, note, bin string, code int) (*path, error) {
	p := &path{group: "floor", name: name, note: note}
	if _, err := os.Stat(bin); err != nil {
		return p, err
	}
	p.call = func() error {
		err := (&exec.Cmd{Path: bin, Args: []string{bin}, Env: rtEnv(), Dir: "/"}).Run()
		var exit *exec.ExitError
		switch {
		case err == nil && code == 0:
			return nil
		case errors.As(err, &exit) && exit.ExitCode() == code:
			return nil
		}
		return fmt.Errorf("%s: %w, want exit %d", filepath.Base(bin), err, code)
	}
	return p, nil
}

// egressConnsRow names the row of the egress tool that makes
// egressConns connections.
func egressConnsRow(backend string) string {
	return fmt.Sprintf("%s + egress, %d connections", backend, egressConns)
}

func (b *bench) mcpPath(s *session, group, name, note, tool string, args map[string]any) *path {
	return b.mcpPathWant(s, group, name, note, tool, args, "hello")
}

// mcpPathWant is mcpPath of a call whose answer holds want.
func (b *bench) mcpPathWant(s *session, group, name, note, tool string, args map[string]any, want string) *path {
	p := &path{group: group, name: name, note: note}
	if s == nil {
		return p
	}
	p.close = s.close
	p.call = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		res, text, err := s.call(ctx, tool, args)
		if err != nil {
			return err
		}
		if res.IsError || !strings.Contains(text, want) {
			return fmt.Errorf("isError=%v: %s", res.IsError, firstLine(text))
		}
		return nil
	}
	return p
}

func (b *bench) addSample(group, name, note string, d sample, err error) {
	if err != nil {
		b.add(skippedRow(group, name, err))
		return
	}
	b.add(newRow(group, name, note, d))
}

// builtinPaths are calls of the built-ins: git_diff_input and outline,
// whose helpers (git, ctags) run in the bwrap sandbox, beside repo_chunks,
// which starts no process; git_diff_input also with the pool off; and the
// same calls of the baseline.
func (b *bench) builtinPaths(conf string, add func(*path, error)) {
	ws, wsErr := b.builtinWorkspace()
	gitNote := fmt.Sprintf("HEAD~1..HEAD (%d changed files), listing the chunks (no index: an agent's first call); ", diffFiles)
	calls := []struct {
		name, note, tool string
		pooled           bool // pool on (the server's default)
	}{
		{"built-in repo_chunks", "no helper: reads the workspace itself", "repo_chunks", false},
		{builtinGitDiffRow, gitNote + "3 git runs (2 rev-parse, diff) in one sandbox prepared ahead of the call (a helper session; pool on, the default)", "git_diff_input", true},
		{"built-in outline", "one ctags run in the bwrap sandbox, the file on stdin; pool on (the default): its sandbox is prepared ahead of the call (its argv is fixed)", "outline", true},
	}
	args := map[string]map[string]any{
		"repo_chunks":    {"index": 1},
		"git_diff_input": {"target": "HEAD~1..HEAD"},
		"outline":        {"path": "hello.go"},
	}
	want := map[string]string{
		"repo_chunks":    "hello",
		"git_diff_input": fmt.Sprintf("of %d files, digest", diffFiles),
		"outline":        "hello",
	}
	servers := []struct{ group, prefix, bin string }{{"toolgate (MCP stdio)", "", b.toolgate}}
	if b.baseline != "" {
		servers = append(servers, struct{ group, prefix, bin string }{"toolgate before this change (same rounds)", "before: ", b.baseline})
	}
	for _, srv := range servers {
		s, err := (*session)(nil), wsErr
		if err == nil {
			s, err = dial([]string{srv.bin, "serve", "--conf", conf, "--root", ws}, os.Environ(), b.log)
		}
		for _, c := range calls {
			note := c.note
			if srv.prefix != "" {
				note = "" // the baseline's own way, whatever it was
			}
			p := b.mcpPathWant(s, srv.group, srv.prefix+c.name, note, c.tool, args[c.tool], want[c.tool])
			if c.pooled && srv.prefix == "" {
				p = pooled(p, s)
			}
			add(p, err)
		}
		if srv.prefix == "" {
			s, err := (*session)(nil), wsErr
			if err == nil {
				s, err = dial([]string{srv.bin, "serve", "--conf", conf, "--root", ws, "--sandbox-pool", "0"}, os.Environ(), b.log)
			}
			note := gitNote + "--sandbox-pool 0: the helper session's sandbox made on the call's path, its 3 git runs in it"
			add(b.mcpPathWant(s, srv.group, builtinGitDiffOffRow, note, "git_diff_input", args["git_diff_input"], want["git_diff_input"]), err)
		}
	}
}

// diffFiles is how many files the built-in workspace's last commit
// changes: what git_diff_input diffs.
const diffFiles = 10

// builtinWorkspace is a git repository of two commits, made again on
// each run: the first adds hello.go (for outline) and diffFiles Go files
// of 60 lines, the second changes 3 lines in the middle of each of them
// (for git_diff_input of HEAD~1..HEAD).
func (b *bench) builtinWorkspace() (string, error) {
	if b.ws != "" || b.wsErr != nil {
		return b.ws, b.wsErr
	}
	b.ws, b.wsErr = b.makeBuiltinWorkspace()
	return b.ws, b.wsErr
}

func (b *bench) makeBuiltinWorkspace() (string, error) {
	ws := filepath.Join(b.cache, "builtin-ws")
	_ = os.RemoveAll(ws)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return "", err
	}
	// The path toolgate works in (--root is made canonical).
	ws, err := filepath.EvalSymlinks(ws)
	if err != nil {
		return "", err
	}
	git := func(args ...string) error {
		cmd := exec.Command("git", append([]string{"-c", "user.name=bench", "-c", "user.email=bench@invalid", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir, cmd.Env = ws, []string{"PATH=" + rt.DefaultPath, "GIT_CONFIG_NOSYSTEM=1", "HOME=" + ws}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %w: %s", args[0], err, out)
		}
		return nil
	}
	write := func(name, text string) error { return os.WriteFile(filepath.Join(ws, name), []byte(text), 0o644) }
	// source is file n of the diffed ones, at version v (1 or 2): 60
	// lines, of which lines 29 to 31 differ between the versions.
	source := func(n, v int) string {
		var w strings.Builder
		fmt.Fprintf(&w, "package hello\n\n// F%02d is function %d of the bench's workspace.\nfunc F%02d(x int) int {\n", n, n, n)
		for l := 5; l < 60; l++ {
			if v == 2 && l >= 29 && l <= 31 {
				fmt.Fprintf(&w, "\tx = x*%d + %d // changed\n", l, n)
				continue
			}
			fmt.Fprintf(&w, "\tx += %d\n", l*n)
		}
		w.WriteString("\treturn x\n}\n")
		return w.String()
	}
	steps := []func() error{
		func() error { return git("init", "-q") },
		func() error {
			return write("hello.go", "package hello\n\n// Hello says hello.\nfunc Hello() string { return \"hello\" }\n")
		},
	}
	for n := range diffFiles {
		steps = append(steps, func() error { return write(fmt.Sprintf("f%02d.go", n), source(n, 1)) })
	}
	steps = append(steps,
		func() error { return git("add", ".") },
		func() error { return git("commit", "-q", "-m", "one") },
	)
	for n := range diffFiles {
		steps = append(steps, func() error { return write(fmt.Sprintf("f%02d.go", n), source(n, 2)) })
	}
	steps = append(steps,
		func() error { return git("add", ".") },
		func() error { return git("commit", "-q", "-m", "two") },
	)
	for _, step := range steps {
		if err := step(); err != nil {
			return "", fmt.Errorf("built-in workspace: %w", err)
		}
	}
	return ws, nil
}

// sessionFor starts a toolgate server for sandbox path p.
func (b *bench) sessionFor(conf, p string) (*session, error) {
	return dial(b.serverArgv(conf, backendFlags(p)...), os.Environ(), b.log)
}

func (b *bench) peerPaths(add func(*path, error)) {
	const group = "what operators use instead"
	if b.srt == "" {
		add(&path{group: group, name: "srt (sandbox-runtime)"}, errors.New("not installed (-srt)"))
	} else {
		argv := []string{b.srt}
		if b.srtSettings != "" {
			argv = append(argv, "--settings", b.srtSettings)
		}
		argv = append(argv, b.toolArgv()...)
		add(b.execPath(group, "srt (sandbox-runtime)", "bwrap + network proxies per call (node), same probe", argv, b.work, nil, peerEnv()), nil)
	}
	if b.commands == "" {
		add(&path{group: group, name: "mcp-server-commands (MCP stdio)"}, errors.New("not installed (-commands)"))
	} else {
		s, err := dial([]string{b.node, b.commands}, peerEnv(), b.log)
		args := map[string]any{"command": strings.Join(b.toolArgv(), " "), "workdir": b.work}
		add(b.mcpPath(s, group, "mcp-server-commands (MCP stdio)", "node child_process.exec through /bin/sh; no sandbox, no output cap", "run_command", args), err)
	}
	if b.podmanImage == "" {
		add(&path{group: group, name: "podman run --rm per call"}, errors.New("no image (-podman-image)"))
	} else {
		podman, err := exec.LookPath("podman")
		argv := []string{podman, "run", "--rm", "--network", "none", "-v", b.probe + ":/probe:ro", b.podmanImage, "/probe", "echo", "hello"}
		note := "--network none, " + b.podmanImage
		if b.podmanNote != "" {
			note += "; " + b.podmanNote
		}
		add(b.execPath(group, "podman run --rm per call", note, argv, b.work, nil, peerEnv()), err)
	}
}

// peerEnv is the environment of the peers: the bench's own (podman needs
// CONTAINERS_CONF, node needs PATH and HOME).
func peerEnv() []string { return os.Environ() }

func (b *bench) throughput(conf string) {
	// direct alone; then each sandbox path with the pool off and on, as a
	// pair: both servers are up at once and each concurrency level runs
	// off, on, off, on in quarters of its calls, so that the load of a
	// shared machine, which drifts over seconds, falls on both alike.
	b.throughputRows("direct", "rd", []string{"bwrap"}, conf)
	sandboxes := []string{"bwrap"}
	for _, name := range b.ociRuntimes {
		sandboxes = append(sandboxes, "oci/"+name)
	}
	for _, sb := range sandboxes {
		b.throughputRows(sb, "ts", []string{sb, sb + poolSuffix}, conf)
	}
	b.httpThroughputRows(conf)
}

// throughputRows measures tool through one server per backend path (one
// path, or the pool-off and pool-on paths of one sandbox), interleaved in
// quarters at each concurrency level, and adds a row per path and level.
func (b *bench) throughputRows(label, tool string, backends []string, conf string) {
	sessions := make([]*session, len(backends))
	names := make([]string, len(backends))
	for i, be := range backends {
		names[i] = pathName(be)
		if len(backends) == 1 {
			names[i] = label
		}
		s, err := b.sessionFor(conf, be)
		if err != nil {
			for _, o := range sessions[:i] {
				o.close()
			}
			for _, n := range names {
				b.res.Throughput = append(b.res.Throughput, Throughput{Path: n, Skipped: firstLine(err.Error())})
			}
			return
		}
		sessions[i] = s
	}
	defer func() {
		for _, s := range sessions {
			s.close()
		}
	}()
	pooled := func(i int) bool { return strings.HasSuffix(backends[i], poolSuffix) }
	settle := func() {
		for i, s := range sessions {
			if pooled(i) {
				// From a full pool, as a server is once it is up.
				_ = waitPoolReady(s, 1, 60*time.Second)
			}
		}
	}
	for _, conc := range []int{1, 8, 32} {
		total := max(b.calls, conc*25)
		rounds := 1
		if len(sessions) > 1 {
			rounds = 2
		}
		rows := make([]Throughput, len(sessions))
		samples := make([]sample, len(sessions))
		elapsed := make([]time.Duration, len(sessions))
		var befores []PoolCounts
		for _, s := range sessions {
			c, _ := poolCounters(s)
			befores = append(befores, c)
		}
		for i := range rows {
			rows[i] = Throughput{Path: names[i], Concurrency: conc}
		}
		for range rounds {
			for i, s := range sessions {
				settle()
				d, el, err := concurrentCalls(s, tool, conc, total/rounds)
				if err != nil && rows[i].Skipped == "" {
					rows[i].Skipped = firstLine(err.Error())
				}
				samples[i] = append(samples[i], d...)
				elapsed[i] += el
			}
		}
		for i, s := range sessions {
			t := rows[i]
			if t.Skipped == "" {
				d := samples[i]
				t.Calls = len(d)
				t.CallsPerSec = float64(len(d)) / elapsed[i].Seconds()
				t.MedianMS, t.P99MS = ms(d.median()), ms(d.p99())
				_, t.PeakRSSKiB = rss(s.pid())
				if after, ok := poolCounters(s); ok && pooled(i) {
					t.Pool = &PoolCounts{Hits: after.Hits - befores[i].Hits, Misses: after.Misses - befores[i].Misses}
				}
				logf(b.stderr, "throughput %s x%d: %.0f calls/s, median %s ms, p99 %s ms", t.Path, conc, t.CallsPerSec, fmtMS(t.MedianMS), fmtMS(t.P99MS))
			}
			b.res.Throughput = append(b.res.Throughput, t)
		}
	}
}

// concurrentCalls makes total calls of tool from conc concurrent callers
// on one session.
func concurrentCalls(s *session, tool string, conc, total int) (sample, time.Duration, error) {
	sessions := make([]*session, conc)
	for i := range sessions {
		sessions[i] = s
	}
	return concurrentSessions(sessions, tool, total)
}

// concurrentSessions makes total calls of tool, one caller per session
// (which may repeat), all at once.
func concurrentSessions(sessions []*session, tool string, total int) (sample, time.Duration, error) {
	var mu sync.Mutex
	var d sample
	var first error
	next := make(chan struct{}, total)
	for range total {
		next <- struct{}{}
	}
	close(next)
	var wg sync.WaitGroup
	t0 := time.Now()
	for _, s := range sessions {
		wg.Go(func() {
			for range next {
				ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
				c0 := time.Now()
				res, text, err := s.call(ctx, tool, nil)
				el := time.Since(c0)
				cancel()
				mu.Lock()
				if err == nil && (res.IsError || !strings.Contains(text, "hello")) {
					err = fmt.Errorf("isError: %s", firstLine(text))
				}
				if err != nil && first == nil {
					first = err
				}
				d = append(d, el)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return d, time.Since(t0), first
}

func (b *bench) startup(string) {
	big := strings.Builder{}
	big.WriteString("# 500 tools\n")
	for i := range 500 {
		fmt.Fprintf(&big, "tool t%03d %s read 60 65536 off %s -- echo hello %d\n", i, b.probe, b.work, i)
	}
	for _, backend := range []string{"bwrap", "oci/runc"} {
		for _, c := range []struct {
			name, text string
			tools      int
		}{{"empty", "# no tools\n", 0}, {"500 tools", big.String(), 500}} {
			b.res.Startup = append(b.res.Startup, b.startupOf(backend, c.name, c.text, c.tools))
		}
	}
}

// startupOf starts toolgate with conf text and backend, over and over,
// timing exec → initialize answer and exec → the answer of a tools/list
// sent right after it, as the bytes arrive on the server's stdout (a
// client's own decoding of a 500-tool list is not toolgate's time).
func (b *bench) startupOf(backend, name, text string, tools int) Startup {
	st := Startup{Conf: name, Tools: tools, Backend: backend}
	path, err := b.writeConf("startup-"+strings.ReplaceAll(name, " ", "-")+".conf", text)
	var initd, listd sample
	for i := 0; err == nil && i < b.starts+min(b.warm, 5); i++ {
		var d [2]time.Duration
		d, err = startOnce(b.serverArgv(path, backendFlags(backend)...), tools, b.log)
		if err == nil && i >= min(b.warm, 5) {
			initd, listd = append(initd, d[0]), append(listd, d[1])
		}
	}
	if err != nil {
		st.Skipped = firstLine(err.Error())
		return st
	}
	st.Starts, st.MedianMS, st.P99MS = len(initd), ms(initd.median()), ms(initd.p99())
	st.ListMedianMS, st.ListP99MS = ms(listd.median()), ms(listd.p99())
	logf(b.stderr, "start-up %s, %s: initialize median %s ms, p99 %s ms; tools/list median %s ms, p99 %s ms", backend, name,
		fmtMS(st.MedianMS), fmtMS(st.P99MS), fmtMS(st.ListMedianMS), fmtMS(st.ListP99MS))
	return st
}

// startOnce runs argv, sends initialize, and once it is answered
// notifications/initialized and tools/list; it returns the time from exec
// to each answer's last byte, and checks that the list has tools tools at
// least.
func startOnce(argv []string, tools int, logw io.Writer) ([2]time.Duration, error) {
	var d [2]time.Duration
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = logw
	in, err := cmd.StdinPipe()
	if err != nil {
		return d, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return d, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return d, err
	}
	defer func() {
		in.Close()
		_ = cmd.Wait()
	}()
	r := bufio.NewReaderSize(out, 1<<20)
	ask := func(msg string, want int) ([]byte, error) {
		if _, err := io.WriteString(in, msg); err != nil {
			return nil, err
		}
		line, err := r.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("%s: no answer: %w", argv[0], err)
		}
		var m struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(line, &m); err != nil || m.ID != want || m.Result == nil {
			return nil, fmt.Errorf("%s: answer %.200q, want the result of request %d", argv[0], line, want)
		}
		return m.Result, nil
	}
	if _, err := ask(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"toolgate-bench","version":"1"}}}`+"\n", 1); err != nil {
		return d, err
	}
	d[0] = time.Since(start)
	res, err := ask(`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"+`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`+"\n", 2)
	if err != nil {
		return d, err
	}
	d[1] = time.Since(start)
	var list struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(res, &list); err != nil {
		return d, fmt.Errorf("tools/list: %w", err)
	}
	if len(list.Tools) < tools {
		return d, fmt.Errorf("tools/list listed %d tools, want at least %d", len(list.Tools), tools)
	}
	return d, nil
}

func (b *bench) flood(conf string) {
	type floodPath struct{ name, tool, bin string }
	paths := []floodPath{{"direct", "flood", b.toolgate}, {"bwrap", "tflood", b.toolgate}}
	if b.baseline != "" {
		paths = append(paths, floodPath{"before: direct", "flood", b.baseline}, floodPath{"before: bwrap", "tflood", b.baseline})
	}
	for _, p := range paths {
		f := Flood{Path: p.name}
		s, err := dial([]string{p.bin, "serve", "--conf", conf}, os.Environ(), b.log)
		if err == nil {
			var d sample
			cpu0 := cpuTime(s.pid())
			for range b.floodCalls {
				var res *toolResult
				t0 := time.Now()
				res, err = callStructured(s, p.tool)
				if err != nil {
					break
				}
				d = append(d, time.Since(t0))
				f.KeptBytes = res.OutputBytes - res.DroppedBytes
				f.OutputBytes = res.OutputBytes
				if !res.Truncated {
					err = fmt.Errorf("flood not truncated: %+v", res)
					break
				}
			}
			_, f.PeakRSSKiB = rss(s.pid())
			cpu := cpuTime(s.pid()) - cpu0
			s.close()
			if err == nil {
				f.Calls, f.MedianMS, f.P99MS = len(d), ms(d.median()), ms(d.p99())
				f.ServerCPUMS = ms(cpu / time.Duration(len(d)))
				logf(b.stderr, "flood %s: median %s ms, p99 %s ms, server peak RSS %d KiB, server CPU %s ms per call", p.name, fmtMS(f.MedianMS), fmtMS(f.P99MS), f.PeakRSSKiB, fmtMS(f.ServerCPUMS))
			}
		}
		if err != nil {
			f.Skipped = firstLine(err.Error())
		}
		b.res.Flood = append(b.res.Flood, f)
	}
}

// toolResult is the structuredContent of an external call.
type toolResult struct {
	ExitCode     int   `json:"exit_code"`
	Truncated    bool  `json:"truncated"`
	OutputBytes  int64 `json:"output_bytes"`
	DroppedBytes int64 `json:"dropped_bytes"`
}

func callStructured(s *session, tool string) (*toolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, text, err := s.call(ctx, tool, nil)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return nil, err
	}
	var out toolResult
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("structuredContent: %w: %s", err, firstLine(text))
	}
	return &out, nil
}

func (b *bench) rss(conf string) {
	r := RSS{Path: "direct and bwrap (pool on), alternating"}
	s, err := b.sessionFor(conf, "bwrap"+poolSuffix)
	if err == nil {
		time.Sleep(200 * time.Millisecond)
		r.IdleKiB, _ = rss(s.pid())
		for i := 0; i < b.rssCalls && err == nil; i++ {
			tool := "rd"
			if i%2 == 1 {
				tool = "ts"
			}
			_, err = s.timedCalls(tool, nil, "hello", 0, 1)
			if i+1 == 100 {
				r.After100, _ = rss(s.pid())
			}
		}
		r.After5000, r.PeakKiB = rss(s.pid())
		r.Calls = b.rssCalls
		r.ThreadsEnd, r.FDsEnd = threads(s.pid()), openFDs(s.pid())
		s.close()
	}
	if err != nil {
		r.Skipped = firstLine(err.Error())
	} else {
		logf(b.stderr, "rss: idle %d KiB, after 100 calls %d KiB, after %d calls %d KiB (peak %d KiB)", r.IdleKiB, r.After100, b.rssCalls, r.After5000, r.PeakKiB)
	}
	b.res.RSS = append(b.res.RSS, r)
}

// machine describes where the run happened.
func machine(toolgate string) map[string]string {
	m := map[string]string{"cpus": fmt.Sprint(runtime.NumCPU()), "go": runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m["kernel"] = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				m["os"] = strings.Trim(v, `"`)
			}
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				m["memory"] = fmt.Sprintf("%d GiB", (kib(v)+(1<<19))>>20)
			}
		}
	}
	if st, err := os.Stat("/sys/fs/cgroup/unified"); err == nil && st.IsDir() {
		m["cgroups"] = "hybrid (v1 controllers, cgroup2 at /sys/fs/cgroup/unified)"
	} else if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		m["cgroups"] = "cgroup2"
	}
	for name, argv := range map[string][]string{
		"bwrap":    {"bwrap", "--version"},
		"runc":     {"runc", "--version"},
		"crun":     {"crun", "--version"},
		"runsc":    {"runsc", "--version"},
		"podman":   {"podman", "--version"},
		"node":     {"node", "--version"},
		"toolgate": {toolgate, "version"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).Output(); err == nil {
			m[name] = firstLine(string(out))
		}
	}
	return m
}
