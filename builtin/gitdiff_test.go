package builtin

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
)

func TestParseRevSpec(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    revSpec
		wantErr bool
	}{
		{in: "HEAD", want: revSpec{left: "HEAD"}},
		{in: "HEAD~1", want: revSpec{left: "HEAD~1"}},
		{in: "origin/main", want: revSpec{left: "origin/main"}},
		{in: "v1.2.3^{commit}", want: revSpec{left: "v1.2.3^{commit}"}},
		{in: "0123456789abcdef0123456789abcdef01234567", want: revSpec{left: "0123456789abcdef0123456789abcdef01234567"}},
		{in: "main..feature", want: revSpec{left: "main", right: "feature"}},
		{in: "main...feature", want: revSpec{left: "main", right: "feature", threeDot: true}},
		{in: "", wantErr: true},
		{in: "-p", wantErr: true},
		{in: "--output=/tmp/x", wantErr: true},
		{in: "--end-of-options", wantErr: true},
		{in: "HEAD..-p", wantErr: true},
		{in: "-x...HEAD", wantErr: true},
		{in: "HEAD..", wantErr: true},
		{in: "..HEAD", wantErr: true},
		{in: "...", wantErr: true},
		{in: "a..b..c", wantErr: true},
		{in: "HEAD --output=x", wantErr: true},
		{in: "HEAD\n-p", wantErr: true},
		{in: "HEAD\x00", wantErr: true},
		{in: "\xff", wantErr: true},
		{in: strings.Repeat("a", 257), wantErr: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseRevSpec(tc.in)
			if tc.wantErr {
				if !errors.Is(err, errBadRev) {
					t.Fatalf("parseRevSpec(%q) = %+v, %v; want errBadRev", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseRevSpec(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

// gitRepo runs git commands in dir with fixed identities and dates, so
// that commit ids are the same on every run.
type gitRepo struct {
	t   *testing.T
	git string
	dir string
}

func (r gitRepo) run(args ...string) string {
	r.t.Helper()
	cmd := exec.Command(r.git, append([]string{
		"-c", "user.name=Test", "-c", "user.email=test@example.com",
		"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false",
	}, args...)...)
	cmd.Dir = r.dir
	cmd.Env = []string{
		"PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + r.dir,
		"GIT_AUTHOR_DATE=2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2024-01-01T00:00:00Z",
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// makeGitFixture: main has two commits, feature branches off the first,
// and the working tree has an uncommitted change.
func makeGitFixture(t *testing.T) (root string, r gitRepo) {
	t.Helper()
	git := requireBinary(t, "git")
	root = filepath.Join(testbin.Dir(t), "repo") // a sandbox can bind it
	r = gitRepo{t: t, git: git, dir: root}
	writeTree(t, root, map[string]string{
		"a.txt":        "one\ntwo\nthree\n",
		"b.go":         "package b\n\nfunc B() int { return 1 }\n",
		"dir/c.md":     "# c\n",
		"sub/inner.go": "package sub\n",
	})
	r.run("init", "-q")
	r.run("add", ".")
	r.run("commit", "-q", "-m", "first")
	r.run("branch", "feature")
	writeTree(t, root, map[string]string{"a.txt": "one\n2\nthree\nfour\n", "d.txt": "new file\n", "sub/inner.go": "package sub\n\nvar X = 1\n"})
	if err := os.Remove(filepath.Join(root, "dir/c.md")); err != nil {
		t.Fatal(err)
	}
	r.run("add", "-A")
	r.run("commit", "-q", "-m", "second")
	r.run("checkout", "-q", "feature")
	writeTree(t, root, map[string]string{"f.txt": "feature\n"})
	r.run("add", ".")
	r.run("commit", "-q", "-m", "feature")
	r.run("checkout", "-q", "main")
	writeTree(t, root, map[string]string{"b.go": "package b\n\nfunc B() int { return 2 }\n"})
	return root, r
}

func diffFiles(l ChunkList) []string {
	var out []string
	for _, c := range l.Chunks {
		for _, f := range c.Files {
			out = append(out, f.Path)
		}
	}
	return out
}

func TestGitDiffInput(t *testing.T) {
	root, r := makeGitFixture(t)
	tools := testTools(t, root, "")
	for _, tc := range []struct {
		name, target string
		want         []string
		head         string
	}{
		{"worktree against HEAD", "HEAD", []string{"b.go"}, "worktree"},
		{"two commits", "HEAD~1..HEAD", []string{"a.txt", "d.txt", "dir/c.md", "sub/inner.go"}, r.run("rev-parse", "main")},
		{"merge base", "main...feature", []string{"f.txt"}, r.run("rev-parse", "feature")},
		{"branch names", "feature..main", []string{"a.txt", "d.txt", "dir/c.md", "f.txt", "sub/inner.go"}, r.run("rev-parse", "main")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, tools, "git_diff_input", `{"target":"`+tc.target+`"}`)
			if res.IsError {
				t.Fatal(res.Text)
			}
			l := res.Structured.(DiffChunkList)
			if got := diffFiles(l.ChunkList); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("files %q, want %q", got, tc.want)
			}
			if l.Head != tc.head || !hexSHA.MatchString(l.Base) || l.DiffCut || l.Cut {
				t.Errorf("info %+v, want head %s", l.DiffInfo, tc.head)
			}
			_, texts := fetchAll(t, tools, "git_diff_input", `"target":"`+tc.target+`"`)
			all := strings.Join(texts, "")
			if !strings.Contains(all, "diff --git a/"+tc.want[0]+" b/"+tc.want[0]) {
				t.Errorf("chunk text lacks the diff header of %s:\n%s", tc.want[0], all)
			}
		})
	}
	res := call(t, tools, "git_diff_input", `{"target":"HEAD~1..HEAD"}`)
	checkGolden(t, "gitdiff_list.json", mustJSON(t, res.Structured))
	res = call(t, tools, "git_diff_input", `{"target":"HEAD~1..HEAD","index":1}`)
	checkGolden(t, "gitdiff_chunk_1.txt", []byte(res.Text))

	// A workspace below the top of the repository is refused: git runs
	// sandboxed, where only the workspace exists, so the .git above it is
	// out of reach (and reading it would leave the workspace).
	subTools := testTools(t, filepath.Join(root, "sub"), "")
	wantError(t, call(t, subTools, "git_diff_input", `{"target":"HEAD~1..HEAD"}`), "not the top of a git repository")

	// So is a linked worktree, whose .git is a file naming a git dir
	// outside the workspace.
	wt := filepath.Join(t.TempDir(), "wt")
	r.run("worktree", "add", "-q", wt, "feature")
	wantError(t, call(t, testTools(t, wt, ""), "git_diff_input", `{"target":"HEAD"}`), ".git is not a directory")
}

func TestGitDiffInputRefusals(t *testing.T) {
	root, _ := makeGitFixture(t)
	tools := testTools(t, root, "")
	marker := filepath.Join(root, "pwned")
	for _, tc := range []struct {
		name, args, wantErr string
	}{
		{"option", `{"target":"-p"}`, "starts with '-'"},
		{"option writing a file", `{"target":"--output=` + marker + `"}`, "starts with '-'"},
		{"option after a range", `{"target":"HEAD..--output=` + marker + `"}`, "starts with '-'"},
		{"option after a space", `{"target":"HEAD --output=` + marker + `"}`, "whitespace"},
		{"half range", `{"target":"HEAD.."}`, "both sides"},
		{"unknown revision", `{"target":"no-such-branch"}`, "does not name a commit"},
		{"a blob", `{"target":"HEAD:a.txt"}`, "does not name a commit"},
		{"missing target", `{}`, `missing required property "target"`},
		{"empty target", `{"target":""}`, "empty"},
		{"target of the wrong type", `{"target":["HEAD"]}`, "want string"},
		{"unknown property", `{"target":"HEAD","paths":["a"]}`, `unknown property "paths"`},
		{"index out of range", `{"target":"HEAD","index":2}`, "out of range: there are 1 chunks"},
		{"index zero", `{"target":"HEAD","index":0}`, "want 1 or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, call(t, tools, "git_diff_input", tc.args), tc.wantErr)
		})
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("an option injected through target wrote a file")
	}

	// Not a repository.
	plain := t.TempDir()
	writeTree(t, plain, map[string]string{"x.txt": "x\n"})
	wantError(t, call(t, testTools(t, plain, ""), "git_diff_input", `{"target":"HEAD"}`), "git")
}

// TestGitDiffInputRepoConfig plants repository configuration that would
// run programs (fsmonitor, an external diff, textconv): none may run.
func TestGitDiffInputRepoConfig(t *testing.T) {
	root, r := makeGitFixture(t)
	marker := filepath.Join(t.TempDir(), "ran")
	script := filepath.Join(t.TempDir(), "hook.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho ran >> "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.run("config", "core.fsmonitor", script)
	r.run("config", "diff.external", script)
	r.run("config", "diff.conv.textconv", script)
	writeTree(t, root, map[string]string{".gitattributes": "*.go diff=conv\n"})
	res := call(t, testTools(t, root, ""), "git_diff_input", `{"target":"HEAD","index":1}`)
	if res.IsError || !strings.Contains(res.Text, "return 2") {
		t.Fatalf("git_diff_input: %s", res.Text)
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("repository configuration ran a program: %q", b)
	}
}

func TestGitDiffInputCut(t *testing.T) {
	root, r := makeGitFixture(t)
	writeTree(t, root, map[string]string{"big.txt": strings.Repeat("a line of a very large diff\n", 9<<20/28)})
	r.run("add", "big.txt")
	r.run("commit", "-q", "-m", "big")
	tools := testTools(t, root, "")
	res := call(t, tools, "git_diff_input", `{"target":"HEAD~1..HEAD"}`)
	if res.IsError {
		t.Fatal(res.Text)
	}
	l := res.Structured.(DiffChunkList)
	if !l.DiffCut || l.DiffBytes > MaxDiffBytes || !strings.Contains(res.Text, "[diff cut:") {
		t.Fatalf("diff_cut %v, %d bytes (cap %d)", l.DiffCut, l.DiffBytes, MaxDiffBytes)
	}
	if l.TotalChunks < 30 {
		t.Errorf("%d chunks for 8 MiB", l.TotalChunks)
	}
	last := call(t, tools, "git_diff_input", `{"target":"HEAD~1..HEAD","index":`+strconv.Itoa(l.TotalChunks)+`}`)
	if last.IsError || !strings.HasSuffix(last.Text, "\n") {
		t.Errorf("last chunk: %v", last.IsError)
	}
}

// TestGitDiffInputProject diffs the project's own last commit.
func TestGitDiffInputProject(t *testing.T) {
	root := projectRoot(t)
	if fi, err := os.Lstat(filepath.Join(root, ".git")); err != nil || !fi.IsDir() {
		t.Skipf("SKIPPING: %s is not a git checkout with its own .git directory (a linked worktree's is refused, see TestGitDiffInput)", root)
	}
	tools := testTools(t, root, "")
	res := call(t, tools, "git_diff_input", `{"target":"HEAD~1..HEAD"}`)
	if res.IsError {
		if strings.Contains(res.Text, "does not name a commit") {
			t.Skip("SKIPPING: the checkout has a single commit")
		}
		t.Fatal(res.Text)
	}
	l := res.Structured.(DiffChunkList)
	if l.TotalFiles == 0 || l.DiffBytes == 0 {
		t.Fatalf("empty diff of the last commit: %+v", l.DiffInfo)
	}
	fetchAll(t, tools, "git_diff_input", `"target":"`+l.Base+`..`+l.Head+`"`)
}

// recordingRunner records the argv of every run it is given (each command
// of a session runs through Run: it opens no session of its own).
type recordingRunner struct {
	rt.Runner
	argvs [][]string
}

func (r *recordingRunner) Run(ctx context.Context, inv rt.Invocation) (rt.Result, error) {
	r.argvs = append(r.argvs, slices.Clone(inv.Argv))
	return r.Runner.Run(ctx, inv)
}

// TestGitDiffArgv: GitDiffArgv is exactly the git runs a git_diff_input
// call of A..B makes, in order: the bench execs it on the host as that
// call's floor, which would measure something else if the two drifted.
func TestGitDiffArgv(t *testing.T) {
	root, r := makeGitFixture(t)
	git, err := lookPath(HelperGit, "/usr/bin:/bin")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingRunner{Runner: hostRunner(t)}
	res := call(t, toolsWith(t, root, rec), "git_diff_input", `{"target":"HEAD~1..HEAD"}`)
	if res.IsError {
		t.Fatal(res.Text)
	}
	base, head := r.run("rev-parse", "HEAD~1"), r.run("rev-parse", "HEAD")
	if l := res.Structured.(DiffChunkList); l.Base != base || l.Head != head {
		t.Fatalf("git_diff_input compared %s..%s, want %s..%s", l.Base, l.Head, base, head)
	}
	want := GitDiffArgv(git, root, "HEAD~1", "HEAD", base, head)
	if !slices.EqualFunc(rec.argvs, want, slices.Equal[[]string]) {
		t.Errorf("git_diff_input ran\n%q\nGitDiffArgv(%q, %q, HEAD~1, HEAD, %s, %s) =\n%q", rec.argvs, git, root, base, head, want)
	}
}
