package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolgate/toolgate/internal/golden"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/direct"
)

// checkGolden compares got with testdata/name, or rewrites it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Check(t, filepath.Join("testdata", name), got)
}

// requireBinary returns the path of a binary a test needs. When it is
// missing the test is skipped loudly, or fails when TOOLGATE_REQUIRE_ALL=1.
func requireBinary(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testbin.Missing(t, "%s is not installed here (%v); this test needs it", name, err)
	}
	return p
}

// projectRoot is the project's own checkout: the directory of go.mod
// above the test's working directory.
func projectRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/toolgate/toolgate")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod of github.com/toolgate/toolgate not found above the working directory")
		}
		dir = parent
	}
}

var (
	fakeTokeiOnce  sync.Once
	fakeTokeiBytes []byte
	fakeTokeiErr   error
)

// fakeTokei builds testdata/faketokei once per test binary (keeping the
// executable in memory, not on disk) and writes a copy into a directory of
// the test's own, so that its .out/.exit/.log files are the test's. It
// returns the copy's path.
func fakeTokei(t *testing.T) string {
	t.Helper()
	fakeTokeiOnce.Do(func() {
		dir, err := os.MkdirTemp("", "faketokei")
		if err != nil {
			fakeTokeiErr = err
			return
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "tokei")
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = "/usr/local/go/bin/go"
		}
		cmd := exec.Command(goBin, "build", "-o", bin, "./testdata/faketokei")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fakeTokeiErr = fmt.Errorf("build faketokei: %w\n%s", err, out)
			return
		}
		fakeTokeiBytes, fakeTokeiErr = os.ReadFile(bin)
	})
	if fakeTokeiErr != nil {
		t.Fatal(fakeTokeiErr)
	}
	p := filepath.Join(t.TempDir(), "tokei")
	if err := os.WriteFile(p, fakeTokeiBytes, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeTree creates files (path → content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// hostRunner runs the helpers unsandboxed, on the host: the tests that use
// it check the built-ins' logic on the tests' own fixtures. What a hostile
// workspace can make a helper do is proven with the real sandbox
// (helpers_sandbox_test.go); toolgate itself never runs a helper over a
// workspace but sandboxed.
func hostRunner(t *testing.T) rt.Runner {
	return &direct.Runner{Shim: testbin.Shim(t)}
}

// testTools returns the built-ins for root with every group on, the
// given fake tokei (or none) and the host's git and ctags, run on the
// host (hostRunner).
func testTools(t *testing.T, root string, tokei string) map[string]Tool {
	t.Helper()
	return toolsOf(t, Config{Root: root, Tokei: tokei, SearchPath: "/usr/bin:/bin", Version: "test", Sandbox: hostRunner(t)})
}

// toolsWith returns the built-ins of root whose helpers run in runner.
func toolsWith(t *testing.T, root string, runner rt.Runner) map[string]Tool {
	t.Helper()
	return toolsOf(t, Config{Root: root, SearchPath: "/usr/bin:/bin", Version: "test", Sandbox: runner})
}

// toolsOf returns the built-ins of cfg by name.
func toolsOf(t *testing.T, cfg Config) map[string]Tool {
	t.Helper()
	tools, _, err := Tools(cfg)
	if err != nil {
		t.Fatalf("Tools(%+v): %v", cfg, err)
	}
	m := map[string]Tool{}
	for _, tl := range tools {
		m[tl.Name] = tl
	}
	return m
}

// call runs a tool's handler and checks its result against the tool's
// outputSchema whenever the call succeeded.
func call(t *testing.T, tools map[string]Tool, name, args string) Result {
	t.Helper()
	tl, ok := tools[name]
	if !ok {
		t.Fatalf("tool %s is not served", name)
	}
	res, err := tl.Handler(context.Background(), json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s(%s): infrastructure error: %v", name, args, err)
	}
	if !res.IsError {
		checkSchema(t, name, tl.OutputSchema, res.Structured)
	}
	return res
}

// checkSchema validates v, as JSON, against schema.
func checkSchema(t *testing.T, name string, schema json.RawMessage, v any) {
	t.Helper()
	s, err := compileSchema(schema)
	if err != nil {
		t.Fatalf("%s: outputSchema does not compile: %v", name, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: marshal structured content: %v", name, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(inst); err != nil {
		t.Errorf("%s: structured content does not match outputSchema: %v\n%s", name, err, b)
	}
}

func compileSchema(schema json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("schema.json")
}

// mustJSON marshals v indented, for golden files.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// wantError checks that res is a tool error whose text contains want.
func wantError(t *testing.T, res Result, want string) {
	t.Helper()
	if !res.IsError {
		t.Fatalf("got success %q, want an error containing %q", res.Text, want)
	}
	if !strings.Contains(res.Text, want) {
		t.Fatalf("got error %q, want it to contain %q", res.Text, want)
	}
}

// fixtureFiles are the regular files of the standard fixture.
var fixtureFiles = map[string]string{
	"README.md":                  "# fixture\n\nA small repository.\n",
	"go.mod":                     "module example.com/fixture\n\ngo 1.22\n",
	"src/main.go":                "package main\n\nimport \"fmt\"\n\n// Greet says hello.\nfunc Greet(name string) string {\n\treturn \"hello \" + name\n}\n\nfunc main() { fmt.Println(Greet(\"world\")) }\n",
	"src/auth/login.go":          "package auth\n\n// Login checks a password.\nfunc Login(user, password string) bool { return user != \"\" && password != \"\" }\n",
	"src/db/query.sql":           "SELECT 1;\n",
	"src/util/strings.go":        "package util\n\n// Reverse reverses s.\nfunc Reverse(s string) string {\n\tr := []rune(s)\n\tfor i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {\n\t\tr[i], r[j] = r[j], r[i]\n\t}\n\treturn string(r)\n}\n",
	"scripts/deploy.sh":          "#!/bin/sh\necho deploy\n",
	"docs/guide.md":              "# Guide\n\nNo trailing newline",
	"empty.txt":                  "",
	"latin1.txt":                 "caf\xe9\n",
	"image.bin":                  "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
	".env":                       "SECRET=1\n",
	".env.local":                 "SECRET=2\n",
	"config/server.pem":          "-----BEGIN CERTIFICATE-----\n",
	"config/tls.key":             "-----BEGIN PRIVATE KEY-----\n",
	"keys/id_rsa":                "-----BEGIN OPENSSH PRIVATE KEY-----\n",
	"keys/id_rsa.pub":            "ssh-rsa AAAA\n",
	"credentials.json":           "{\"token\": \"x\"}\n",
	".hidden/notes.txt":          "hidden\n",
	".github/workflows/ci.yml":   "on: push\n",
	"node_modules/left/index.js": "module.exports = 1\n",
	"vendor/dep/dep.go":          "package dep\n",
	"build/out.txt":              "built\n",
	"package-lock.json":          "{}\n",
	"go.sum":                     "example.com/x v1.0.0 h1:abc=\n",
	"yarn.lock":                  "# yarn\n",
	"ISSUES.md":                  "# Old audit\n\n- F-001 something\n",
	"REVIEW.md":                  "# Old review\n",
	"scan.sarif":                 "{}\n",
	".gitignore":                 "*.log\ntmp/\n!keep.log\n/rootonly.txt\n**/generated/**\n",
	"debug.log":                  "log\n",
	"keep.log":                   "kept though *.log\n",
	"tmp/scratch.go":             "package tmp\n",
	"rootonly.txt":               "ignored at the root only\n",
	"src/rootonly.txt":           "not ignored below the root\n",
	"src/generated/pb/x.go":      "package pb\n",
	"src/sub/.gitignore":         "*.tmp\n!important.tmp\n",
	"src/sub/a.tmp":              "ignored by the nested .gitignore\n",
	"src/sub/important.tmp":      "re-included by the nested .gitignore\n",
}

// makeFixture builds the standard fixture repository under a new temp
// dir and returns its root. Besides fixtureFiles it holds a 1 MB file, a
// 400 KiB file and a 30,000-line file (sliced), a 300 KiB single line, an
// outside directory reached by symlinks, symlinks inside, a FIFO, and a
// name with a newline.
func makeFixture(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "repo")
	outside := filepath.Join(base, "outside")
	writeTree(t, root, fixtureFiles)
	writeTree(t, outside, map[string]string{"secret.txt": "outside the workspace\n"})
	writeTree(t, root, map[string]string{
		"big/huge.txt":      strings.Repeat("0123456789abcdef\n", 1<<20/17+1), // over 1 MB: too_large
		"big/medium.txt":    strings.Repeat("a fairly ordinary line of text, number\n", 400<<10/39),
		"big/many-lines.md": strings.Repeat("x\n", 30000),
		"big/one-line.js":   strings.Repeat("var a=1;", 300<<10/8) + "\n",
	})
	symlink(t, "main.go", filepath.Join(root, "src/link-inside.go"))
	symlink(t, filepath.Join(outside, "secret.txt"), filepath.Join(root, "link-outside.txt"))
	symlink(t, outside, filepath.Join(root, "dir-outside"))
	if err := syscall.Mkfifo(filepath.Join(root, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeTree(t, root, map[string]string{"odd\nname.txt": "a newline in the name\n"})
	return root
}
