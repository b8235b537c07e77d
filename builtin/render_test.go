package builtin

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const auditFindings = `[
  {"title": "Debug endpoint left on", "severity": "low", "description": "The /debug handler is registered in production.", "file": "src/main.go", "line": 10},
  {"title": "SQL built by concatenation", "severity": "critical", "description": "User input reaches the query string.\n\nSee the handler.", "file": "src/db/query.sql", "line": 1, "cwe": "CWE-89", "recommendation": "Use placeholders.", "status": "new"},
  {"id": "AUTH-1", "title": "Timing-unsafe password compare", "severity": "high", "description": "Passwords are compared with ==.", "file": "src/auth/login.go", "line": 4, "end_line": 4, "cwe": "CWE-208", "status": "existing"},
  {"title": "No rate limit on login", "severity": "medium", "description": "Unbounded attempts.", "recommendation": "Add a limiter."},
  {"title": "Verbose version banner", "severity": "info", "description": "The banner names the build.", "file": "docs/guide with space.md"}
]`

const reviewComments = `[
  {"title": "Typo in comment", "severity": "nit", "body": "\"recieve\" should be \"receive\".", "file": "src/main.go", "line": 3},
  {"title": "Error ignored", "severity": "major", "body": "The error from Close is dropped.", "file": "src/util/strings.go", "line": 7, "end_line": 9,
   "suggestion": "if err := f.Close(); err != nil {\n\treturn err\n}\n"},
  {"title": "Race on the cache", "severity": "blocker", "body": "Two goroutines write the map.", "file": "src/cache.go", "line": 20},
  {"title": "Test name", "severity": "minor", "body": "Name the test after the behaviour.", "suggestion": "use ` + "```" + ` fences"}
]`

func TestRenderAuditReport(t *testing.T) {
	root := t.TempDir()
	tools := testTools(t, root, "")
	args := `{"title": "Fixture audit", "scope": "whole repository", "summary": "Five findings.", "findings": ` + auditFindings + `}`
	res := call(t, tools, "render_audit_report", args)
	if res.IsError {
		t.Fatal(res.Text)
	}
	r := res.Structured.(Rendered)
	if r.Path != "ISSUES.md" || r.Format != "markdown" || r.Items != 5 || r.Replaced ||
		r.BySeverity["critical"] != 1 || r.BySeverity["info"] != 1 {
		t.Fatalf("result %+v", r)
	}
	md, err := os.ReadFile(filepath.Join(root, "ISSUES.md"))
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "audit.md", md)

	// SARIF 2.1.0.
	res = call(t, tools, "render_audit_report", `{"format": "sarif", "findings": `+auditFindings+`}`)
	if res.IsError {
		t.Fatal(res.Text)
	}
	if p := res.Structured.(Rendered).Path; p != "ISSUES.sarif" {
		t.Fatalf("sarif default path %q", p)
	}
	sarif, err := os.ReadFile(filepath.Join(root, "ISSUES.sarif"))
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "audit.sarif", sarif)
	var log struct {
		Schema  string `json:"$schema"`
		Version string `json:"version"`
		Runs    []struct {
			Tool struct {
				Driver struct {
					Name  string `json:"name"`
					Rules []struct {
						ID string `json:"id"`
					} `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
			Results []struct {
				RuleID    string `json:"ruleId"`
				RuleIndex int    `json:"ruleIndex"`
				Level     string `json:"level"`
				Message   struct {
					Text string `json:"text"`
				} `json:"message"`
			} `json:"results"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(sarif, &log); err != nil {
		t.Fatal(err)
	}
	if log.Version != "2.1.0" || !strings.Contains(log.Schema, "sarif-2.1.0") || len(log.Runs) != 1 || log.Runs[0].Tool.Driver.Name != "toolgate" {
		t.Fatalf("not a SARIF 2.1.0 log: %+v", log)
	}
	levels := ""
	for _, r := range log.Runs[0].Results {
		if log.Runs[0].Tool.Driver.Rules[r.RuleIndex].ID != r.RuleID || r.Message.Text == "" {
			t.Errorf("result %+v does not point at its rule", r)
		}
		levels += r.Level + " "
	}
	if levels != "error error warning note none " {
		t.Errorf("levels in severity order: %q", levels)
	}

	// The same findings in another order give the same bytes.
	var fs []map[string]any
	if err := json.Unmarshal([]byte(auditFindings), &fs); err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(fs)-1; i < j; i, j = i+1, j-1 {
		fs[i], fs[j] = fs[j], fs[i]
	}
	rev, _ := json.Marshal(fs)
	res = call(t, tools, "render_audit_report", `{"title": "Fixture audit", "scope": "whole repository", "summary": "Five findings.", "output_path": "again.md", "findings": `+string(rev)+`}`)
	again, _ := os.ReadFile(filepath.Join(root, "again.md"))
	if string(again) != string(md) {
		t.Error("reordered findings rendered differently")
	}
	// Rendering again replaces the file, and says so.
	res = call(t, tools, "render_audit_report", args)
	if !res.Structured.(Rendered).Replaced {
		t.Error("second render did not report replacing ISSUES.md")
	}
}

func TestRenderReviewReport(t *testing.T) {
	root := t.TempDir()
	tools := testTools(t, root, "")
	res := call(t, tools, "render_review_report", `{"title": "Review of the fixture", "verdict": "request_changes", "summary": "Four comments.", "comments": `+reviewComments+`}`)
	if res.IsError {
		t.Fatal(res.Text)
	}
	if r := res.Structured.(Rendered); r.Path != "REVIEW.md" || r.Items != 4 || r.BySeverity["blocker"] != 1 {
		t.Fatalf("result %+v", r)
	}
	md, err := os.ReadFile(filepath.Join(root, "REVIEW.md"))
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "review.md", md)
	// What a review wrote, existing_report reads back.
	back := call(t, tools, "existing_report", `{"kind":"review"}`)
	if back.Structured.(ExistingReport).Text != string(md) {
		t.Error("existing_report does not read back what render_review_report wrote")
	}
}

func TestRenderBoundary(t *testing.T) {
	root, outside := boundaryFixture(t)
	tools := testTools(t, root, "")
	finding := `[{"title":"t","severity":"low","description":"d"}]`
	comment := `[{"title":"t","severity":"nit","body":"b"}]`
	for _, tc := range []struct {
		name, path, wantErr string
	}{
		{name: "relative new file", path: "audit.md"},
		{name: "new nested directories", path: "reports/2024/q1/audit.md"},
		{name: "replace existing", path: "docs/keep.md"},
		{name: "symlinked ancestor inside", path: "dirlink-in/audit.md"},
		{name: "absolute inside", path: filepath.Join(root, "x.md"), wantErr: "workspace-relative"},
		{name: "absolute outside", path: filepath.Join(outside, "x.md"), wantErr: "workspace-relative"},
		{name: "parent traversal", path: "../outside/x.md", wantErr: "parent traversal"},
		{name: "parent traversal inside", path: "docs/../x.md", wantErr: "parent traversal"},
		{name: "symlinked ancestor escaping", path: "dirlink-out/x.md", wantErr: "outside the workspace"},
		{name: "final symlink inside", path: "final-link.md", wantErr: "is a symlink"},
		{name: "final symlink escaping", path: "final-link-out.md", wantErr: "is a symlink"},
		{name: "git config", path: ".git/config.md", wantErr: "hidden component"},
		{name: "workflow", path: ".github/workflows/ci.md", wantErr: "hidden component"},
		{name: "wrong extension", path: "Makefile", wantErr: "want a name ending in .md"},
		{name: "source file", path: "src/main.go", wantErr: "want a name ending in .md"},
		{name: "a directory", path: "docs", wantErr: "not a regular file"},
	} {
		for _, tool := range []string{"render_audit_report", "render_review_report"} {
			t.Run(tool+"/"+tc.name, func(t *testing.T) {
				args := `{"output_path":"` + tc.path + `","findings":` + finding + `}`
				if tool == "render_review_report" {
					args = `{"output_path":"` + tc.path + `","comments":` + comment + `}`
				}
				res := call(t, tools, tool, args)
				if tc.wantErr != "" {
					wantError(t, res, tc.wantErr)
					return
				}
				if res.IsError {
					t.Fatal(res.Text)
				}
				got := res.Structured.(Rendered).Path
				b, err := os.ReadFile(filepath.Join(root, got))
				if err != nil || !strings.HasPrefix(string(b), "# ") {
					t.Fatalf("%s not written: %v", got, err)
				}
			})
		}
	}
	for _, p := range []string{"x.md", "new.md", "audit.md", "sub/audit.md"} {
		if _, err := os.Stat(filepath.Join(outside, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s written outside the workspace", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "docs/keep.md")); strings.HasPrefix(string(b), "docs") {
		t.Error("docs/keep.md was not replaced")
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret.txt")); string(b) != "outside\n" {
		t.Error("the outside file changed")
	}
	// SARIF extension rule.
	wantError(t, call(t, tools, "render_audit_report", `{"format":"sarif","output_path":"x.md","findings":`+finding+`}`), "want a name ending in .sarif")
	if res := call(t, tools, "render_audit_report", `{"format":"sarif","output_path":"out/x.sarif.json","findings":`+finding+`}`); res.IsError {
		t.Error(res.Text)
	}
}

// TestRenderHiddenThroughSymlink: the reviewer's escape: a symlinked
// directory inside the workspace led render_audit_report into
// .claude/commands and .git/hooks, which are never written.
func TestRenderHiddenThroughSymlink(t *testing.T) {
	root, _ := hiddenFixture(t)
	tools := testTools(t, root, "")
	for _, p := range []string{"cmds/review.md", "hooks/pre-commit.md", "abshooks/x.md", "chain1/hooks/x.md"} {
		res := call(t, tools, "render_audit_report", `{"output_path":"`+p+`","findings":[{"title":"t","severity":"low","description":"d"}]}`)
		wantError(t, res, "hidden component")
	}
	for _, p := range []string{".claude/commands/review.md", ".git/hooks/pre-commit.md", ".git/hooks/x.md"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s was written: %v", p, err)
		}
	}
}

func TestRenderValidation(t *testing.T) {
	root := t.TempDir()
	tools := testTools(t, root, "")
	for _, tc := range []struct {
		tool, args, wantErr string
	}{
		{"render_audit_report", `{}`, `missing required property "findings"`},
		{"render_audit_report", `{"findings":{}}`, "want array"},
		{"render_audit_report", `{"format":"html","findings":[]}`, `format "html"`},
		{"render_audit_report", `{"findings":[{"title":"t","severity":"severe","description":"d"}]}`, `severity "severe"`},
		{"render_audit_report", `{"findings":[{"title":"","severity":"low","description":"d"}]}`, "title: required"},
		{"render_audit_report", `{"findings":[{"title":"t","severity":"low"}]}`, "description: required"},
		{"render_audit_report", `{"findings":[{"title":"a\nb","severity":"low","description":"d"}]}`, "one line"},
		{"render_audit_report", `{"findings":[{"title":"t","severity":"low","description":"d","file":"../x.go"}]}`, "parent traversal"},
		{"render_audit_report", `{"findings":[{"title":"t","severity":"low","description":"d","file":"/etc/passwd"}]}`, "workspace-relative"},
		{"render_audit_report", `{"findings":[{"title":"t","severity":"low","description":"d","file":"a//b.go"}]}`, "not a clean path"},
		{"render_audit_report", `{"findings":[{"title":"t","severity":"low","description":"d","line":3}]}`, "needs file"},
		{"render_audit_report", `{"findings":[{"title":"t","severity":"low","description":"d","file":"a.go","line":5,"end_line":2}]}`, "before line 5"},
		{"render_audit_report", `{"findings":[{"title":"t","severity":"low","description":"d","file":"a.go","line":-1}]}`, "want 1 or more"},
		{"render_audit_report", `{"findings":[{"title":"t","severity":"low","description":"d","cwe":"79"}]}`, "want CWE-<number>"},
		{"render_audit_report", `{"findings":[{"id":"X","title":"t","severity":"low","description":"d"},{"id":"X","title":"u","severity":"low","description":"d"}]}`, "used twice"},
		{"render_audit_report", `{"findings":[{"id":"bad id","title":"t","severity":"low","description":"d"}]}`, `id "bad id"`},
		{"render_audit_report", `{"findings":[{"title":"t","severity":"low","description":"d","status":"open"}]}`, `status "open"`},
		{"render_audit_report", `{"findings":[{"title":"t","severity":"low","description":"d","extra":1}]}`, `unknown property "extra"`},
		{"render_audit_report", `{"findings":[],"title":"` + strings.Repeat("x", 400) + `"}`, "want at most 300"},
		{"render_review_report", `{}`, `missing required property "comments"`},
		{"render_review_report", `{"comments":[],"verdict":"lgtm"}`, `verdict "lgtm"`},
		{"render_review_report", `{"comments":[{"title":"t","severity":"critical","body":"b"}]}`, `severity "critical"`},
		{"render_review_report", `{"comments":[{"title":"t","severity":"nit","body":"b","file":"a` + "`" + `b.go"}]}`, "backquote"},
		{"render_review_report", `{"comments":[],"format":"sarif"}`, `unknown property "format"`},
	} {
		t.Run(tc.wantErr, func(t *testing.T) {
			wantError(t, call(t, tools, tc.tool, tc.args), tc.wantErr)
		})
	}
	// Too many findings.
	many := strings.Repeat(`{"title":"t","severity":"low","description":"d"},`, MaxFindings+1)
	wantError(t, call(t, tools, "render_audit_report", `{"findings":[`+strings.TrimSuffix(many, ",")+`]}`), "want at most 1000")
	// A report over MaxReportBytes.
	big := strings.Repeat(`{"title":"t","severity":"low","description":"`+strings.Repeat("d", 19000)+`"},`, 60)
	wantError(t, call(t, tools, "render_audit_report", `{"findings":[`+strings.TrimSuffix(big, ",")+`]}`), "want at most 1048576")
	// Nothing was written by any refused call.
	entries, _ := os.ReadDir(root)
	if len(entries) != 0 {
		t.Errorf("refused calls wrote %d entries", len(entries))
	}
}
