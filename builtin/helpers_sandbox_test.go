package builtin

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
	"github.com/toolgate/toolgate/runtime/cgroup"
)

// sandboxRunner is the real bwrap backend, as serve sets it up for the
// helpers (the per-call cgroup limits are not what these tests are about).
// Without bwrap the test is skipped loudly, or fails when
// TOOLGATE_REQUIRE_ALL=1.
func sandboxRunner(t *testing.T) rt.Runner {
	t.Helper()
	if _, err := bwrap.Find(); err != nil {
		testbin.Missing(t, "%v; this test needs the real sandbox", err)
	}
	cg := cgroup.Setup()
	t.Cleanup(cg.Close)
	limits := rt.DefaultSandboxLimits()
	limits.Pids, limits.Memory = 0, 0
	r, err := bwrap.New(context.Background(), bwrap.Config{Shim: testbin.Shim(t), Cgroups: cg, Limits: limits})
	if errors.Is(err, bundle.ErrNoSeccomp) {
		testbin.Missing(t, "this test binary was built without -tags seccomp (go test -tags seccomp): %v", err)
	}
	if err != nil {
		t.Fatalf("bwrap backend: %v", err)
	}
	return r
}

// hostileRepo is a repository whose own configuration names programs git
// runs during an ordinary diff: each leaves a file in evidence (a
// directory outside the workspace, which exists only on the host), and the
// clean filter also prints where it ran into the content git diffs.
type hostileRepo struct {
	root     string
	evidence string
	git      gitRepo
}

func makeHostileRepo(t *testing.T) hostileRepo {
	t.Helper()
	git := requireBinary(t, "git")
	h := hostileRepo{root: filepath.Join(testbin.Dir(t), "repo"), evidence: testbin.Dir(t)}
	h.git = gitRepo{t: t, git: git, dir: h.root}
	writeTree(t, h.root, map[string]string{
		"notes.txt":   "first\n",
		"secret.txt":  "tracked\n",
		"src/main.go": "package main\n\nfunc main() {}\n",
	})
	h.git.run("init", "-q")
	h.git.run("add", ".")
	h.git.run("commit", "-q", "-m", "first")
	// A clean filter runs on `git diff HEAD` for every changed file the
	// attributes name: it reports its uid and hostname as the content.
	writeTree(t, h.root, map[string]string{".gitattributes": "*.txt filter=evil\n", "notes.txt": "changed\n"})
	h.git.run("config", "filter.evil.clean",
		`sh -c 'touch `+h.evidence+`/filter-ran 2>/dev/null; echo "filter ran as uid=$(id -u) host=$(hostname)"'`)
	return h
}

func (h hostileRepo) ran(t *testing.T, name string) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(h.evidence, name))
	return err == nil
}

// TestHelperGitSandboxed: git_diff_input over a hostile repository runs
// the repository's programs only inside the sandbox: the clean filter
// runs there (as the sandbox uid, on the sandbox's hostname) and leaves
// nothing on the host. The control run on the host shows the repository
// is hostile: there, the filter writes its evidence.
func TestHelperGitSandboxed(t *testing.T) {
	sb := sandboxRunner(t)
	h := makeHostileRepo(t)

	control := call(t, testTools(t, h.root, ""), "git_diff_input", `{"target":"HEAD","index":1}`)
	if !h.ran(t, "filter-ran") {
		t.Fatalf("control: the clean filter did not run on the host (%s); the fixture proves nothing", control.Text)
	}
	if err := os.Remove(filepath.Join(h.evidence, "filter-ran")); err != nil {
		t.Fatal(err)
	}

	tools := toolsWith(t, h.root, sb)
	res := call(t, tools, "git_diff_input", `{"target":"HEAD","index":1}`)
	if res.IsError {
		t.Fatalf("git_diff_input in the sandbox: %s", res.Text)
	}
	if h.ran(t, "filter-ran") {
		t.Fatal("the repository's clean filter ran on the host")
	}
	if !strings.Contains(res.Text, "filter ran as uid=65534 host=sandbox") {
		t.Errorf("the diff does not show the filter running in the sandbox:\n%s", res.Text)
	}
}

// TestHelperGitNoLazyFetch: a partial clone whose promisor remote is
// reached through a command the repository names (core.sshCommand) makes
// git run that command to fetch a missing object, with no working-tree
// file and no filter at all. git_diff_input allows no transport and runs
// in the sandbox: the command never runs on the host. The control (plain
// git on the host) shows that it would.
func TestHelperGitNoLazyFetch(t *testing.T) {
	sb := sandboxRunner(t)
	h := makeHostileRepo(t)
	h.git.run("add", ".")
	h.git.run("commit", "-q", "-m", "second")
	blob := h.git.run("rev-parse", "HEAD:notes.txt")
	if err := os.Remove(filepath.Join(h.root, ".git/objects", blob[:2], blob[2:])); err != nil {
		t.Fatal(err)
	}
	h.git.run("config", "core.repositoryformatversion", "1")
	h.git.run("config", "extensions.partialClone", "origin")
	h.git.run("config", "remote.origin.url", "ssh://example.invalid/repo")
	h.git.run("config", "remote.origin.promisor", "true")
	h.git.run("config", "core.sshCommand", "touch "+h.evidence+"/fetch-ran; false")

	cmd := exec.Command(h.git.git, "diff", "HEAD~1..HEAD")
	cmd.Dir, cmd.Env = h.root, rt.Env
	_ = cmd.Run()
	if !h.ran(t, "fetch-ran") {
		t.Fatal("control: plain git on the host did not run core.sshCommand; the fixture proves nothing")
	}
	if err := os.Remove(filepath.Join(h.evidence, "fetch-ran")); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		runner rt.Runner
	}{{"sandbox", sb}, {"host runner, git's own hardening alone", hostRunner(t)}} {
		res := call(t, toolsWith(t, h.root, tc.runner), "git_diff_input", `{"target":"HEAD~1..HEAD","index":1}`)
		if h.ran(t, "fetch-ran") {
			t.Fatalf("%s: the repository's core.sshCommand ran on the host (%s)", tc.name, res.Text)
		}
	}
}

// TestHelperGitWorktreeOutside: core.worktree in the repository's config
// names a directory outside the workspace holding a root-only file; the
// diff must never show it.
func TestHelperGitWorktreeOutside(t *testing.T) {
	sb := sandboxRunner(t)
	h := makeHostileRepo(t)
	outside := testbin.Dir(t)
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("TOPSECRET-outside\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.git.run("config", "core.worktree", outside)
	cmd := exec.Command(h.git.git, "diff", "HEAD")
	cmd.Dir, cmd.Env = h.root, rt.Env
	if out, _ := cmd.CombinedOutput(); !strings.Contains(string(out), "TOPSECRET-outside") {
		t.Fatalf("control: plain git on the host did not diff the outside directory:\n%s", out)
	}
	for _, tc := range []struct {
		name   string
		runner rt.Runner
	}{{"sandbox", sb}, {"host runner, the work tree named explicitly", hostRunner(t)}} {
		tools := toolsWith(t, h.root, tc.runner)
		list := call(t, tools, "git_diff_input", `{"target":"HEAD"}`)
		all := list.Text
		if !list.IsError {
			_, texts := fetchAll(t, tools, "git_diff_input", `"target":"HEAD"`)
			all += strings.Join(texts, "")
		}
		if strings.Contains(all, "TOPSECRET-outside") {
			t.Errorf("%s: the diff shows a file outside the workspace:\n%s", tc.name, all)
		}
	}
}

// TestHelperOutlineSandboxed: outline runs the real ctags in the sandbox,
// fed the file's text on stdin.
func TestHelperOutlineSandboxed(t *testing.T) {
	requireBinary(t, "ctags")
	sb := sandboxRunner(t)
	root := testbin.Dir(t)
	writeTree(t, root, map[string]string{"pkg/a.go": "package pkg\n\n// Run runs.\nfunc Run(n int) int { return n }\n\ntype T struct{ X int }\n"})
	res := call(t, toolsWith(t, root, sb), "outline", `{"path":"pkg/a.go"}`)
	if res.IsError {
		t.Fatal(res.Text)
	}
	o := res.Structured.(Outline)
	var names []string
	for _, s := range o.Symbols {
		names = append(names, s.Kind+":"+s.Name)
	}
	if got := strings.Join(names, ","); got != "package:pkg,func:Run,struct:T,member:X" || o.Language != "Go" {
		t.Errorf("outline = %s (%s), want package:pkg,func:Run,struct:T,member:X (Go)", got, o.Language)
	}
}

// countingSessions counts what the built-ins ask of the sandbox: sessions
// opened, commands run in them, and runs outside one.
type countingSessions struct {
	rt.Runner
	opened, commands, runs atomic.Int32
}

func (c *countingSessions) Run(ctx context.Context, inv rt.Invocation) (rt.Result, error) {
	c.runs.Add(1)
	return c.Runner.Run(ctx, inv)
}

func (c *countingSessions) OpenSession(ctx context.Context, t rt.Template) (rt.Session, error) {
	c.opened.Add(1)
	s, err := rt.OpenSession(ctx, c.Runner, t)
	if err != nil {
		return nil, err
	}
	return countedSession{s, c}, nil
}

type countedSession struct {
	rt.Session
	c *countingSessions
}

func (s countedSession) Run(ctx context.Context, argv []string, call rt.Call) (rt.Result, error) {
	s.c.commands.Add(1)
	return s.Session.Run(ctx, argv, call)
}

// TestGitDiffInputOneSandbox: a git_diff_input call of A...B runs its four
// git commands (two rev-parse, merge-base, diff) in one sandbox, on the
// real bwrap backend; with the pool keeping the built-ins' templates, that
// sandbox was prepared ahead of the call, and the next one is prepared
// after it.
func TestGitDiffInputOneSandbox(t *testing.T) {
	root, _ := makeGitFixture(t)
	c := &countingSessions{Runner: sandboxRunner(t)}
	tools := toolsWith(t, root, c)
	res := call(t, tools, "git_diff_input", `{"target":"main...feature","index":1}`)
	if res.IsError {
		t.Fatal(res.Text)
	}
	if !strings.Contains(res.Text, "diff --git a/f.txt b/f.txt") {
		t.Errorf("chunk 1 is not f.txt's diff:\n%s", res.Text)
	}
	if o, n, r := c.opened.Load(), c.commands.Load(), c.runs.Load(); o != 1 || n != 4 || r != 0 {
		t.Errorf("sandbox use: %d sessions, %d commands, %d runs; want 1 session of 4 commands", o, n, r)
	}

	pool := rt.NewPool(c.Runner, rt.PoolConfig{Depth: 1})
	t.Cleanup(func() { pool.Close() })
	cfg := Config{Root: root, SearchPath: "/usr/bin:/bin", Version: "test", Sandbox: pool}
	list, helpers, err := Tools(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool.Keep(PoolTemplates(root, list, helpers))
	waitPool := func(what string, ok func(rt.PoolStatus) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok(pool.Status()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: pool %+v", what, pool.Status())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	gitReady := func(st rt.PoolStatus) bool {
		for _, e := range st.Entries {
			if e.Name == HelperGit && e.Ready == 1 {
				return true
			}
		}
		return false
	}
	waitPool("the git session prepared", gitReady)
	tools = toolsOf(t, cfg)
	for i := range 2 {
		res = call(t, tools, "git_diff_input", `{"target":"HEAD~1..HEAD"}`)
		if res.IsError {
			t.Fatal(res.Text)
		}
		if st := pool.Status(); st.Hits != int64(i+1) || st.Misses != 0 {
			t.Fatalf("call %d: pool %+v; want each call to take the prepared session", i+1, st)
		}
		// The call took the git entry's sandbox; the next is prepared
		// after it.
		waitPool("the next session prepared", gitReady)
	}
}
