package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/golden"
)

// The secrets of the registry tests: one in toolgate's environment (the
// value of FIRECRAWL_API_KEY), one written literally into the refused
// fragments. Neither may appear in any output.
const (
	registryEnvSecret     = "fc-Toolgate0Environment1Secret2Value"
	registryLiteralSecret = "Toolgate0Literal1Secret2Value3"
)

// newRegistryFixture lays out a temp root with bin/ida-pro-mcp (an
// executable), work/ (a directory) and tool-mcp.d/ holding the fragments
// of testdata/registry/<set>, with @ROOT@ replaced. It returns the root.
func newRegistryFixture(t *testing.T, set string) string {
	t.Helper()
	root := registryRoot(t)
	dir := filepath.Join(root, "tool-mcp.d")
	for _, d := range []string{filepath.Join(root, "bin"), filepath.Join(root, "work"), dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "ida-pro-mcp"), []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join("testdata", "registry", set)
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, e.Name())
		if err := os.WriteFile(p, bytes.ReplaceAll(b, []byte("@ROOT@"), []byte(root)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// registryRootPlaceholder stands for the fixture root in golden files. It
// has the length of every root registryRoot makes, so that the columns of
// the golden tables line up as they did in the real output.
const registryRootPlaceholder = "/tmp/tgreg-XXXXXXXX"

// registryRoot makes a fresh directory /tmp/tgreg-<8 hex digits>: a fixed
// length, whatever $TMPDIR is, because tabwriter aligns columns on the
// real paths before the test replaces them.
func registryRoot(t *testing.T) string {
	t.Helper()
	for range 100 {
		root := fmt.Sprintf("/tmp/tgreg-%08x", rand.Uint32())
		err := os.Mkdir(root, 0o755)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(root) })
		if err := os.Chmod(root, 0o755); err != nil {
			t.Fatal(err)
		}
		return root
	}
	t.Fatal("no free /tmp/tgreg-* name")
	return ""
}

// setRegistryEnv gives the test process the environment the golden files
// assume: FIRECRAWL_API_KEY set (to a secret), IDA_MCP_TOKEN set,
// FIRECRAWL_TEAM unset.
func setRegistryEnv(t *testing.T) {
	t.Setenv("FIRECRAWL_API_KEY", registryEnvSecret)
	t.Setenv("IDA_MCP_TOKEN", "x")
	t.Setenv("FIRECRAWL_TEAM", "")
	if err := os.Unsetenv("FIRECRAWL_TEAM"); err != nil {
		t.Fatal(err)
	}
}

// runRegistry runs toolgate with args ($DIR is the fixture's registry
// directory) and returns the exit code and the transcript with the root
// replaced by registryRootPlaceholder.
func runRegistry(t *testing.T, root string, args ...string) (int, string) {
	t.Helper()
	dir := filepath.Join(root, "tool-mcp.d")
	expanded := make([]string, len(args))
	for i, a := range args {
		expanded[i] = strings.ReplaceAll(a, "$DIR", dir)
	}
	var stdout, stderr bytes.Buffer
	code := run(expanded, strings.NewReader(""), &stdout, &stderr)
	for _, secret := range []string{registryEnvSecret, registryLiteralSecret} {
		if strings.Contains(stdout.String()+stderr.String(), secret) {
			t.Errorf("toolgate %s printed a secret value:\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
		}
	}
	transcript := fmt.Sprintf("$ toolgate %s\nexit %d\n--- stdout\n%s--- stderr\n%s",
		strings.Join(args, " "), code, stdout.String(), stderr.String())
	return code, strings.ReplaceAll(transcript, root, registryRootPlaceholder)
}

func TestRegistryCommandGolden(t *testing.T) {
	setRegistryEnv(t)
	for _, tc := range []struct {
		golden string
		set    string
		args   []string
		code   int
	}{
		{"list", "good", []string{"registry", "list", "--tool-mcp-dir", "$DIR"}, 0},
		{"show_toml", "good", []string{"registry", "show", "ida_pro", "--tool-mcp-dir", "$DIR"}, 0},
		{"show_json", "good", []string{"registry", "show", "--format", "json", "--tool-mcp-dir", "$DIR", "firecrawl"}, 0},
		{"show_unknown", "good", []string{"registry", "show", "--tool-mcp-dir", "$DIR", "nope"}, 1},
		{"validate", "good", []string{"registry", "validate", "--tool-mcp-dir", "$DIR"}, 0},
		{"validate_ready", "good", []string{"registry", "validate", "--tool-mcp-dir", "$DIR", "ida_pro"}, 0},
		{"validate_not_ready", "good", []string{"registry", "validate", "--tool-mcp-dir", "$DIR", "local"}, 1},
		{"validate_missing_variable", "good", []string{"registry", "validate", "--tool-mcp-dir", "$DIR", "firecrawl"}, 1},
		{"validate_unknown", "good", []string{"registry", "validate", "--tool-mcp-dir", "$DIR", "nope"}, 1},
		{"list_refused", "refused", []string{"registry", "list", "--tool-mcp-dir", "$DIR"}, 1},
		{"show_refused", "refused", []string{"registry", "show", "--tool-mcp-dir", "$DIR", "ida_pro"}, 1},
		{"validate_refused", "refused", []string{"registry", "validate", "--tool-mcp-dir", "$DIR"}, 1},
		{"list_absent", "good", []string{"registry", "list", "--tool-mcp-dir", "$DIR/nope"}, 0},
		{"usage_no_command", "good", []string{"registry"}, 2},
		{"usage_unknown_command", "good", []string{"registry", "frob"}, 2},
		{"usage_show_no_id", "good", []string{"registry", "show", "--tool-mcp-dir", "$DIR"}, 2},
		{"usage_show_format", "good", []string{"registry", "show", "--format", "yaml", "--tool-mcp-dir", "$DIR", "ida_pro"}, 2},
		{"list_pinned", "pinned", []string{"registry", "list", "--tool-mcp-dir", "$DIR"}, 0},
		{"show_pinned_toml", "pinned", []string{"registry", "show", "--tool-mcp-dir", "$DIR", "ida_pro"}, 0},
		{"show_pinned_json", "pinned", []string{"registry", "show", "--format", "json", "--tool-mcp-dir", "$DIR", "firecrawl"}, 0},
		{"validate_pinned", "pinned", []string{"registry", "validate", "--tool-mcp-dir", "$DIR"}, 0},
		{"validate_pinned_missing", "pinned", []string{"registry", "validate", "--tool-mcp-dir", "$DIR", "ida_pro"}, 1},
		{"usage_require_pins", "pinned", []string{"registry", "validate", "--require-pins", "--tool-mcp-dir", "$DIR"}, 2},
		{"pin_absent", "good", []string{"registry", "pin", "--tool-mcp-dir", "$DIR/nope"}, 1},
		{"pin_unknown", "good", []string{"registry", "pin", "--tool-mcp-dir", "$DIR", "nope"}, 1},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			root := newRegistryFixture(t, tc.set)
			code, got := runRegistry(t, root, tc.args...)
			if code != tc.code {
				t.Errorf("toolgate %s: exit %d, want %d", strings.Join(tc.args, " "), code, tc.code)
			}
			golden.Check(t, filepath.Join("testdata", "registry", tc.golden+".golden"), []byte(got))
		})
	}
}

// TestRegistryCommandsNeverPrintSecrets runs every subcommand against a
// registry whose referenced variables hold a secret in toolgate's
// environment, and against a refused registry with secrets written into its
// fragments (a plaintext bearer_token, an Authorization header, an
// --api-key argument, a credential-named env variable, a URL password):
// runRegistry fails the test if either secret appears in any output.
func TestRegistryCommandsNeverPrintSecrets(t *testing.T) {
	setRegistryEnv(t)
	// Every referenced variable holds the secret.
	t.Setenv("FIRECRAWL_TEAM", registryEnvSecret)
	t.Setenv("IDA_MCP_TOKEN", registryEnvSecret)
	for _, set := range []string{"good", "refused"} {
		root := newRegistryFixture(t, set)
		for _, args := range [][]string{
			{"registry", "list", "--tool-mcp-dir", "$DIR"},
			{"registry", "validate", "--tool-mcp-dir", "$DIR"},
			{"registry", "validate", "--tool-mcp-dir", "$DIR", "firecrawl"},
			{"registry", "validate", "--tool-mcp-dir", "$DIR", "ida_pro"},
			{"registry", "show", "--tool-mcp-dir", "$DIR", "firecrawl"},
			{"registry", "show", "--tool-mcp-dir", "$DIR", "ida_pro"},
			{"registry", "show", "--format", "json", "--tool-mcp-dir", "$DIR", "firecrawl"},
			{"registry", "show", "--format", "json", "--tool-mcp-dir", "$DIR", "ida_pro"},
		} {
			_, out := runRegistry(t, root, args...)
			// The good registry's validate really reads the variables.
			if set == "good" && args[1] == "validate" && len(args) == 4 && !strings.Contains(out, "FIRECRAWL_API_KEY (bearer_token_env_var)  set") {
				t.Errorf("validate did not report FIRECRAWL_API_KEY set:\n%s", out)
			}
		}
	}
}

// TestRegistryShowLoadsBack checks that `registry show` prints a fragment
// that loads back to the same definition (gofmt-style idempotence).
func TestRegistryShowLoadsBack(t *testing.T) {
	root := newRegistryFixture(t, "good")
	for _, id := range []string{"firecrawl", "ida_pro", "local"} {
		var out1, out2, stderr bytes.Buffer
		if code := run([]string{"registry", "show", "--tool-mcp-dir", filepath.Join(root, "tool-mcp.d"), id}, nil, &out1, &stderr); code != 0 {
			t.Fatalf("show %s: exit %d: %s", id, code, stderr.String())
		}
		again := filepath.Join(root, "again-"+id)
		if err := os.Mkdir(again, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(again, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(again, "x.toml"), out1.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if code := run([]string{"registry", "show", "--tool-mcp-dir", again, id}, nil, &out2, &stderr); code != 0 {
			t.Fatalf("show of the shown %s: exit %d: %s\n%s", id, code, stderr.String(), out1.String())
		}
		// Only the comment header (where it was defined) may differ.
		body := func(b bytes.Buffer) string {
			var keep []string
			for l := range strings.SplitSeq(b.String(), "\n") {
				if !strings.HasPrefix(l, "#") {
					keep = append(keep, l)
				}
			}
			return strings.Join(keep, "\n")
		}
		if body(out1) != body(out2) {
			t.Errorf("show %s is not stable:\n%s\nthen\n%s", id, out1.String(), out2.String())
		}
	}
}

// TestRegistryValidateCollision: registry validate refuses a registry
// whose served name a tools.conf tool takes, as serve does (the check
// lived in the server alone, and validate said ready).
func TestRegistryValidateCollision(t *testing.T) {
	root := newRegistryFixture(t, "good")
	confPath := filepath.Join(root, "tools.conf")
	line := fmt.Sprintf("tool ida_pro__decompile %s read 5 100 off %s --\n", filepath.Join(root, "bin", "ida-pro-mcp"), filepath.Join(root, "work"))
	if err := os.WriteFile(confPath, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runRegistry(t, root, "registry", "validate", "--tool-mcp-dir", "$DIR", "--conf", confPath)
	if code != 1 || !strings.Contains(out, `served name "ida_pro__decompile" collides with the tools.conf tool at`) {
		t.Errorf("validate with a colliding tools.conf: exit %d\n%s", code, out)
	}
	if code, out := runRegistry(t, root, "registry", "validate", "--tool-mcp-dir", "$DIR", "--conf", filepath.Join(root, "absent.conf")); code != 0 {
		t.Errorf("validate without a tools.conf: exit %d\n%s", code, out)
	}
}
