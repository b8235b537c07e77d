package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
)

func TestServeDownstreamFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"serve", "--downstream-max-bytes", "100"}, strings.NewReader(""), &stdout, &stderr)
	if code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "--downstream-max-bytes 100: want at least 4096") {
		t.Errorf("serve --downstream-max-bytes 100: exit %d, stdout %q, stderr %q; want exit 2 and the reason", code, stdout.String(), stderr.String())
	}
	stderr.Reset()
	code = run([]string{"serve", "-h"}, strings.NewReader(""), &stdout, &stderr)
	for _, flag := range []string{"-tool-mcp-dir", "/etc/saphira/mcp/tool-mcp.d", "-eager", "-downstream-max-bytes"} {
		if !strings.Contains(stderr.String(), flag) {
			t.Errorf("serve -h (exit %d) lacks %q", code, flag)
		}
	}
}

func TestServeMaxRequestBytesFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"serve", "--max-request-bytes", "1000"}, strings.NewReader(""), &stdout, &stderr)
	if code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "--max-request-bytes 1000: want at least 65536") {
		t.Errorf("serve --max-request-bytes 1000: exit %d, stdout %q, stderr %q; want exit 2 and the reason", code, stdout.String(), stderr.String())
	}
	stderr.Reset()
	run([]string{"serve", "-h"}, strings.NewReader(""), &stdout, &stderr)
	if !strings.Contains(stderr.String(), "-max-request-bytes") || !strings.Contains(stderr.String(), "4194304") {
		t.Errorf("serve -h lacks -max-request-bytes and its default:\n%s", stderr.String())
	}
}

// TestServeKeepEscapesFlag: a --keep-escapes value that cannot be a tool
// name is refused at parse (exit 2, the reason, nothing on stdout).
func TestServeKeepEscapesFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"serve", "--keep-escapes", "lint,a b"}, strings.NewReader(""), &stdout, &stderr)
	if want := `invalid value "lint,a b" for flag -keep-escapes: "a b" is not a tool name`; code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), want) {
		t.Errorf("serve --keep-escapes 'lint,a b': exit %d, stdout %q, stderr %q; want exit 2 and %q", code, stdout.String(), stderr.String(), want)
	}
}

// TestKeepEscapesCheck: the names must be externals of the loaded conf or
// enabled tools of the loaded registry; an unknown name is an error when
// every name is known, and a warning when the conf or the registry is
// refused (its tools are not served, so a name of one cannot be told from
// a typo).
func TestKeepEscapesCheck(t *testing.T) {
	p, _ := checkFixture(t, "tool lint EXE read 10 4096 off DIR --\n")
	loaded := conf.Load(p, conf.Options{Builtins: builtin.Names()})
	refused := conf.Parse("tools.conf", []byte("tool x /bin/sh read 1 1 off / --\n"), conf.Options{})
	reg := registryWith(t, "[tool_mcp_servers.web]\ntransport = \"streamable_http\"\nurl = \"https://mcp.example.invalid/\"\nenabled_tools = [\"search\"]\ndefault_tools_approval_mode = \"auto\"\n")
	absent := registry.Load(filepath.Join(t.TempDir(), "none"), registry.Options{})
	for _, tc := range []struct {
		name    string
		keep    keepEscapes
		c       *conf.Config
		r       *registry.Registry
		wantErr string
		warns   bool
	}{
		{"external", keepEscapes{"lint"}, loaded, absent, "", false},
		{"downstream", keepEscapes{"web__search", "lint"}, loaded, reg, "", false},
		{"unknown", keepEscapes{"lint", "nope"}, loaded, reg, "--keep-escapes nope: no external (tools.conf " + p + ") or downstream tool of that name", false},
		{"a built-in", keepEscapes{"checkpoint_status"}, loaded, absent, "built-in results are never changed", false},
		{"refused conf", keepEscapes{"lint"}, refused, absent, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := logrus.New()
			var logs bytes.Buffer
			log.SetOutput(&logs)
			err := tc.keep.check(tc.c, tc.r, log)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("check(%q) = %v, want %q", tc.keep, err, tc.wantErr)
			}
			if warned := strings.Contains(logs.String(), "--keep-escapes names no tool served"); warned != tc.warns {
				t.Errorf("check(%q) warned %v, want %v: %s", tc.keep, warned, tc.warns, logs.String())
			}
		})
	}
}

// registryWith loads a registry of one fragment holding the given servers.
func registryWith(t *testing.T, servers string) *registry.Registry {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tool-mcp.d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "10-x.toml"), []byte("schema_version = 8\n\n"+servers), 0o644); err != nil {
		t.Fatal(err)
	}
	r := registry.Load(dir, registry.Options{})
	if r.State != conf.StateLoaded {
		t.Fatalf("registry %s: %v", r.State, r.Err())
	}
	return r
}

// TestDownstreamMaxBytesDefault: without the flag, serve caps a downstream
// result at 1 MiB and hands the server that cap.
func TestDownstreamMaxBytesDefault(t *testing.T) {
	var f downstreamFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	a := &app{opts: server.Options{Sandbox: rt.FailedSandbox("bwrap", errors.New("not in this test"))}}
	if got := f.options(a, "bwrap").MaxBytes; got != 1048576 {
		t.Errorf("--downstream-max-bytes default = %d, want 1048576 (1 MiB)", got)
	}
}

// TestSandboxUIDFlag: --sandbox-uid 0 is refused at start; the chosen ids
// are the ones the load-time check judges a test-class tool's dir by: a
// dir only uid 65534 can enter is accepted with --sandbox-uid 65534,
// refused for another uid, and refused by default, where each sandbox has
// ids of its own from the range (the check holds for any of them).
func TestSandboxUIDFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"check", "--sandbox-uid", "0"}, strings.NewReader(""), &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "--sandbox-uid 0 --sandbox-gid 0: sandbox uid 0 gid 0: a sandbox never runs as root (0)") {
		t.Errorf("check --sandbox-uid 0: exit %d, stdout %q, stderr %q; want exit 2 and the reason", code, stdout.String(), stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"check", "--sandbox-uid", "x"}, strings.NewReader(""), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `invalid value "x" for flag -sandbox-uid`) {
		t.Errorf("check --sandbox-uid x: exit %d, stderr %q", code, stderr.String())
	}
	if os.Geteuid() != 0 {
		testbin.Missing(t, "the sandbox uid is chosen only when toolgate is root")
	}
	p, _ := checkFixture(t, "tool lint EXE test 10 4096 on DIR/own --\n")
	own := filepath.Join(filepath.Dir(p), "own")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, rt.SandboxUID, rt.SandboxGID); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 1, "uids 2147418112-2147483647"},
		{[]string{"--sandbox-uid", "65534"}, 0, "loaded"},
		{[]string{"--sandbox-uid", "64123", "--sandbox-gid", "64123"}, 1, "uid 64123"},
	} {
		stdout.Reset()
		stderr.Reset()
		code := run(append([]string{"check", "--conf", p}, tc.args...), strings.NewReader(""), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.want) {
			t.Errorf("check %v: exit %d, want %d and %q:\n%s%s", tc.args, code, tc.code, tc.want, stdout.String(), stderr.String())
		}
	}
}
