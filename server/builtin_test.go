package server

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/direct"
)

// builtinTestRunner refuses to run anything: these tests call built-ins only.
type builtinTestRunner struct{}

func (builtinTestRunner) Run(context.Context, rt.Invocation) (rt.Result, error) {
	return rt.Result{}, os.ErrPermission
}

// requireBin skips loudly when a binary is missing, or fails when
// TOOLGATE_REQUIRE_ALL=1.
func requireBin(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		testbin.Missing(t, "%s is not installed here; this test needs it", name)
	}
}

// builtinWorkspace makes a git repository with a commit and an uncommitted
// change, an earlier report, and a fake tokei (tokei is not packaged for
// Debian 12) that prints tokei-format JSON. It returns the root and the
// fake tokei's path.
func builtinWorkspace(t *testing.T) (string, string) {
	t.Helper()
	requireBin(t, "git")
	requireBin(t, "ctags")
	root := filepath.Join(t.TempDir(), "ws")
	files := map[string]string{
		"main.go":   "package main\n\n// Run runs.\nfunc Run() int { return 1 }\n\nfunc main() { Run() }\n",
		"README.md": "# ws\n",
		"ISSUES.md": "# Earlier audit\n\n- F-001 old finding\n",
		".env":      "SECRET=1\n",
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=T", "-c", "user.email=t@e"}, args...)...)
		cmd.Dir = root
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + root, "GIT_CONFIG_NOSYSTEM=1"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", "main.go", "README.md")
	git("commit", "-q", "-m", "first")
	if err := os.WriteFile(filepath.Join(root, "main.go"), []byte(files["main.go"]+"\n// changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	tokei := filepath.Join(t.TempDir(), "tokei")
	cmd := exec.Command("go", "build", "-o", tokei, "../builtin/testdata/faketokei")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the fake tokei: %v\n%s", err, out)
	}
	out := `{"Go":{"blanks":2,"code":3,"comments":1,"reports":[{"name":"./main.go","stats":{"blanks":2,"code":3,"comments":1}}]},` +
		`"Total":{"blanks":2,"code":3,"comments":1,"reports":[]}}`
	if err := os.WriteFile(tokei+".out", []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, tokei
}

func builtinServer(t *testing.T, root, tokei, confText string) *client.Client {
	t.Helper()
	// The helpers run on the host here: these tests are about the MCP
	// surface; builtin's own tests prove them sandboxed with real bwrap.
	tools, _, err := builtin.Tools(builtin.Config{
		Root: root, Tokei: tokei, SearchPath: "/usr/bin:/bin", Version: "test",
		Sandbox: &direct.Runner{Shim: testbin.Shim(t)},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := conf.Parse("tools.conf", []byte(confText), conf.Options{Builtins: builtin.Names()})
	if confText != "" && c.State != conf.StateLoaded {
		t.Fatalf("conf refused: %v", c.Errors)
	}
	s := New(Options{Version: "test", Conf: c, Builtins: tools, Direct: builtinTestRunner{}, Sandbox: rt.ReadySandbox("bwrap", builtinTestRunner{})})
	cl := inProcess(s)
	ctx := context.Background()
	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = "2025-06-18"
	init, err := cl.Initialize(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if init.ProtocolVersion != "2025-06-18" {
		t.Fatalf("negotiated %q, want 2025-06-18", init.ProtocolVersion)
	}
	return cl
}

// TestBuiltinsList checks tools/list: checkpoint_status, the built-ins in
// their fixed order, then externals; expose off removes a built-in.
func TestBuiltinsList(t *testing.T) {
	root, tokei := builtinWorkspace(t)
	exe := filepath.Join(t.TempDir(), "ext")
	if err := os.WriteFile(exe, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	cl := builtinServer(t, root, tokei, "tool aa_external "+exe+" read 5 1024 off "+filepath.Dir(exe)+" --\nexpose existing_report off\n")
	list, err := cl.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
		if tl.Name == "aa_external" {
			continue
		}
		if len(tl.RawOutputSchema) == 0 && tl.OutputSchema.Type == "" {
			t.Errorf("%s: no outputSchema in tools/list", tl.Name)
		}
		writes := strings.HasPrefix(tl.Name, "render_")
		if ro := tl.Annotations.ReadOnlyHint; ro == nil || *ro == writes {
			t.Errorf("%s: readOnlyHint %v, writes %v", tl.Name, ro, writes)
		}
	}
	want := []string{
		"checkpoint_status", "repo_manifest", "repo_chunks", "git_diff_input", "sloc", "outline",
		"render_audit_report", "render_review_report", "aa_external",
	}
	if !slices.Equal(names, want) {
		t.Fatalf("tools/list %q, want %q", names, want)
	}
}

// TestBuiltinsCall calls every built-in once over MCP and checks
// structuredContent against the outputSchema tools/list announced, and
// isError; then a tool failure (isError) and a protocol error.
func TestBuiltinsCall(t *testing.T) {
	root, tokei := builtinWorkspace(t)
	cl := builtinServer(t, root, tokei, "")
	ctx := context.Background()
	list, err := cl.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]*jsonschema.Schema{}
	for _, tl := range list.Tools {
		schemas[tl.Name] = compileOutputSchema(t, tl)
	}
	for _, tc := range []struct {
		tool  string
		args  string
		check func(m map[string]any) bool
	}{
		{"checkpoint_status", `{}`, func(m map[string]any) bool { return m["version"] == "test" }},
		{"repo_manifest", `{"security_index":true}`, func(m map[string]any) bool {
			totals := m["totals"].(map[string]any)
			return totals["files"] == 2.0 && m["cut"] == false // main.go, README.md; .env and ISSUES.md skipped
		}},
		{"repo_chunks", `{"index":1}`, func(m map[string]any) bool {
			return strings.Contains(m["text"].(string), "=== main.go (lines 1-8 of 8) ===")
		}},
		{"git_diff_input", `{"target":"HEAD"}`, func(m map[string]any) bool {
			return m["head"] == "worktree" && m["total_files"] == 1.0
		}},
		{"existing_report", `{}`, func(m map[string]any) bool {
			return m["exists"] == true && strings.Contains(m["text"].(string), "F-001 old finding")
		}},
		{"sloc", `{"paths":["main.go"]}`, func(m map[string]any) bool {
			return m["totals"].(map[string]any)["code"] == 3.0
		}},
		{"outline", `{"path":"main.go"}`, func(m map[string]any) bool {
			for _, s := range m["symbols"].([]any) {
				if s.(map[string]any)["name"] == "Run" {
					return true
				}
			}
			return false
		}},
		{
			"render_audit_report", `{"output_path":"out/AUDIT.md","findings":[{"title":"t","severity":"high","description":"d","file":"main.go","line":4}]}`,
			func(m map[string]any) bool { return m["path"] == "out/AUDIT.md" && m["items"] == 1.0 },
		},
		{
			"render_review_report", `{"comments":[{"title":"t","severity":"nit","body":"b"}]}`,
			func(m map[string]any) bool { return m["path"] == "REVIEW.md" && m["replaced"] == false },
		},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			req := mcp.CallToolRequest{}
			req.Params.Name = tc.tool
			req.Params.Arguments = json.RawMessage(tc.args)
			res, err := cl.CallTool(ctx, req)
			if err != nil {
				t.Fatalf("%s: JSON-RPC error %v", tc.tool, err)
			}
			text := ""
			if len(res.Content) > 0 {
				if tx, ok := res.Content[0].(mcp.TextContent); ok {
					text = tx.Text
				}
			}
			if res.IsError {
				t.Fatalf("%s: isError: %s", tc.tool, text)
			}
			if text == "" {
				t.Errorf("%s: no text content", tc.tool)
			}
			m, ok := res.StructuredContent.(map[string]any)
			if !ok {
				t.Fatalf("%s: structuredContent is %T", tc.tool, res.StructuredContent)
			}
			if err := schemas[tc.tool].Validate(m); err != nil {
				t.Errorf("%s: structuredContent does not match the announced outputSchema: %v", tc.tool, err)
			}
			if !tc.check(m) {
				b, _ := json.Marshal(m)
				t.Errorf("%s: unexpected structuredContent %s", tc.tool, b)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(root, "out/AUDIT.md")); err != nil {
		t.Errorf("render_audit_report wrote nothing: %v", err)
	}

	// A tool failure is a result with isError, never a JSON-RPC error.
	for _, bad := range []struct{ tool, args, want string }{
		{"repo_manifest", `{"recursive":true}`, `unknown property "recursive"`},
		{"existing_report", `{"path":"../x"}`, "parent traversal"},
		{"git_diff_input", `{"target":"--output=/tmp/x"}`, "starts with '-'"},
		{"render_review_report", `{"output_path":"/tmp/x.md","comments":[]}`, "workspace-relative"},
	} {
		req := mcp.CallToolRequest{}
		req.Params.Name = bad.tool
		req.Params.Arguments = json.RawMessage(bad.args)
		res, err := cl.CallTool(ctx, req)
		if err != nil {
			t.Fatalf("%s(%s): JSON-RPC error %v, want isError", bad.tool, bad.args, err)
		}
		if !res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].(mcp.TextContent).Text, bad.want) {
			t.Errorf("%s(%s) = %+v, want isError containing %q", bad.tool, bad.args, res, bad.want)
		}
	}
	// Protocol misuse is a JSON-RPC error.
	req := mcp.CallToolRequest{}
	req.Params.Name = "no_such_tool"
	if _, err := cl.CallTool(ctx, req); err == nil {
		t.Error("calling an unknown tool did not give a JSON-RPC error")
	}
}

// compileOutputSchema compiles the outputSchema a tool announced.
func compileOutputSchema(t *testing.T, tl mcp.Tool) *jsonschema.Schema {
	t.Helper()
	raw := tl.RawOutputSchema
	if len(raw) == 0 {
		raw, _ = json.Marshal(tl.OutputSchema)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(tl.Name+".json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile(tl.Name + ".json")
	if err != nil {
		t.Fatalf("%s: outputSchema: %v", tl.Name, err)
	}
	return schema
}
