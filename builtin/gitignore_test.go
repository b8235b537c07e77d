package builtin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rt "github.com/toolgate/toolgate/runtime"
)

func TestGitignorePatterns(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		path    string
		dir     bool
		want    bool
	}{
		// Basename patterns match at any depth.
		{"*.log", "a.log", false, true},
		{"*.log", "x/y/a.log", false, true},
		{"*.log", "a.log.txt", false, false},
		{"*.log", "logs/a.txt", false, false},
		// Negation: the later pattern wins.
		{"*.log\n!keep.log", "keep.log", false, false},
		{"*.log\n!keep.log", "x/keep.log", false, false},
		{"*.log\n!keep.log", "other.log", false, true},
		{"!keep.log\n*.log", "keep.log", false, true},
		// Directory-only patterns.
		{"build/", "build", true, true},
		{"build/", "build", false, false},
		{"build/", "x/build", true, true},
		// Anchored patterns.
		{"/root.txt", "root.txt", false, true},
		{"/root.txt", "x/root.txt", false, false},
		{"doc/frotz", "doc/frotz", false, true},
		{"doc/frotz", "a/doc/frotz", false, false},
		{"doc/*.txt", "doc/a.txt", false, true},
		{"doc/*.txt", "doc/x/a.txt", false, false},
		// "**" in its three forms, and as ordinary stars.
		{"**/foo", "foo", false, true},
		{"**/foo", "a/b/foo", false, true},
		{"**/foo/bar", "a/foo/bar", false, true},
		{"abc/**", "abc/x", false, true},
		{"abc/**", "abc/x/y", false, true},
		{"abc/**", "abc", true, false},
		{"a/**/b", "a/b", false, true},
		{"a/**/b", "a/x/y/b", false, true},
		{"a/**/b", "ab", false, false},
		{"foo**bar", "fooxbar", false, true},
		{"foo**bar", "foo/bar", false, false},
		// '?', bracket expressions, escapes.
		{"?.c", "a.c", false, true},
		{"?.c", "ab.c", false, false},
		{"[abc].go", "b.go", false, true},
		{"[abc].go", "d.go", false, false},
		{"[!abc].go", "d.go", false, true},
		{"[!abc].go", "a.go", false, false},
		{"[a-c]x", "bx", false, true},
		{"[a-c]x", "dx", false, false},
		{"[[:digit:]].txt", "7.txt", false, true},
		{"\\#hash", "#hash", false, true},
		{"#comment", "#comment", false, false},
		{"\\!bang", "!bang", false, true},
		{"star\\*", "star*", false, true},
		{"star\\*", "starx", false, false},
		// Trailing spaces are dropped unless escaped; CRLF endings work.
		{"trail   ", "trail", false, true},
		{"sp\\ ", "sp ", false, true},
		{"crlf.txt\r", "crlf.txt", false, true},
		// Blank lines and comments match nothing.
		{"\n\n# *.go\n", "main.go", false, false},
	} {
		t.Run(strings.ReplaceAll(tc.pattern, "\n", "|")+"~"+tc.path, func(t *testing.T) {
			s := newIgnoreSet()
			s.add("", parseGitignore([]byte(tc.pattern)))
			if got := s.ignored(tc.path, tc.dir); got != tc.want {
				t.Errorf("ignored(%q, dir=%v) with %q = %v, want %v", tc.path, tc.dir, tc.pattern, got, tc.want)
			}
		})
	}
}

func TestGitignoreNested(t *testing.T) {
	s := newIgnoreSet()
	s.add("", parseGitignore([]byte("*.tmp\n/top.txt\n")))
	s.add("sub", parseGitignore([]byte("!keep.tmp\n/local.txt\n")))
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"a.tmp", true},
		{"sub/a.tmp", true},
		{"sub/keep.tmp", false}, // the deeper file re-includes
		{"keep.tmp", true},      // but only below it
		{"other/keep.tmp", true},
		{"top.txt", true},
		{"sub/top.txt", false},
		{"sub/local.txt", true}, // anchored to sub/
		{"local.txt", false},
		{"sub/x/local.txt", false},
	} {
		if got := s.ignored(tc.path, false); got != tc.want {
			t.Errorf("ignored(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

// TestGitignoreAgainstGit builds a tree with nested ignore files and
// compares what the collector's matcher keeps with what real git lists as
// untracked and not ignored.
func TestGitignoreAgainstGit(t *testing.T) {
	git := requireBinary(t, "git")
	root := t.TempDir()
	files := []string{
		"a.log", "keep.log", "src/a.log", "src/keep.log", "src/main.go", "src/gen/x.go", "src/gen/sub/y.go",
		"gen/z.go", "build/out", "src/build/out", "docs/build", "top.txt", "src/top.txt", "x/y/z/deep.md",
		"x/y/z/deep.txt", "sub/a.tmp", "sub/important.tmp", "sub/dir/b.tmp", "sub/local.txt", "local.txt",
		"b1.c", "bb.c", "space file.txt", "#hash.txt", "!bang.txt", "n/x1.md", "n/x2.md", "q/a.bak", "q/r/a.bak",
	}
	tree := map[string]string{
		".gitignore":     "*.log\n!keep.log\n/top.txt\nbuild/\n**/gen/**\nx/**/*.txt\n?1.c\n\\#hash.txt\n\\!bang.txt\nn/x[0-1].md\nq/**/*.bak\n",
		"sub/.gitignore": "*.tmp\n!important.tmp\n/local.txt\n",
	}
	for _, f := range files {
		tree[f] = "x\n"
	}
	writeTree(t, root, tree)
	gitCmd := func(args ...string) []byte {
		t.Helper()
		res, err := rt.RunHelper(context.Background(), rt.HelperCmd{
			Path: git, Args: args, Dir: root,
			Timeout: 10e9, MaxStdout: 1 << 20, MaxStderr: 1 << 16,
		})
		if err != nil || res.Failed() {
			t.Fatalf("git %v: %v %s", args, err, res.Stderr)
		}
		return res.Stdout
	}
	gitCmd("init", "-q")
	var want []string
	for p := range bytes.SplitSeq(gitCmd("ls-files", "--others", "--exclude-standard", "-z"), []byte{0}) {
		if len(p) > 0 && !strings.HasSuffix(string(p), ".gitignore") {
			want = append(want, string(p))
		}
	}
	slices.Sort(want)
	// The comparison means something only if git both kept and ignored.
	if !slices.Contains(want, "keep.log") || !slices.Contains(want, "sub/important.tmp") || slices.Contains(want, "a.log") ||
		len(want) < 10 || len(want) > len(files)-10 {
		t.Fatalf("git ls-files gave an unexpected list: %q", want)
	}

	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	skipped, err := collect(context.Background(), ws, ".", func(f collectedFile, _ []byte) error {
		got = append(got, f.Path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("collected files differ from git ls-files --others --exclude-standard\ngot  %q\nwant %q", got, want)
	}
	if skipped[SkipGitignored] == nil || skipped[SkipGitignored].Files == 0 {
		t.Errorf("no gitignored files counted: %+v", skipped.list())
	}
	// And git's own exclude file.
	if err := os.WriteFile(filepath.Join(root, ".git/info/exclude"), []byte("src/main.go\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	if _, err := collect(context.Background(), ws, ".", func(f collectedFile, _ []byte) error {
		got = append(got, f.Path)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(got, "src/main.go") {
		t.Errorf(".git/info/exclude was not applied: %q", got)
	}
}
