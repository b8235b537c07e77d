package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/golden"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
)

// checkFixture writes tools.conf text (EXE and DIR replaced by a real
// executable and directory) and returns its path and a replacer that turns
// the temp paths back into placeholders.
func checkFixture(t *testing.T, text string) (string, *strings.Replacer) {
	t.Helper()
	root := testbin.Dir(t) // fixed-length name, traversable by the sandbox uid
	exe := filepath.Join(root, "lint")
	git := filepath.Join(root, "git")
	for _, p := range []string{exe, git} {
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(git, filepath.Join(root, "vcs")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "tools.conf")
	text = strings.NewReplacer("EXE", exe, "DIR", root).Replace(text)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, strings.NewReplacer(exe, "EXE", root, "DIR")
}

func TestCheckGolden(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		code       int
	}{
		{"loaded", "# example\ntool lint_repo EXE test 120 65536 on DIR -- --strict \"a b\"\ntool git_log EXE read 30 4096 off DIR --\nexpose render_review_report off\n", 0},
		{"refused", "tool ok EXE read 1 1 off DIR --\ntool sh /bin/sh read 1 1 off DIR -- -c id\ntool lint EXE read 0 1 on DIR --\nexpose checkpoint_status off\nsomething else\n", 1},
		{"empty", "# nothing yet\n", 0},
		{"git-read", "tool git_status DIR/git read 30 65536 off DIR -- --no-pager status --short\ntool git_diff_check DIR/git test 60 65536 on DIR -- --no-pager diff --check\ntool vcs_log DIR/vcs read 30 4096 off DIR -- log -n 3\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, back := checkFixture(t, tc.conf)
			var out, errb bytes.Buffer
			// Host-independent: the helpers group depends on what is installed.
			code := run([]string{"check", "--conf", p, "--caps", "repo,git,report"}, nil, &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, errb.String())
			}
			got := back.Replace(out.String())
			golden.Check(t, filepath.Join("testdata", "check-"+tc.name+".golden"), []byte(got))
			// --list-tools is the same report.
			var out2 bytes.Buffer
			if code2 := run([]string{"--list-tools", "--conf", p, "--caps", "repo,git,report"}, nil, &out2, &errb); code2 != code || out2.String() != out.String() {
				t.Errorf("--list-tools differs from check (exit %d)", code2)
			}
		})
	}
}

func TestCheckAbsent(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"check", "--conf", filepath.Join(t.TempDir(), "none")}, nil, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), ": absent") || !strings.Contains(out.String(), "checkpoint_status") {
		t.Errorf("exit %d:\n%s", code, out.String())
	}
}

func TestVersionAndUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, nil, &out, &errb); code != 0 || out.String() != "toolgate dev\n" {
		t.Errorf("version: %d %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"frobnicate"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %d %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"check", "--backend", "chroot"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown sandbox backend "chroot"`) {
		t.Errorf("bad backend: %d %q", code, errb.String())
	}
}

// TestCheckUntrustedConf: a tools.conf in a directory of another user's
// (uid 65534) is refused, fail-closed, with the path, owner, mode and fix
// in check's report; built-ins stay on.
func TestCheckUntrustedConf(t *testing.T) {
	if os.Geteuid() != 0 {
		testbin.Missing(t, "this test chowns a directory to uid 65534 and must run as root (uid %d)", os.Geteuid())
	}
	p, back := checkFixture(t, "tool lint_repo EXE test 120 65536 on DIR --\n")
	dir := filepath.Dir(p)
	if err := os.Lchown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"check", "--conf", p, "--caps", "repo"}, nil, &out, &errb)
	got := back.Replace(out.String())
	for _, want := range []string{
		"tools.conf DIR/tools.conf: refused\n",
		// Under a sticky /tmp, the entry rule; otherwise the directory rule.
		"  refused: file: untrusted path: ",
		"is owned by uid 65534, not by root",
		"chown root DIR",
		"  refused: every external tool and expose subtraction is disabled; built-ins stay on\n",
		"checkpoint_status",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("check of a conf in uid 65534's directory lacks %q:\n%s", want, got)
		}
	}
	if code != 1 || strings.Contains(got, "lint_repo") {
		t.Errorf("exit %d (want 1), and the refused conf's tool must not be listed:\n%s", code, got)
	}
}

// TestCheckSandboxDirs: the load-time rule of test-class tools, as serve
// and check apply it (sandboxToolCheck, runtime.CheckSandboxTool), on real
// directories: a host root, or a dir under a kernel interface or /etc,
// refuses the line, and so does a dir or an exe the sandbox uid cannot reach (as root,
// the sandbox runs as 65534); a project directory it can reach loads.
func TestCheckSandboxDirs(t *testing.T) {
	p, _ := checkFixture(t, "")
	root := filepath.Dir(p)
	exe := filepath.Join(root, "lint")
	private := filepath.Join(root, "private")
	for _, d := range []string{private, filepath.Join(private, "project")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	hidden := filepath.Join(private, "lint")
	if err := os.WriteFile(hidden, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, exe string
		root           bool   // the rule needs the sandbox uid: root only
		want           string // "" loads
	}{
		{"host root /", "/", exe, false, `dir "/" cannot be bound into a sandbox: it would expose the host's /`},
		{"/etc", "/etc", exe, false, `dir "/etc" cannot be bound into a sandbox: it would expose the host's /etc`},
		{"/home", "/home", exe, false, `dir "/home" cannot be bound into a sandbox: it would expose the host's /home`},
		{"/tmp", "/tmp", exe, false, `dir "/tmp" cannot be bound into a sandbox: it would expose the host's /tmp`},
		{"under /proc", "/proc/sys", exe, false, `dir "/proc/sys" is under /proc, which is never bound into a sandbox (the sandbox has its own)`},
		{"under /sys", "/sys/kernel", exe, false, `dir "/sys/kernel" is under /sys, which is never bound into a sandbox`},
		{"under /etc", "/etc/apt", exe, false, `dir "/etc/apt" is under /etc, which is never bound into a sandbox`},
		{
			"a dir below a 0700 dir", filepath.Join(private, "project"), exe, true,
			fmt.Sprintf(`the sandbox runs as uids 2147418112-2147483647, gids 2147418112-2147483647, which cannot use the dir: %q (mode 0700, owner 0:0) does not allow it`, private),
		},
		{
			"an exe below a 0700 dir", root, hidden, true,
			fmt.Sprintf(`the sandbox runs as uids 2147418112-2147483647, gids 2147418112-2147483647, which cannot execute %q: %q (mode 0700, owner 0:0) does not allow it`, hidden, private),
		},
		{"a project dir", root, exe, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(tc.dir); err != nil {
				t.Skipf("%s does not exist here: %v", tc.dir, err)
			}
			if tc.root && os.Geteuid() != 0 {
				testbin.Missing(t, "the sandbox uid (65534) is checked only when toolgate runs as root (uid %d)", os.Geteuid())
			}
			line := fmt.Sprintf("tool lint %s test 10 4096 on %s --\n", tc.exe, tc.dir)
			if err := os.WriteFile(p, []byte(line), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := run([]string{"check", "--conf", p, "--caps", "repo"}, nil, &out, &errb)
			if tc.want == "" {
				if code != 0 || !strings.Contains(out.String(), ": loaded") {
					t.Errorf("check of %s: exit %d, want it loaded:\n%s", tc.dir, code, out.String())
				}
				return
			}
			if want := "  refused line 1: tool: " + tc.want; code != 1 || !strings.Contains(out.String(), want) {
				t.Errorf("check of a test tool in %s: exit %d, want 1 and %q:\n%s", tc.dir, code, want, out.String())
			}
		})
	}
}

// TestServeLogsRepoConfigWarning: serve logs check's warning at start-up,
// one entry per line, at warning level.
func TestServeLogsRepoConfigWarning(t *testing.T) {
	p, _ := checkFixture(t, "tool git_log DIR/git read 30 4096 off DIR -- log -n 3\n")
	var logs bytes.Buffer
	log := logrus.New()
	log.SetOutput(&logs)
	c := conf.Load(p, conf.Options{Builtins: builtin.Names()})
	if c.State != conf.StateLoaded {
		t.Fatalf("Load: %s %v", c.State, c.Err())
	}
	logConf(log, c)
	if !strings.Contains(logs.String(), "level=warning msg=\"tool git_log is class read and runs ") || !strings.Contains(logs.String(), "make it class test with the sandbox on") || !strings.Contains(logs.String(), "line=1") {
		t.Errorf("serve's start-up log lacks the warning:\n%s", logs.String())
	}
}

// TestEveryKnownBackendHasAPreparer: the backend table and rt's list of
// backends are the same set, and only bwrap runs the registry's stdio
// servers.
func TestEveryKnownBackendHasAPreparer(t *testing.T) {
	if len(sandboxBackends) != len(rt.KnownBackends()) {
		t.Errorf("%d backends in the table for %d known backends", len(sandboxBackends), len(rt.KnownBackends()))
	}
	for _, b := range rt.KnownBackends() {
		row := sandboxBackends[b]
		if row.prepare == nil {
			t.Errorf("backend %s has no preparer", b)
		}
		if row.services != (b == rt.BackendBwrap) {
			t.Errorf("backend %s: services = %v, want %v", b, row.services, b == rt.BackendBwrap)
		}
	}
}

// TestAuditConfRecord pins the audit record of a refused tools.conf line,
// byte for byte but its time: operators' tooling and the e2e suite read
// its keys.
func TestAuditConfRecord(t *testing.T) {
	c := conf.Parse("/etc/tools.conf", []byte("tool bad /bin/bash read 10 4096 off /tmp -- MARKER_ARG\n"), conf.Options{})
	var buf bytes.Buffer
	audit := logrus.New()
	audit.SetFormatter(&logrus.JSONFormatter{})
	audit.SetOutput(&buf)
	auditConf(audit, c)
	got := regexp.MustCompile(`"time":"[^"]*"`).ReplaceAllString(strings.TrimSpace(buf.String()), `"time":"*"`)
	want := `{"conf":"/etc/tools.conf","field":"exe","kind":"conf","level":"info","line":1,"msg":"conf refused",` +
		`"reason":"basename \"bash\" is a shell or interpreter (denylist entry \"bash\"): denied by policy","state":"refused","time":"*"}`
	if got != want {
		t.Errorf("conf audit record:\n got %s\nwant %s", got, want)
	}
}

// TestCheckShowsCredentials: check lists a tool's credentials by
// destination, header and file, and its env line, never a secret's value;
// a secret file in the tool's dir (which its sandbox binds) is refused.
func TestCheckShowsCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		testbin.Missing(t, "secret files are trusted as tools.conf is: this test makes them as root")
	}
	secrets, err := os.MkdirTemp("", "toolgate-secrets-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(secrets) })
	key := filepath.Join(secrets, "api")
	if err := os.WriteFile(key, []byte("Bearer sk-check-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, _ := checkFixture(t, "tool api EXE test 10 4096 on DIR --\negress api api.example.com:443\ncredential api api.example.com:443 authorization "+key+"\nenv api HOME=/tmp\n")
	var stdout, stderr bytes.Buffer
	code := run([]string{"check", "--conf", p, "--sandbox-uid", "65534"}, strings.NewReader(""), &stdout, &stderr)
	out := stdout.String() + stderr.String()
	if code != 0 || !strings.Contains(out, "  api: api.example.com:443 Authorization (from "+key+")") || !strings.Contains(out, "  api: HOME=/tmp") {
		t.Errorf("check: exit %d, want 0 and the credential and env listed:\n%s", code, out)
	}
	if strings.Contains(out, "sk-check-secret") {
		t.Errorf("check shows the secret:\n%s", out)
	}
	inDir := filepath.Join(filepath.Dir(p), "key")
	if err := os.WriteFile(inDir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	p2, _ := checkFixture(t, "tool api EXE test 10 4096 on DIR --\negress api api.example.com:443\ncredential api api.example.com:443 Authorization DIR/key\n")
	if err := os.Rename(inDir, filepath.Join(filepath.Dir(p2), "key")); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	code = run([]string{"check", "--conf", p2, "--sandbox-uid", "65534"}, strings.NewReader(""), &stdout, &stderr)
	if code != 1 || !strings.Contains(stdout.String()+stderr.String(), "which \"api\"'s sandbox binds") {
		t.Errorf("a secret file in the tool's dir: exit %d, want 1 and the reason:\n%s%s", code, stdout.String(), stderr.String())
	}
}
