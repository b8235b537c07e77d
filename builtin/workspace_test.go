package builtin

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// boundaryFixture is a workspace with symlinks inside and out, and an
// outside directory beside it. It returns the workspace and the outside
// directory.
func boundaryFixture(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "ws")
	outside = filepath.Join(base, "outside")
	writeTree(t, root, map[string]string{
		"a/b/file.txt":  "inside\n",
		"ISSUES.md":     "# report\n",
		"docs/keep.md":  "docs\n",
		"reports/x.md":  "x\n",
		"out/stale.md":  "stale\n",
		"dir/README.md": "readme\n",
	})
	writeTree(t, outside, map[string]string{"secret.txt": "outside\n", "sub/x.md": "x\n"})
	symlink(t, "a/b/file.txt", filepath.Join(root, "link-in"))
	symlink(t, "a", filepath.Join(root, "dirlink-in"))
	symlink(t, filepath.Join(outside, "secret.txt"), filepath.Join(root, "link-out"))
	symlink(t, outside, filepath.Join(root, "dirlink-out"))
	symlink(t, "../outside/secret.txt", filepath.Join(root, "rel-link-out"))
	symlink(t, "nowhere", filepath.Join(root, "dangling"))
	symlink(t, "docs/keep.md", filepath.Join(root, "final-link.md"))
	symlink(t, filepath.Join(outside, "new.md"), filepath.Join(root, "final-link-out.md"))
	return root, outside
}

func TestResolve(t *testing.T) {
	root, outside := boundaryFixture(t)
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	// A second name for the root, through a symlink: absolute paths
	// through it are inside too.
	alias := filepath.Join(t.TempDir(), "alias")
	symlink(t, root, alias)
	wsAlias, err := NewWorkspace(alias)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		ws      *Workspace
		in      string
		want    string
		wantErr error
	}{
		{name: "relative", in: "a/b/file.txt", want: "a/b/file.txt"},
		{name: "relative dot slash", in: "./a/b/file.txt", want: "a/b/file.txt"},
		{name: "root dot", in: ".", want: "."},
		{name: "absolute inside", in: filepath.Join(root, "a/b/file.txt"), want: "a/b/file.txt"},
		{name: "absolute root", in: root, want: "."},
		{name: "absolute through the configured alias", ws: wsAlias, in: filepath.Join(alias, "a/b"), want: "a/b"},
		{name: "symlink inside resolves", in: "link-in", want: "a/b/file.txt"},
		{name: "symlinked dir inside resolves", in: "dirlink-in/b/file.txt", want: "a/b/file.txt"},
		{name: "parent traversal that stays inside", in: "a/../ISSUES.md", wantErr: ErrTraversal},
		{name: "parent traversal out", in: "../outside/secret.txt", wantErr: ErrTraversal},
		{name: "absolute with traversal", in: root + "/../outside/secret.txt", wantErr: ErrTraversal},
		{name: "absolute outside", in: filepath.Join(outside, "secret.txt"), wantErr: ErrOutside},
		{name: "absolute prefix sibling", in: root + "x/file", wantErr: ErrOutside},
		{name: "absolute system file", in: "/etc/passwd", wantErr: ErrOutside},
		{name: "symlink escaping", in: "link-out", wantErr: ErrOutside},
		{name: "relative symlink escaping", in: "rel-link-out", wantErr: ErrOutside},
		{name: "symlinked dir escaping", in: "dirlink-out/secret.txt", wantErr: ErrOutside},
		{name: "symlinked dir escaping itself", in: "dirlink-out", wantErr: ErrOutside},
		{name: "dangling symlink", in: "dangling", wantErr: fs.ErrNotExist},
		{name: "missing", in: "nope.txt", wantErr: fs.ErrNotExist},
		{name: "empty", in: "", wantErr: errAny},
		{name: "NUL byte", in: "a\x00b", wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := ws
			if tc.ws != nil {
				w = tc.ws
			}
			got, err := w.Resolve(tc.in)
			checkErr(t, "Resolve("+tc.in+")", err, tc.wantErr)
			if tc.wantErr == nil && got != tc.want {
				t.Errorf("Resolve(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// errAny matches any error.
var errAny = errors.New("any error")

func checkErr(t *testing.T, what string, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("%s: unexpected error %v", what, err)
	case want == nil:
	case err == nil:
		t.Fatalf("%s: no error, want %v", what, want)
	case !errors.Is(want, errAny) && !errors.Is(err, want):
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func TestResolveOutput(t *testing.T) {
	root, outside := boundaryFixture(t)
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		in      string
		want    string
		wantErr error
	}{
		{name: "new file at the root", in: "AUDIT.md", want: "AUDIT.md"},
		{name: "existing file replaced", in: "ISSUES.md", want: "ISSUES.md"},
		{name: "new nested directories", in: "reports/2024/audit.md", want: "reports/2024/audit.md"},
		{name: "dot slash cleaned", in: "./reports/x.md", want: "reports/x.md"},
		{name: "symlinked ancestor inside", in: "dirlink-in/new.md", want: "dirlink-in/new.md"},
		{name: "absolute inside is still refused", in: filepath.Join(root, "x.md"), wantErr: ErrAbsolute},
		{name: "absolute outside", in: filepath.Join(outside, "x.md"), wantErr: ErrAbsolute},
		{name: "parent traversal", in: "../outside/x.md", wantErr: ErrTraversal},
		{name: "parent traversal staying inside", in: "reports/../x.md", wantErr: ErrTraversal},
		{name: "symlinked ancestor escaping", in: "dirlink-out/x.md", wantErr: ErrOutside},
		{name: "symlinked ancestor escaping, deeper", in: "dirlink-out/sub/x.md", wantErr: ErrOutside},
		{name: "final symlink inside", in: "final-link.md", wantErr: ErrSymlink},
		{name: "final symlink escaping (dangling)", in: "final-link-out.md", wantErr: ErrSymlink},
		{name: "final symlink to a file outside", in: "link-out", wantErr: ErrSymlink},
		{name: "hidden component .git", in: ".git/config", wantErr: ErrHidden},
		{name: "hidden component .github", in: ".github/workflows/x.md", wantErr: ErrHidden},
		{name: "hidden file", in: "docs/.envrc", wantErr: ErrHidden},
		{name: "existing directory", in: "docs", wantErr: errAny},
		{name: "trailing slash", in: "docs/new/", wantErr: errAny},
		{name: "ancestor is a file", in: "ISSUES.md/x.md", wantErr: errAny},
		{name: "root", in: ".", wantErr: errAny},
		{name: "empty", in: "", wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ws.ResolveOutput(tc.in)
			checkErr(t, "ResolveOutput("+tc.in+")", err, tc.wantErr)
			if tc.wantErr == nil && got != tc.want {
				t.Errorf("ResolveOutput(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "x.md")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("validation created or found %s/x.md: %v", outside, err)
	}
}

// TestWriteFileAfterSwap swaps the tree after validation: a symlink put
// in place of the target is replaced, never followed, and an ancestor
// swapped for a symlink leading out makes the write fail.
func TestWriteFileAfterSwap(t *testing.T) {
	root, outside := boundaryFixture(t)
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := ws.ResolveOutput("out/report.md")
	if err != nil {
		t.Fatal(err)
	}
	// The final component becomes a symlink to a file outside.
	target := filepath.Join(outside, "secret.txt")
	symlink(t, target, filepath.Join(root, "out/report.md"))
	if _, err := ws.WriteFile(rel, []byte("report\n")); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "outside\n" {
		t.Fatalf("the outside file was written through the symlink: %q", b)
	}
	fi, err := os.Lstat(filepath.Join(root, "out/report.md"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("out/report.md is not a regular file after WriteFile: %v %v", fi, err)
	}

	// An ancestor becomes a symlink leading out.
	rel, err = ws.ResolveOutput("out/x.md")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	symlink(t, outside, filepath.Join(root, "out"))
	_, err = ws.WriteFile(rel, []byte("report\n"))
	if err == nil {
		t.Fatal("WriteFile through an escaping ancestor succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "x.md")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a file was written outside the workspace: %v", err)
	}
	entries, _ := os.ReadDir(outside)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".toolgate-") {
			t.Fatalf("a temporary file was left outside: %s", e.Name())
		}
	}
}

// hiddenFixture adds to boundaryFixture the hidden directories an agent
// must never write (.git/hooks, .claude/commands) and symlinked
// directories inside the workspace that lead to them, directly, through a
// chain, through a symlinked parent, by an absolute target, and by a
// relative one climbing back down.
func hiddenFixture(t *testing.T) (root, outside string) {
	t.Helper()
	root, outside = boundaryFixture(t)
	writeTree(t, root, map[string]string{".git/hooks/README": "hooks\n", ".claude/commands/keep.md": "cmd\n", "sub/x/keep": "x\n"})
	symlink(t, ".claude/commands", filepath.Join(root, "cmds"))
	symlink(t, ".git/hooks", filepath.Join(root, "hooks"))
	symlink(t, filepath.Join(root, ".git/hooks"), filepath.Join(root, "abshooks"))
	symlink(t, "chain2", filepath.Join(root, "chain1"))
	symlink(t, ".git", filepath.Join(root, "chain2"))
	symlink(t, ".git", filepath.Join(root, "gitdir"))
	symlink(t, "gitdir/hooks", filepath.Join(root, "viagit"))
	symlink(t, "a/../.git/hooks", filepath.Join(root, "updown"))
	symlink(t, "../.claude", filepath.Join(root, "sub/up"))
	symlink(t, "../../a", filepath.Join(root, "sub/x/back"))
	return root, outside
}

// TestResolveOutputHidden: an output path is judged after every component
// is resolved, so a symlinked directory inside the workspace cannot lead a
// report into .git/hooks or .claude/commands; symlinks to ordinary
// directories inside still work.
func TestResolveOutputHidden(t *testing.T) {
	root, _ := hiddenFixture(t)
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, in string
		wantErr  error
	}{
		{"to .claude/commands", "cmds/x.md", ErrHidden},
		{"to .git/hooks", "hooks/pre-commit.md", ErrHidden},
		{"absolute, to .git/hooks", "abshooks/x.md", ErrHidden},
		{"a chain to .git", "chain1/hooks/x.md", ErrHidden},
		{"through a symlinked parent", "viagit/x.md", ErrHidden},
		{"down, up and into .git", "updown/x.md", ErrHidden},
		{"a nested link up into .claude", "sub/up/commands/x.md", ErrHidden},
		{"a nested link back to a", "sub/x/back/new.md", nil},
		{"an ordinary symlinked directory", "dirlink-in/b/new.md", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ws.ResolveOutput(tc.in)
			checkErr(t, "ResolveOutput("+tc.in+")", err, tc.wantErr)
			_, err = ws.WriteFile(tc.in, []byte("# report\n"))
			checkErr(t, "WriteFile("+tc.in+")", err, tc.wantErr)
		})
	}
	for _, dir := range []string{".git/hooks", ".claude/commands", ".git"} {
		entries, _ := os.ReadDir(filepath.Join(root, dir))
		for _, e := range entries {
			if n := e.Name(); n != "README" && n != "keep.md" && n != "hooks" {
				t.Errorf("%s/%s was written", dir, n)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "a/new.md")); err != nil {
		t.Errorf("sub/x/back/new.md did not land in a/: %v", err)
	}
}

// TestWriteFileSwapToHidden: a directory validated by ResolveOutput and
// then swapped for a symlink to .git/hooks is not followed by WriteFile:
// no check-then-use race on the directories.
func TestWriteFileSwapToHidden(t *testing.T) {
	root, _ := hiddenFixture(t)
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := ws.ResolveOutput("out/pre-commit.md")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	symlink(t, ".git/hooks", filepath.Join(root, "out"))
	if _, err := ws.WriteFile(rel, []byte("#!/bin/sh\n")); !errors.Is(err, ErrHidden) {
		t.Errorf("WriteFile after the swap: %v, want ErrHidden", err)
	}
	if _, err := os.Stat(filepath.Join(root, ".git/hooks/pre-commit.md")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the report landed in .git/hooks: %v", err)
	}
}

func TestReadFileBoundary(t *testing.T) {
	root, _ := boundaryFixture(t)
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	data, size, cut, err := ws.ReadFile("a/b/file.txt", 3)
	if err != nil || string(data) != "ins" || size != 7 || !cut {
		t.Fatalf("ReadFile(limit 3) = %q, %d, %v, %v; want \"ins\", 7, true, nil", data, size, cut, err)
	}
	// os.Root refuses what lexical checks alone would let through.
	if _, _, _, err := ws.ReadFile("link-out", 100); err == nil {
		t.Fatal("ReadFile(link-out) read a file outside the workspace")
	}
	if _, _, _, err := ws.ReadFile("a", 100); err == nil {
		t.Fatal("ReadFile(a directory) succeeded")
	}
}

func TestNewWorkspace(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"f": "x"})
	for _, tc := range []struct {
		name string
		in   string
		ok   bool
	}{
		{"directory", dir, true},
		{"relative directory", ".", true},
		{"file", filepath.Join(dir, "f"), false},
		{"missing", filepath.Join(dir, "missing"), false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewWorkspace(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("NewWorkspace(%q) error = %v, want ok %v", tc.in, err, tc.ok)
			}
		})
	}
}
