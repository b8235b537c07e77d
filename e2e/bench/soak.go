package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	rt "github.com/toolgate/toolgate/runtime"
)

// kind is one kind of soak call: which tool, and what answer it must get.
type kind struct {
	name   string
	tool   string
	weight int
	// cancel, when set, cancels the call this long after it started
	// (notifications/cancelled); the call must answer nothing.
	cancel time.Duration
	check  func(res *toolResult, isError bool, text string) error
}

func expectOK(want string) func(*toolResult, bool, string) error {
	return func(r *toolResult, isError bool, text string) error {
		if isError || r.ExitCode != 0 || !strings.Contains(text, want) {
			return fmt.Errorf("want success with %q, got isError=%v exit=%d: %s", want, isError, r.ExitCode, firstLine(text))
		}
		return nil
	}
}

func expectExit(code int) func(*toolResult, bool, string) error {
	return func(r *toolResult, isError bool, text string) error {
		if !isError || r.ExitCode != code {
			return fmt.Errorf("want isError exit %d, got isError=%v exit=%d: %s", code, isError, r.ExitCode, firstLine(text))
		}
		return nil
	}
}

func expectTruncated(r *toolResult, isError bool, text string) error {
	if isError || !r.Truncated || r.OutputBytes <= r.DroppedBytes {
		return fmt.Errorf("want a truncated success, got isError=%v %+v", isError, *r)
	}
	return nil
}

func expectTimeout(r *toolResult, isError bool, text string) error {
	if !isError || !strings.Contains(text, "[timeout]") {
		return fmt.Errorf("want a timeout, got isError=%v exit=%d: %s", isError, r.ExitCode, firstLine(text))
	}
	return nil
}

// soakKinds is the mix of one server: direct tools and the sandboxed ones
// of its backend.
func soakKinds(sandbox string) []kind {
	ks := []kind{
		{name: "direct ok", tool: "ok", weight: 30, check: expectOK("hello")},
		{name: "direct fail", tool: "fail", weight: 8, check: expectExit(3)},
		{name: "direct flood", tool: "flood", weight: 4, check: expectTruncated},
		{name: "direct daemon", tool: "daemon", weight: 2, check: expectOK("grandchild")},
		{name: "direct timeout", tool: "slow", weight: 1, check: expectTimeout},
		{name: "direct cancelled", tool: "sleep", weight: 3, cancel: 150 * time.Millisecond},
	}
	return append(ks,
		kind{name: sandbox + " ok", tool: "sok", weight: 30, check: expectOK("hello")},
		kind{name: sandbox + " fail", tool: "sfail", weight: 8, check: expectExit(3)},
		kind{name: sandbox + " flood", tool: "sflood", weight: 4, check: expectTruncated},
		kind{name: sandbox + " timeout", tool: "sslow", weight: 1, check: expectTimeout},
		kind{name: sandbox + " cancelled", tool: "ssleep", weight: 3, cancel: 300 * time.Millisecond},
	)
}

// soakTestTools is how many distinct sandboxes soakConf's test-class tools
// need (sok, sfail, sflood, and sslow with ssleep, whose argv and dir are
// the same: one template): with the pool on, one prepared sandbox each at
// rest.
const soakTestTools = 4

func (c *common) soakConf() string {
	return fmt.Sprintf(`# toolgate soak
tool ok %[1]s read 30 65536 off %[2]s -- echo hello
tool fail %[1]s read 30 65536 off %[2]s -- exit 3
tool flood %[1]s read 30 65536 off %[2]s -- flood 16777216
tool daemon %[1]s read 30 65536 off %[2]s -- daemon
tool slow %[1]s read 1 65536 off %[2]s -- sleep 30
tool sleep %[1]s read 30 65536 off %[2]s -- sleep 30
tool sok %[1]s test 30 65536 on %[2]s -- echo hello
tool sfail %[1]s test 30 65536 on %[2]s -- exit 3
tool sflood %[1]s test 30 65536 on %[2]s -- flood 16777216
tool sslow %[1]s test 1 65536 on %[2]s -- sleep 30
tool ssleep %[1]s test 30 65536 on %[2]s -- sleep 30
`, c.probe, c.work)
}

// snapshot is what a server holds at one moment.
type snapshot struct {
	FDs        int   `json:"fds"`
	Threads    int   `json:"threads"`
	RSSKiB     int64 `json:"rss_kib"`
	Children   int   `json:"children"`
	Zombies    int   `json:"zombies"`
	Containers int   `json:"containers"`
	Bundles    int   `json:"bundles"`
	Cgroups    int   `json:"cgroup_dirs"`
}

// Phase is one server of the soak.
type Phase struct {
	Backend  string         `json:"backend"`
	Calls    int            `json:"calls"`
	Seconds  float64        `json:"seconds"`
	ByKind   map[string]int `json:"by_kind"`
	Failures []string       `json:"failures,omitempty"`
	Before   snapshot       `json:"before"`
	After    snapshot       `json:"after"`
	Problems []string       `json:"problems,omitempty"`
	// Pool is the pool's state at the end of the calls (pool on).
	Pool *rt.PoolStatus `json:"pool,omitempty"`
	// Exit lists what was left of the server after it exited.
	Exit []string `json:"left_after_exit,omitempty"`
}

type soaker struct {
	common
	sess        *session // the phase's server
	calls, conc int
	ociRuntime  string
	pool        int
	stderr      io.Writer
	log         io.WriteCloser
}

func runSoak(args []string, stdout, stderr io.Writer) int {
	s := &soaker{stderr: stderr}
	var out string
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	s.register(fs)
	fs.IntVar(&s.calls, "calls", 10000, "mixed calls in all (SOAK_CALLS in scripts/soak.sh)")
	fs.IntVar(&s.conc, "concurrency", 8, "calls in flight")
	fs.StringVar(&s.ociRuntime, "oci-runtime", "runc", "runtime of the OCI server; empty skips it")
	fs.IntVar(&s.pool, "pool", 1, "--sandbox-pool of the servers (SOAK_POOL; 0: the pool off)")
	fs.StringVar(&out, "out", "", "directory for soak.md and soak.json (default CACHE/results)")
	doc := fs.String("doc", "", "also write the soak's figures to this page's soak section (docs/performance.md)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := s.setup(); err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		return 2
	}
	if out == "" {
		out = filepath.Join(s.cache, "results")
	}
	s.log = logFile(s.logPath)
	defer s.log.Close()
	conf, err := s.writeConf("soak.conf", s.soakConf())
	if err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		return 2
	}
	backends := []string{"bwrap"}
	if s.ociRuntime != "" {
		backends = append(backends, "oci/"+s.ociRuntime)
	}
	if s.pool > 0 {
		for i := range backends {
			backends[i] += poolSuffix
		}
	}
	var phases []Phase
	ok := true
	done := 0
	for i, b := range backends {
		n := s.calls * 7 / 10
		if len(backends) == 1 {
			n = s.calls
		}
		if i == len(backends)-1 {
			n = s.calls - done
		}
		done += n
		p := s.phase(conf, b, n)
		if len(p.Failures) > 0 || len(p.Problems) > 0 || len(p.Exit) > 0 {
			ok = false
		}
		phases = append(phases, p)
	}
	md := soakMarkdown(phases, s.conc)
	fmt.Fprint(stdout, md)
	if err := os.MkdirAll(out, 0o755); err == nil {
		js, _ := json.MarshalIndent(phases, "", "  ")
		_ = os.WriteFile(filepath.Join(out, "soak.json"), append(js, '\n'), 0o644)
		_ = os.WriteFile(filepath.Join(out, "soak.md"), []byte(md), 0o644)
	}
	if *doc != "" {
		if err := writeDoc(*doc, docSoak, md); err != nil {
			fmt.Fprintf(stderr, "soak: %v\n", err)
			return 1
		}
	}
	if !ok {
		fmt.Fprintln(stderr, "soak: FAILED: a call answered wrongly or the server did not return to its start values")
		return 1
	}
	fmt.Fprintln(stderr, "soak: every call answered as expected and the server returned to its start values")
	return 0
}

// phase soaks one server with n mixed calls.
func (s *soaker) phase(conf, backend string, n int) Phase {
	p := Phase{Backend: pathName(backend), ByKind: map[string]int{}}
	sandbox := pathName(backend)
	logf(s.stderr, "soak %s: %d calls, %d in flight", p.Backend, n, s.conc)
	flags := backendFlags(backend)
	if s.pool > 0 {
		flags = append(flags, "--sandbox-pool", strconv.Itoa(s.pool)) // the last one counts
	}
	sess, err := dial(s.serverArgv(conf, flags...), os.Environ(), s.log)
	if err != nil {
		p.Failures = append(p.Failures, "start: "+err.Error())
		return p
	}
	pid := sess.pid()
	closed := false
	defer func() {
		if !closed {
			sess.close()
		}
	}()
	s.sess = sess
	kinds := soakKinds(sandbox)
	// Warm-up: every kind a few times, so that what the server keeps for
	// good (Go runtime threads, buffers) exists before the first snapshot.
	var warm []kind
	for _, k := range kinds {
		for range s.conc {
			warm = append(warm, k)
		}
	}
	s.run(sess, warm, &Phase{ByKind: map[string]int{}})
	p.Before = s.snap(pid, backend, true)
	var seq []kind
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	for len(seq) < n {
		for _, k := range kinds {
			for range max(1, k.weight*n/total) {
				if len(seq) < n {
					seq = append(seq, k)
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
	t0 := time.Now()
	s.run(sess, seq, &p)
	p.Seconds = time.Since(t0).Seconds()
	p.Calls = len(seq)
	p.After = s.snap(pid, backend, true)
	p.Problems = compare(p.Before, p.After)
	if s.pool > 0 {
		if st, ok := poolStatus(sess); ok {
			p.Pool = &st
			p.Pool.Entries = nil
		}
	}
	// Then the server is stopped as a client stops it (stdin closed):
	// nothing of it may be left, prepared sandboxes included.
	sess.close()
	closed = true
	p.Exit = leftAfterExit(sess, pid, backend)
	logf(s.stderr, "soak %s: %d calls in %.0f s, %d wrong answers, %d problems, %d left after exit", p.Backend, p.Calls, p.Seconds, len(p.Failures), len(p.Problems), len(p.Exit))
	return p
}

// leftAfterExit lists what of the server is still on the host after its
// session closed its stdin and reaped it: processes in its cgroups, its
// cgroup directories, its oci run dir; and a server that had to be
// signalled instead of exiting on its own.
func leftAfterExit(sess *session, pid int, backend string) []string {
	var left []string
	if st := sess.cmd.ProcessState; st == nil {
		left = append(left, "the server was not reaped")
	} else if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		left = append(left, fmt.Sprintf("the server did not exit on its own when its stdin closed (%s)", ws.Signal()))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var now []string
		if n := processesInCgroups(pid); n > 0 {
			now = append(now, fmt.Sprintf("%d processes in the server's cgroups", n))
		}
		if n := cgroupDirs(pid); n > 0 {
			now = append(now, fmt.Sprintf("%d cgroup directories of the server", n))
		}
		if strings.HasPrefix(backend, "oci/") {
			if _, err := os.Stat(filepath.Join("/run/toolgate", strconv.Itoa(pid))); err == nil {
				now = append(now, "its oci run dir /run/toolgate/"+strconv.Itoa(pid))
			}
		}
		// Processes killed at the exit may wait a moment for the host's
		// init to reap them.
		if len(now) == 0 || time.Now().After(deadline) {
			return append(left, now...)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run makes the calls of seq from s.conc workers.
func (s *soaker) run(sess *session, seq []kind, p *Phase) {
	var mu sync.Mutex
	next := make(chan kind, len(seq))
	for _, k := range seq {
		next <- k
	}
	close(next)
	var wg sync.WaitGroup
	for range s.conc {
		wg.Go(func() {
			for k := range next {
				err := s.one(sess, k)
				mu.Lock()
				p.ByKind[k.name]++
				if err != nil && len(p.Failures) < 50 {
					p.Failures = append(p.Failures, k.name+": "+err.Error())
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

func (s *soaker) one(sess *session, k kind) error {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if k.cancel > 0 {
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(ctx, k.cancel)
		defer c2()
	}
	res, text, err := sess.call(ctx, k.tool, nil)
	if k.cancel > 0 {
		if err == nil {
			return fmt.Errorf("cancelled call answered: isError=%v: %s", res.IsError, firstLine(text))
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("cancelled call: %w", err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var tr toolResult
	if err := json.Unmarshal(raw, &tr); err != nil {
		return fmt.Errorf("structuredContent: %w: %s", err, firstLine(text))
	}
	return k.check(&tr, res.IsError, text)
}

// snap takes a snapshot of the server, after waiting (bounded) for the
// processes of its last calls to be gone. With the pool on, at rest a
// server holds its prepared sandboxes (one per test-class tool at each
// depth, none being prepared) and nothing else, but what its last calls
// left to end after their answers goes on for a while on a loaded
// machine: a container's deletion, and a call the client cancelled whose
// container was still being created (the runtime's kill finds it only
// once created; Exec's escalation ends it two seconds later). So the
// snapshot is the first of two, a second apart, that count the same, and
// on an oci backend that count no container or bundle but the pool's.
func (s *soaker) snap(pid int, backend string, settle bool) snapshot {
	if settle && s.pool > 0 {
		ready := soakTestTools * s.pool
		_ = waitPoolReady(s.sess, ready, 60*time.Second)
		oci := strings.HasPrefix(backend, "oci/")
		deadline := time.Now().Add(30 * time.Second)
		prev := countLeft(pid, backend)
		for time.Now().Before(deadline) {
			time.Sleep(time.Second)
			cur := countLeft(pid, backend)
			if cur.sameCounts(prev) && (!oci || cur.Containers == ready && cur.Bundles == ready) {
				break
			}
			prev = cur
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for settle && s.pool == 0 && time.Now().Before(deadline) {
		if c, _ := descendants(pid); c == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	sn := countLeft(pid, backend)
	sn.Threads = threads(pid)
	sn.RSSKiB, _ = rss(pid)
	return sn
}

// sameCounts reports whether two snapshots count the same of everything a
// call could leave behind.
func (a snapshot) sameCounts(b snapshot) bool {
	return a.FDs == b.FDs && a.Children == b.Children && a.Zombies == b.Zombies &&
		a.Cgroups == b.Cgroups && a.Containers == b.Containers && a.Bundles == b.Bundles
}

// countLeft counts what a call could leave behind in the server: its open
// fds, processes, cgroup directories and, on an oci backend, containers
// and bundles.
func countLeft(pid int, backend string) snapshot {
	var sn snapshot
	sn.FDs = openFDs(pid)
	sn.Children, sn.Zombies = descendants(pid)
	sn.Cgroups = cgroupDirs(pid)
	if rtName, ok := strings.CutPrefix(strings.TrimSuffix(backend, poolSuffix), "oci/"); ok {
		dir := filepath.Join("/run/toolgate", strconv.Itoa(pid))
		if e, err := os.ReadDir(filepath.Join(dir, "bundles")); err == nil {
			sn.Bundles = len(e)
		}
		if bin, err := exec.LookPath(rtName); err == nil {
			quiet := "-q"
			if rtName == "runsc" {
				quiet = "-quiet"
			}
			out, err := exec.Command(bin, "--root", filepath.Join(dir, "state-"+rtName), "list", quiet).Output()
			if err == nil {
				sn.Containers = len(strings.Fields(string(out)))
			} else {
				sn.Containers = -1
			}
		}
	}
	return sn
}

// Tolerances of the two figures a Go server cannot bring back exactly: the
// runtime keeps the OS threads it once needed (idle, parked), and the heap
// breathes with the garbage collector.
const (
	rssSlackPercent = 10
	rssSlackKiB     = 4 << 10
)

// compare lists what did not return to its start value.
func compare(b, a snapshot) []string {
	var out []string
	exact := func(name string, bv, av int) {
		if av != bv {
			out = append(out, fmt.Sprintf("%s: %d before, %d after", name, bv, av))
		}
	}
	exact("open fds", b.FDs, a.FDs)
	exact("child processes", b.Children, a.Children)
	exact("zombies", b.Zombies, a.Zombies)
	exact("containers", b.Containers, a.Containers)
	exact("bundles", b.Bundles, a.Bundles)
	exact("cgroup dirs", b.Cgroups, a.Cgroups)
	if a.Threads > b.Threads+4 {
		out = append(out, fmt.Sprintf("threads: %d before, %d after (more than 4 new)", b.Threads, a.Threads))
	}
	if slack := max(b.RSSKiB*rssSlackPercent/100, rssSlackKiB); a.RSSKiB > b.RSSKiB+slack {
		out = append(out, fmt.Sprintf("rss: %d KiB before, %d KiB after (more than %d KiB growth)", b.RSSKiB, a.RSSKiB, slack))
	}
	return out
}

func soakMarkdown(phases []Phase, conc int) string {
	var w strings.Builder
	fmt.Fprintf(&w, "### Soak (%s)\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	for _, p := range phases {
		fmt.Fprintf(&w, "One server, `--backend %s`: %d mixed calls, %d in flight, in %.0f s (", strings.Replace(p.Backend, "oci/", "oci --oci-runtime ", 1), p.Calls, conc, p.Seconds)
		var kinds []string
		for _, k := range soakKinds(p.Backend) {
			if n := p.ByKind[k.name]; n > 0 {
				kinds = append(kinds, fmt.Sprintf("%s %d", k.name, n))
			}
		}
		w.WriteString(strings.Join(kinds, ", "))
		fmt.Fprintf(&w, "); wrong answers: %d.\n\n", len(p.Failures))
		w.WriteString("| | fds | threads | RSS | children | zombies | containers | bundles | cgroup dirs |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range []struct {
			name string
			s    snapshot
		}{{"before", p.Before}, {"after", p.After}} {
			fmt.Fprintf(&w, "| %s | %d | %d | %.1f MB | %d | %d | %d | %d | %d |\n", r.name, r.s.FDs, r.s.Threads, mb(r.s.RSSKiB), r.s.Children, r.s.Zombies, r.s.Containers, r.s.Bundles, r.s.Cgroups)
		}
		if p.Pool != nil {
			fmt.Fprintf(&w, "\nPool at the end: %s.\n", p.Pool)
		}
		if len(p.Problems) == 0 && len(p.Failures) == 0 && len(p.Exit) == 0 {
			w.WriteString("\nAll back to their start values (threads within 4, RSS within 10% or 4 MiB); after the server exited (stdin closed), nothing of it was left: no process in its cgroups, no cgroup directory, no run dir.\n\n")
			continue
		}
		w.WriteString("\n")
		for _, x := range append(append(p.Failures, p.Problems...), p.Exit...) {
			fmt.Fprintf(&w, "- FAIL: %s\n", x)
		}
		w.WriteString("\n")
	}
	return w.String()
}
