package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rt "github.com/toolgate/toolgate/runtime"
)

func toolNames(tools []Tool) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return out
}

func TestParseCaps(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []Group
		wantErr string
	}{
		{in: "repo,git,report,helpers", want: []Group{GroupRepo, GroupGit, GroupReport, GroupHelpers}},
		{in: "repo", want: []Group{GroupRepo}},
		{in: "report, repo", want: []Group{GroupReport, GroupRepo}},
		{in: "", wantErr: "empty"},
		{in: "repo,,git", wantErr: `unknown group ""`},
		{in: "repo,shell", wantErr: `unknown group "shell": want repo, git, report, helpers`},
		{in: "status", wantErr: `unknown group "status"`},
		{in: "repo,repo", wantErr: "given twice"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseCaps(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseCaps(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ParseCaps(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestToolsGating(t *testing.T) {
	requireBinary(t, "git")
	requireBinary(t, "ctags")
	root := t.TempDir()
	tokei := fakeTokei(t)
	all := Names()[1:]
	for _, tc := range []struct {
		name       string
		caps       []Group
		lockedDown bool
		tokei      string
		sandbox    rt.Runner
		want       []string
	}{
		{name: "default: all, in the fixed order", tokei: tokei, want: all},
		{name: "without tokei, no sloc", want: []string{"repo_manifest", "repo_chunks", "git_diff_input", "existing_report", "outline", "render_audit_report", "render_review_report"}},
		{name: "repo only", caps: []Group{GroupRepo}, tokei: tokei, want: []string{"repo_manifest", "repo_chunks"}},
		{name: "git only", caps: []Group{GroupGit}, tokei: tokei, want: []string{"git_diff_input"}},
		{name: "report only", caps: []Group{GroupReport}, tokei: tokei, want: []string{"existing_report", "render_audit_report", "render_review_report"}},
		{name: "helpers only", caps: []Group{GroupHelpers}, tokei: tokei, want: []string{"sloc", "outline"}},
		{name: "caps order does not change tools order", caps: []Group{GroupHelpers, GroupRepo}, tokei: tokei, want: []string{"repo_manifest", "repo_chunks", "sloc", "outline"}},
		{name: "locked down: no renderers", lockedDown: true, tokei: tokei, want: []string{"repo_manifest", "repo_chunks", "git_diff_input", "existing_report", "sloc", "outline"}},
		{name: "locked down report", caps: []Group{GroupReport}, lockedDown: true, tokei: tokei, want: []string{"existing_report"}},
		{name: "no groups", caps: []Group{}, tokei: tokei, want: nil},
		{
			name: "no sandbox: none of the tools that need a helper", tokei: tokei, sandbox: nil,
			want: []string{"repo_manifest", "repo_chunks", "existing_report", "render_audit_report", "render_review_report"},
		},
	} {
		if tc.sandbox == nil && !strings.HasPrefix(tc.name, "no sandbox") {
			tc.sandbox = hostRunner(t)
		}
		t.Run(tc.name, func(t *testing.T) {
			tools, helpers, err := Tools(Config{Root: root, Caps: tc.caps, LockedDown: tc.lockedDown, Tokei: tc.tokei, SearchPath: "/usr/bin:/bin", Sandbox: tc.sandbox})
			if err != nil {
				t.Fatal(err)
			}
			if got := toolNames(tools); !slices.Equal(got, tc.want) {
				t.Fatalf("tools %q, want %q", got, tc.want)
			}
			if len(helpers) != 3 {
				t.Fatalf("%d helpers", len(helpers))
			}
			for _, tl := range tools {
				if tl.Writes != strings.HasPrefix(tl.Name, "render_") {
					t.Errorf("%s: Writes = %v", tl.Name, tl.Writes)
				}
			}
		})
	}
}

func TestHelperResolution(t *testing.T) {
	requireBinary(t, "git")
	root := t.TempDir()
	tokei := fakeTokei(t)
	// A relative PATH entry holding a tokei is never searched.
	relDir := t.TempDir()
	if err := os.Symlink(tokei, filepath.Join(relDir, "tokei")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(relDir)
	helpers, err := ResolveHelpers(Config{Root: root, SearchPath: ".:bin::/usr/bin", Sandbox: hostRunner(t)})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Helper{}
	for _, h := range helpers {
		byName[h.Name] = h
	}
	if byName[HelperTokei].Available() {
		t.Errorf("tokei found through a relative PATH entry: %+v", byName[HelperTokei])
	}
	if g := byName[HelperGit]; !g.Available() || g.Source != "PATH" || !filepath.IsAbs(g.Path) || !strings.HasPrefix(g.Version, "git version ") {
		t.Errorf("git: %+v", g)
	}
	if slices.Compare(byName[HelperGit].Enables, []string{"git_diff_input"}) != 0 || slices.Compare(byName[HelperCtags].Enables, []string{"outline"}) != 0 ||
		slices.Compare(byName[HelperTokei].Enables, []string{"sloc"}) != 0 {
		t.Errorf("enables: %+v", helpers)
	}

	// Overrides: canonical, probed; a bad one is an error.
	link := filepath.Join(t.TempDir(), "tokei-link")
	if err := os.Symlink(tokei, link); err != nil {
		t.Fatal(err)
	}
	helpers, err = ResolveHelpers(Config{Root: root, Tokei: link, SearchPath: "/nonexistent", Sandbox: hostRunner(t)})
	if err != nil {
		t.Fatal(err)
	}
	if h := helpers[1]; h.Path != tokei || h.Source != "flag" || h.Version != "tokei 12.1.2 compiled with serialization support: json" {
		t.Errorf("tokei by flag: %+v (want path %s)", h, tokei)
	}
	notExec := filepath.Join(t.TempDir(), "tokei")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"relative override", Config{Root: root, Tokei: "bin/tokei"}, "--tokei \"bin/tokei\": path \"bin/tokei\" is not absolute"},
		{"missing override", Config{Root: root, Ctags: "/nonexistent/ctags"}, "--ctags \"/nonexistent/ctags\""},
		{"not executable", Config{Root: root, Tokei: notExec}, "is not executable"},
		{"a directory", Config{Root: root, Git: "/usr"}, "is not a regular file"},
		{"the wrong program", Config{Root: root, Tokei: requireBinary(t, "git")}, `want a line matching "^tokei \\d"`},
		{"Tools fails too", Config{Root: root, Git: fakeTokei(t)}, `--git`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ResolveHelpers(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ResolveHelpers: %v, want an error containing %q", err, tc.wantErr)
			}
			if _, _, err := Tools(tc.cfg); err == nil {
				t.Fatal("Tools accepted a broken helper override")
			}
		})
	}
	if _, _, err := Tools(Config{Root: filepath.Join(root, "missing")}); err == nil {
		t.Error("Tools accepted a missing root")
	}
	if _, _, err := Tools(Config{Root: root, Caps: []Group{"shell"}}); err == nil {
		t.Error("Tools accepted an unknown group")
	}
}

// TestToolSchemas checks every tool's schemas: valid JSON Schema, strict
// input objects, and a stated byte budget.
func TestToolSchemas(t *testing.T) {
	tools, _, err := Tools(Config{Root: t.TempDir(), Tokei: fakeTokei(t), SearchPath: "/usr/bin:/bin", Sandbox: hostRunner(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools {
		t.Run(tl.Name, func(t *testing.T) {
			for what, s := range map[string]json.RawMessage{"input": tl.InputSchema, "output": tl.OutputSchema} {
				if _, err := compileSchema(s); err != nil {
					t.Errorf("%s schema: %v", what, err)
				}
				var m map[string]any
				if err := json.Unmarshal(s, &m); err != nil || m["type"] != "object" {
					t.Errorf("%s schema is not an object schema", what)
				}
			}
			var in struct {
				AdditionalProperties *bool `json:"additionalProperties"`
			}
			_ = json.Unmarshal(tl.InputSchema, &in)
			if in.AdditionalProperties == nil || *in.AdditionalProperties {
				t.Error("input schema does not refuse additional properties")
			}
			if !strings.Contains(tl.Description, "Byte budget") && !strings.Contains(tl.Description, "budget") {
				t.Error("description states no byte budget")
			}
		})
	}
}

func ExampleParseCaps() {
	caps, err := ParseCaps("repo,report")
	fmt.Println(caps, err)
	_, err = ParseCaps("repo,shell")
	fmt.Println(err)
	// Output:
	// [repo report] <nil>
	// caps "repo,shell": unknown group "shell": want repo, git, report, helpers
}

func ExampleTools() {
	root, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(root)
	os.WriteFile(filepath.Join(root, "main.go"), []byte("package main\n"), 0o644)
	tools, _, err := Tools(Config{Root: root, Caps: []Group{GroupRepo}})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, _ := tools[0].Handler(context.Background(), json.RawMessage(`{}`))
	fmt.Print(res.Text)
	// Output:
	// repo_manifest .: 1 file in 0 directories, 13 bytes, 1 lines, ~4 tokens
	// languages:
	//   Go: 1 file, 13 bytes, 1 lines, ~4 tokens
	// skipped:
	//   nothing
	// directories:
	// files:
	//   main.go: 13 bytes, 1 lines, ~4 tokens, Go
}
