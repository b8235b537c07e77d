package builtin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/toolgate/toolgate/internal/testbin"
)

// tokeiOutput is what tokei 12 prints for `--output json` on the fixture.
const tokeiOutput = `{
  "Go": {"blanks": 5, "children": {}, "code": 14, "comments": 3, "inaccurate": false,
    "reports": [
      {"name": "./src/util/strings.go", "stats": {"blanks": 1, "blobs": {}, "code": 8, "comments": 1}},
      {"name": "./src/main.go", "stats": {"blanks": 3, "blobs": {}, "code": 5, "comments": 1}},
      {"name": "./src/auth/login.go", "stats": {"blanks": 1, "blobs": {}, "code": 1, "comments": 1}}
    ]},
  "Markdown": {"blanks": 2, "children": {}, "code": 0, "comments": 4, "inaccurate": false,
    "reports": [{"name": "./README.md", "stats": {"blanks": 2, "blobs": {}, "code": 0, "comments": 4}}]},
  "Sql": {"blanks": 0, "children": {}, "code": 1, "comments": 0, "inaccurate": false,
    "reports": [{"name": "./src/db/query.sql", "stats": {"blanks": 0, "blobs": {}, "code": 1, "comments": 0}}]},
  "Total": {"blanks": 7, "children": {}, "code": 15, "comments": 7, "inaccurate": false, "reports": []}
}`

type fakeTokeiLog struct {
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
}

func readFakeLog(t *testing.T, tokei string) fakeTokeiLog {
	t.Helper()
	b, err := os.ReadFile(tokei + ".log")
	if err != nil {
		t.Fatalf("the fake tokei did not run: %v", err)
	}
	var l fakeTokeiLog
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSloc runs sloc against a fake tokei built by the test (tokei is not
// packaged for Debian 12): it checks the argv, the exact environment, the
// working directory, and the parsing of tokei's JSON.
func TestSloc(t *testing.T) {
	root := makeFixture(t)
	tokei := fakeTokei(t)
	if err := os.WriteFile(tokei+".out", []byte(tokeiOutput), 0o644); err != nil {
		t.Fatal(err)
	}
	tools := testTools(t, root, tokei)
	res := call(t, tools, "sloc", `{}`)
	if res.IsError {
		t.Fatal(res.Text)
	}
	log := readFakeLog(t, tokei)
	if want := []string{"--output", "json", "./"}; !slices.Equal(log.Args, want) {
		t.Errorf("tokei argv %q, want %q", log.Args, want)
	}
	if !slices.Equal(log.Env, testbin.ToolEnv) {
		t.Errorf("tokei environment %q, want exactly %q", log.Env, testbin.ToolEnv)
	}
	if canon, _ := filepath.EvalSymlinks(root); log.Dir != canon {
		t.Errorf("tokei ran in %q, want the workspace %q", log.Dir, canon)
	}
	s := res.Structured.(Sloc)
	if s.Totals != (SlocCount{Files: 5, Code: 15, Comments: 7, Blanks: 7, Lines: 29}) {
		t.Errorf("totals %+v", s.Totals)
	}
	checkGolden(t, "sloc.json", mustJSON(t, s))
	checkGolden(t, "sloc.txt", []byte(res.Text))

	// Paths: validated, deduplicated, sorted and "./"-prefixed.
	res = call(t, tools, "sloc", `{"paths":["src/util", "`+filepath.Join(root, "docs")+`", "src/util", "-rf"]}`)
	wantError(t, res, "does not exist") // "-rf" does not exist in the workspace
	writeTree(t, root, map[string]string{"-rf/x.go": "package x\n"})
	res = call(t, tools, "sloc", `{"paths":["src/util", "`+filepath.Join(root, "docs")+`", "src/util", "-rf"]}`)
	if res.IsError {
		t.Fatal(res.Text)
	}
	if got, want := readFakeLog(t, tokei).Args, []string{"--output", "json", "./-rf", "./docs", "./src/util"}; !slices.Equal(got, want) {
		t.Errorf("tokei argv %q, want %q", got, want)
	}
}

func TestSlocRefusals(t *testing.T) {
	root := makeFixture(t)
	tokei := fakeTokei(t)
	tools := testTools(t, root, tokei)
	for _, tc := range []struct{ name, args, wantErr string }{
		{"parent traversal", `{"paths":["src/.."]}`, "parent traversal"},
		{"absolute outside", `{"paths":["/etc"]}`, "outside the workspace"},
		{"escaping symlink", `{"paths":["dir-outside"]}`, "outside the workspace"},
		{"escaping file symlink", `{"paths":["link-outside.txt"]}`, "outside the workspace"},
		{"empty list", `{"paths":[]}`, "want 1 to 64 paths"},
		{"not a list", `{"paths":"src"}`, "want array"},
		{"unknown property", `{"path":"src"}`, `unknown property "path"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, call(t, tools, "sloc", tc.args), tc.wantErr)
		})
	}
	if _, err := os.Stat(tokei + ".log"); err == nil {
		t.Error("tokei ran for a refused call")
	}
	// tokei failing, or printing something else than JSON.
	if err := os.WriteFile(tokei+".exit", []byte("3"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantError(t, call(t, tools, "sloc", `{}`), "tokei exited with status 3: faketokei: failing as told")
	os.Remove(tokei + ".exit")
	if err := os.WriteFile(tokei+".out", []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantError(t, call(t, tools, "sloc", `{}`), "not the expected JSON")
}

func TestSlocAbsentWithoutTokei(t *testing.T) {
	root := t.TempDir()
	cfg := Config{Root: root, SearchPath: t.TempDir()} // no tokei there
	tools, helpers, err := Tools(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools {
		if tl.Name == "sloc" {
			t.Fatal("sloc is served without tokei")
		}
	}
	for _, h := range helpers {
		if h.Name == HelperTokei && (h.Available() || h.Err == nil) {
			t.Fatalf("tokei helper %+v, want unavailable with a reason", h)
		}
	}
}
