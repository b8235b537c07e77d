package builtin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRepoManifestFixture(t *testing.T) {
	root := makeFixture(t)
	tools := testTools(t, root, "")
	res := call(t, tools, "repo_manifest", `{"security_index": true}`)
	if res.IsError {
		t.Fatalf("repo_manifest: %s", res.Text)
	}
	m := res.Structured.(Manifest)

	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
	}
	wantPaths := []string{
		"README.md", "big/many-lines.md", "big/medium.txt", "big/one-line.js", "docs/guide.md", "go.mod",
		"keep.log", "scripts/deploy.sh", "src/auth/login.go", "src/db/query.sql", "src/main.go",
		"src/rootonly.txt", "src/sub/important.tmp", "src/util/strings.go",
	}
	if !slices.Equal(paths, wantPaths) {
		t.Errorf("collected files:\ngot  %q\nwant %q", paths, wantPaths)
	}
	wantSkipped := []SkipCount{
		{SkipUnusualName, 1, 0},
		{SkipSecret, 7, 0}, // .env .env.local server.pem tls.key credentials.json id_rsa id_rsa.pub
		{SkipHidden, 2, 2}, // .gitignore src/sub/.gitignore; .github .hidden
		{SkipGitignored, 3, 2},
		{SkipDependency, 0, 3}, // build node_modules vendor
		{SkipLockfile, 3, 0},
		{SkipReport, 3, 0},  // ISSUES.md REVIEW.md scan.sarif
		{SkipSymlink, 3, 0}, // dir-outside link-outside.txt src/link-inside.go: never followed
		{SkipSpecial, 1, 0},
		{SkipEmpty, 1, 0},
		{SkipTooLarge, 1, 0}, // the 1 MB file
		{SkipBinary, 1, 0},
		{SkipNonUTF8, 1, 0},
	}
	if !slices.Equal(m.Skipped, wantSkipped) {
		t.Errorf("skipped:\ngot  %+v\nwant %+v", m.Skipped, wantSkipped)
	}
	sum := Totals{Files: len(m.Files), Directories: len(m.Directories)}
	for _, f := range m.Files {
		sum.Bytes += f.Bytes
		sum.Lines += f.Lines
		sum.Tokens += f.Tokens
		if f.Tokens != (f.Bytes+3)/4 {
			t.Errorf("%s: tokens %d for %d bytes", f.Path, f.Tokens, f.Bytes)
		}
	}
	if sum != m.Totals {
		t.Errorf("totals %+v, sum of files %+v", m.Totals, sum)
	}
	if m.Cut {
		t.Error("cut on a small fixture")
	}
	sec := map[string][]string{}
	for _, s := range *m.SecurityIndex {
		sec[s.Category] = s.Paths
	}
	if !slices.Contains(sec["auth"], "src/auth/login.go") || !slices.Contains(sec["sql"], "src/db/query.sql") ||
		!slices.Contains(sec["shell"], "scripts/deploy.sh") {
		t.Errorf("security index: %+v", sec)
	}
	if strings.Contains(res.Text, "outside the workspace") || strings.Contains(res.Text, "SECRET") {
		t.Error("manifest text shows outside or secret content")
	}
	checkGolden(t, "manifest_fixture.json", mustJSON(t, m))
	checkGolden(t, "manifest_fixture.txt", []byte(res.Text))

	// Determinism: the same tree elsewhere gives byte-identical output.
	again := call(t, testTools(t, makeFixture(t), ""), "repo_manifest", `{"security_index": true}`)
	if string(mustJSON(t, again.Structured)) != string(mustJSON(t, m)) || again.Text != res.Text {
		t.Error("repo_manifest differs between two copies of the same tree")
	}
}

func TestRepoManifestArgs(t *testing.T) {
	root := makeFixture(t)
	tools := testTools(t, root, "")
	for _, tc := range []struct {
		name    string
		args    string
		wantErr string
		want    []string // collected paths
	}{
		{name: "scope relative", args: `{"path":"src/util"}`, want: []string{"src/util/strings.go"}},
		{name: "scope absolute inside", args: `{"path":"` + filepath.Join(root, "src/auth") + `"}`, want: []string{"src/auth/login.go"}},
		{name: "scope hidden dir is empty, counted", args: `{"path":".hidden"}`, want: []string{}},
		{name: "scope gitignored dir", args: `{"path":"tmp"}`, want: []string{}},
		{name: "scope parent traversal", args: `{"path":"src/.."}`, wantErr: "parent traversal"},
		{name: "scope escaping symlink", args: `{"path":"dir-outside"}`, wantErr: "outside the workspace"},
		{name: "scope absolute outside", args: `{"path":"/etc"}`, wantErr: "outside the workspace"},
		{name: "scope a file", args: `{"path":"go.mod"}`, wantErr: "not a directory"},
		{name: "scope missing", args: `{"path":"nope"}`, wantErr: "does not exist"},
		{name: "unknown property", args: `{"paths":["src"]}`, wantErr: `unknown property "paths"`},
		{name: "wrong type", args: `{"security_index":"yes"}`, wantErr: "want boolean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, tools, "repo_manifest", tc.args)
			if tc.wantErr != "" {
				wantError(t, res, tc.wantErr)
				return
			}
			if res.IsError {
				t.Fatal(res.Text)
			}
			got := []string{}
			for _, f := range res.Structured.(Manifest).Files {
				got = append(got, f.Path)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("files %q, want %q", got, tc.want)
			}
		})
	}
	// A hidden scope reports why it is empty.
	m := call(t, tools, "repo_manifest", `{"path":".hidden"}`).Structured.(Manifest)
	if !slices.Equal(m.Skipped, []SkipCount{{SkipHidden, 0, 1}}) {
		t.Errorf("skipped for a hidden scope: %+v", m.Skipped)
	}
}

// TestRepoManifestBudget makes a manifest too big for its budget: the
// lists are cut, cut is set, the totals stay complete.
func TestRepoManifestBudget(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{}
	for i := range 4000 {
		files[fmt.Sprintf("d/%s-%03d/file-%04d.txt", strings.Repeat("long-name-", 5), i%300, i)] = "x\n"
	}
	writeTree(t, root, files)
	res := call(t, testTools(t, root, ""), "repo_manifest", `{}`)
	m := res.Structured.(Manifest)
	if !m.Cut || len(m.Files) >= m.Totals.Files || m.Totals.Files != 4000 {
		t.Fatalf("cut %v, listed %d of %d files", m.Cut, len(m.Files), m.Totals.Files)
	}
	b, _ := json.Marshal(m)
	if len(b) > BudgetManifest || len(res.Text) > BudgetManifest {
		t.Fatalf("result over budget: json %d, text %d, budget %d", len(b), len(res.Text), BudgetManifest)
	}
	if len(b) < BudgetManifest*3/4 {
		t.Errorf("cut far below the budget: %d of %d bytes", len(b), BudgetManifest)
	}
	if !strings.Contains(res.Text, "[cut: listed") {
		t.Error("text does not say it was cut")
	}
}

// TestRepoManifestProject runs on the project's own checkout.
func TestRepoManifestProject(t *testing.T) {
	root := projectRoot(t)
	res := call(t, testTools(t, root, ""), "repo_manifest", `{}`)
	if res.IsError {
		t.Fatal(res.Text)
	}
	m := res.Structured.(Manifest)
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
	}
	for _, want := range []string{"go.mod", "builtin/builtin.go", "builtin/collect.go", "server/server.go"} {
		if !slices.Contains(paths, want) {
			t.Errorf("%s not collected from the project checkout", want)
		}
	}
	for _, p := range paths {
		if p == "go.sum" || strings.HasPrefix(p, ".git/") || strings.HasPrefix(p, ".") {
			t.Errorf("%s collected: lockfiles and hidden paths must be skipped", p)
		}
	}
	var hidden SkipCount
	for _, s := range m.Skipped {
		if s.Reason == SkipHidden {
			hidden = s
		}
	}
	if hidden.Dirs == 0 {
		t.Errorf(".git not counted as a hidden directory: %+v", m.Skipped)
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skipf("SKIPPING the rest: %s is not a git checkout", root)
	}
}
