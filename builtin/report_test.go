package builtin

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestExistingReport(t *testing.T) {
	root, outside := boundaryFixture(t)
	writeTree(t, root, map[string]string{
		"REVIEW.md":         "# review\n",
		"reports/old.md":    "# old audit\n- F-001\n",
		".env":              "SECRET=1\n",
		".reports/x.md":     "hidden\n",
		"config/id_rsa.md":  "not really a key\n",
		"latin1.md":         "caf\xe9\n",
		"big/ISSUES.md":     strings.Repeat("a finding line of a long report\n", 300<<10/32),
		"reports/empty.md":  "",
		"reports/multi.md":  "\n",
		"reports/nested.md": "nested\n",
	})
	symlink(t, "reports/old.md", filepath.Join(root, "report-link.md"))
	symlink(t, ".env", filepath.Join(root, "innocent.md"))
	tools := testTools(t, root, "")
	for _, tc := range []struct {
		name, args string
		wantPath   string
		wantText   string
		wantExists bool
		wantErr    string
	}{
		{name: "default audit", args: `{}`, wantPath: "ISSUES.md", wantText: "# report\n", wantExists: true},
		{name: "kind audit", args: `{"kind":"audit"}`, wantPath: "ISSUES.md", wantText: "# report\n", wantExists: true},
		{name: "kind review", args: `{"kind":"review"}`, wantPath: "REVIEW.md", wantText: "# review\n", wantExists: true},
		{name: "relative path", args: `{"path":"reports/old.md"}`, wantPath: "reports/old.md", wantText: "# old audit\n- F-001\n", wantExists: true},
		{name: "absolute inside", args: `{"path":"` + filepath.Join(root, "reports/old.md") + `"}`, wantPath: "reports/old.md", wantText: "# old audit\n- F-001\n", wantExists: true},
		{name: "symlink inside", args: `{"path":"report-link.md"}`, wantPath: "reports/old.md", wantText: "# old audit\n- F-001\n", wantExists: true},
		{name: "missing is not an error", args: `{"path":"reports/none.md"}`, wantPath: "reports/none.md", wantExists: false},
		{name: "empty file", args: `{"path":"reports/empty.md"}`, wantPath: "reports/empty.md", wantExists: true},
		{name: "parent traversal", args: `{"path":"reports/../ISSUES.md"}`, wantErr: "parent traversal"},
		{name: "parent traversal out", args: `{"path":"../outside/secret.txt"}`, wantErr: "parent traversal"},
		{name: "absolute outside", args: `{"path":"` + filepath.Join(outside, "secret.txt") + `"}`, wantErr: "outside the workspace"},
		{name: "symlink escaping", args: `{"path":"link-out"}`, wantErr: "outside the workspace"},
		{name: "symlinked dir escaping", args: `{"path":"dirlink-out/secret.txt"}`, wantErr: "outside the workspace"},
		{name: "likely secret", args: `{"path":".env"}`, wantErr: "hidden or likely-secret"},
		{name: "symlink to a secret", args: `{"path":"innocent.md"}`, wantErr: "hidden or likely-secret"},
		{name: "hidden directory", args: `{"path":".reports/x.md"}`, wantErr: "hidden or likely-secret"},
		{name: "secret-like name", args: `{"path":"config/id_rsa.md"}`, wantErr: "hidden or likely-secret"},
		{name: "directory", args: `{"path":"reports"}`, wantErr: "not a regular file"},
		{name: "not UTF-8", args: `{"path":"latin1.md"}`, wantErr: "not UTF-8"},
		{name: "path and kind", args: `{"path":"ISSUES.md","kind":"audit"}`, wantErr: "not both"},
		{name: "unknown kind", args: `{"kind":"security"}`, wantErr: `kind "security"`},
		{name: "unknown property", args: `{"file":"ISSUES.md"}`, wantErr: `unknown property "file"`},
		{name: "wrong type", args: `{"path":true}`, wantErr: "want string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, tools, "existing_report", tc.args)
			if tc.wantErr != "" {
				wantError(t, res, tc.wantErr)
				return
			}
			if res.IsError {
				t.Fatal(res.Text)
			}
			r := res.Structured.(ExistingReport)
			if r.Path != tc.wantPath || r.Exists != tc.wantExists || r.Text != tc.wantText || r.Cut {
				t.Fatalf("got %+v, want path %q exists %v text %q", r, tc.wantPath, tc.wantExists, tc.wantText)
			}
			if tc.wantExists && res.Text != tc.wantText {
				t.Fatalf("text content %q, want the report %q", res.Text, tc.wantText)
			}
		})
	}

	// A report over the budget is cut at a line boundary and says so.
	res := call(t, tools, "existing_report", `{"path":"big/ISSUES.md"}`)
	r := res.Structured.(ExistingReport)
	if !r.Cut || r.TextBytes > BudgetReport || !strings.HasSuffix(r.Text, "report\n") || r.Bytes <= int64(r.TextBytes) {
		t.Fatalf("cut %v, %d of %d bytes, ends %q", r.Cut, r.TextBytes, r.Bytes, r.Text[len(r.Text)-20:])
	}
	if len(res.Text) > BudgetReport || !strings.Contains(res.Text, "[cut: showed") {
		t.Fatalf("text %d bytes, marker present %v", len(res.Text), strings.Contains(res.Text, "[cut: showed"))
	}
}
