package conf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fixture is a temp dir with an executable "ok" tool, a plain file, a
// working dir, and symlinks, for lines to name.
type fixture struct {
	dir  string // a valid working dir
	exe  string // a valid executable
	root string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	root := t.TempDir()
	f := fixture{root: root, dir: filepath.Join(root, "work"), exe: filepath.Join(root, "bin", "lint")}
	mkdir(t, f.dir)
	mkdir(t, filepath.Join(root, "bin"))
	writeExe(t, f.exe)
	writeExe(t, filepath.Join(root, "bin", "bash"))
	writeExe(t, filepath.Join(root, "bin", "python3.12"))
	if err := os.WriteFile(filepath.Join(root, "bin", "plain"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A harmless name that resolves to a denied one: the bypass the
	// resolved-path check closes.
	symlink(t, filepath.Join(root, "bin", "bash"), filepath.Join(root, "bin", "innocent"))
	symlink(t, f.exe, filepath.Join(root, "bin", "alias"))
	symlink(t, f.dir, filepath.Join(root, "worklink"))
	return f
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeExe(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

var testBuiltins = []string{"checkpoint_status", "repo_manifest", "sloc"}

func parse(t *testing.T, text string) *Config {
	t.Helper()
	return Parse("tools.conf", []byte(text), Options{Builtins: testBuiltins})
}

// firstErr returns the single *Error of a refused config.
func firstErr(t *testing.T, c *Config) *Error {
	t.Helper()
	if c.State != StateRefused {
		t.Fatalf("State = %s, want refused", c.State)
	}
	if len(c.Tools) != 0 || len(c.Exposes) != 0 {
		t.Fatalf("refused config carries %d tools, %d exposes: want none", len(c.Tools), len(c.Exposes))
	}
	var e *Error
	if !errors.As(c.Errors[0], &e) {
		t.Fatalf("error %v is not a *conf.Error", c.Errors[0])
	}
	return e
}

// line builds a tool line from fields, replacing "EXE" and "DIR".
func (f fixture) line(fields string) string {
	r := strings.NewReplacer("EXE", f.exe, "DIR", f.dir, "ROOT", f.root)
	return r.Replace(fields)
}

func TestParseAcceptsSeedExample(t *testing.T) {
	f := newFixture(t)
	// The seed's verified example line, with the fixture's exe and dir.
	c := parse(t, f.line("tool codex_review_uncommitted EXE read 300 32768 off DIR -- exec --ephemeral --sandbox read-only review --uncommitted\n"))
	if c.State != StateLoaded {
		t.Fatalf("State = %s (%v), want loaded", c.State, c.Err())
	}
	want := Tool{
		Name: "codex_review_uncommitted", Exe: f.exe, ExeResolved: f.exe, Class: ClassRead,
		Timeout: 300 * time.Second, MaxBytes: 32768, Sandbox: false, Dir: f.dir, DirResolved: f.dir,
		Args: []string{"exec", "--ephemeral", "--sandbox", "read-only", "review", "--uncommitted"}, Line: 1,
	}
	got := c.Tools[0]
	if got.Name != want.Name || got.Exe != want.Exe || got.ExeResolved != want.ExeResolved || got.Class != want.Class ||
		got.Timeout != want.Timeout || got.MaxBytes != want.MaxBytes || got.Sandbox != want.Sandbox ||
		got.Dir != want.Dir || got.DirResolved != want.DirResolved || strings.Join(got.Args, "|") != strings.Join(want.Args, "|") ||
		got.Line != want.Line {
		t.Errorf("Tools[0] = %+v\nwant %+v", got, want)
	}
	if argv := got.Argv(); argv[0] != f.exe || len(argv) != 7 {
		t.Errorf("Argv() = %q", argv)
	}
}

func TestParseTokens(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name     string
		text     string
		wantArgs []string
		wantN    int
	}{
		{"zero fixed args", "tool a EXE test 1 1 on DIR --", []string{}, 1},
		{"hash inside a token is not a comment", "tool a EXE read 1 1 off DIR -- a#b", []string{"a#b"}, 1},
		{"hash after whitespace starts a comment", "tool a EXE read 1 1 off DIR -- x #y z", []string{"x"}, 1},
		{"hash after a tab starts a comment", "tool a EXE read 1 1 off DIR -- x\t#y", []string{"x"}, 1},
		{"comment at line start", "# tool a EXE read 1 1 off DIR --\n", nil, 0},
		{"indented comment", "   # anything at all", nil, 0},
		{"tabs separate", "tool\ta\tEXE\tread\t1\t1\toff\tDIR\t--\tx", []string{"x"}, 1},
		{"runs of spaces separate", "tool   a  EXE read 1 1 off DIR  --   x   y", []string{"x", "y"}, 1},
		{"blank lines", "\n\n   \n\t\n", nil, 0},
		{"later -- is a fixed arg", "tool a EXE read 1 1 off DIR -- -- x", []string{"--", "x"}, 1},
		{"metacharacters in fixed args are data", "tool a EXE read 1 1 off DIR -- ;|&$ 'q' \"d\"", []string{";|&$", "'q'", `"d"`}, 1},
		{"no trailing newline", "tool a EXE read 1 1 off DIR -- x", []string{"x"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parse(t, f.line(tc.text))
			if c.State != StateLoaded {
				t.Fatalf("State = %s (%v), want loaded", c.State, c.Err())
			}
			if len(c.Tools) != tc.wantN {
				t.Fatalf("%d tools, want %d", len(c.Tools), tc.wantN)
			}
			if tc.wantN == 1 && strings.Join(c.Tools[0].Args, "|") != strings.Join(tc.wantArgs, "|") {
				t.Errorf("Args = %q, want %q", c.Tools[0].Args, tc.wantArgs)
			}
		})
	}
}

// TestToolLineRules has one rejecting case (or more) for every rule of a
// tool line, each checked for the field and a specific reason.
func TestToolLineRules(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name, line, field, reason string
	}{
		// shape
		{"too few fields", "tool a EXE read 1 1 off DIR", "--", "8 fields and no --"},
		{"-- too early", "tool a EXE read 1 1 DIR -- x", "--", "is token 8, must be exactly the 9th"},
		{"-- too late", "tool a EXE read 1 1 off DIR extra -- x", "--", "is token 10"},
		{"no -- at all", "tool a EXE read 1 1 off DIR x y", "--", `token 9 is "x"`},
		// name
		{"name uppercase", "tool Lint EXE read 1 1 off DIR --", "name", "want a lowercase letter"},
		{"name digit start", "tool 1a EXE read 1 1 off DIR --", "name", "want a lowercase letter"},
		{"name dash", "tool a-b EXE read 1 1 off DIR --", "name", "want a lowercase letter"},
		{"name 33 chars", "tool " + strings.Repeat("a", 33) + " EXE read 1 1 off DIR --", "name", "32 characters or fewer"},
		{"name builtin", "tool repo_manifest EXE read 1 1 off DIR --", "name", "collides with a built-in"},
		{"name builtin unavailable here", "tool sloc EXE read 1 1 off DIR --", "name", "collides with a built-in"},
		// exe
		{"exe relative", "tool a bin/lint read 1 1 off DIR --", "exe", "not an absolute path"},
		{"exe bare", "tool a lint read 1 1 off DIR --", "exe", "not an absolute path"},
		{"exe dotdot", "tool a ROOT/bin/../bin/lint read 1 1 off DIR --", "exe", ".. component"},
		{"exe unclean", "tool a ROOT/bin//lint read 1 1 off DIR --", "exe", "not clean"},
		{"exe missing", "tool a ROOT/bin/nothere read 1 1 off DIR --", "exe", "no such file"},
		{"exe not executable", "tool a ROOT/bin/plain read 1 1 off DIR --", "exe", "not executable"},
		{"exe is a dir", "tool a ROOT/bin read 1 1 off DIR --", "exe", "not a regular file"},
		{"exe denied", "tool a ROOT/bin/bash read 1 1 off DIR --", "exe", `basename "bash" is a shell or interpreter`},
		{"exe denied versioned", "tool a ROOT/bin/python3.12 read 1 1 off DIR --", "exe", `denylist entry "python"`},
		{"exe symlink to denied", "tool a ROOT/bin/innocent read 1 1 off DIR --", "exe", `resolves to "` + f.root + `/bin/bash"`},
		{"exe state substring", "tool a /srv/queue.db/x read 1 1 off DIR --", "exe", `contains "queue.db"`},
		// class
		{"class unknown", "tool a EXE write 1 1 off DIR --", "class", `"write": want read or test`},
		{"class case", "tool a EXE Read 1 1 off DIR --", "class", "want read or test"},
		// timeout
		{"timeout zero", "tool a EXE read 0 1 off DIR --", "timeout-s", "out of range: want 1 to 3600"},
		{"timeout above", "tool a EXE read 3601 1 off DIR --", "timeout-s", "out of range"},
		{"timeout negative", "tool a EXE read -1 1 off DIR --", "timeout-s", "not a plain decimal integer"},
		{"timeout plus", "tool a EXE read +5 1 off DIR --", "timeout-s", "not a plain decimal integer"},
		{"timeout leading zero", "tool a EXE read 010 1 off DIR --", "timeout-s", "not a plain decimal integer"},
		{"timeout hex", "tool a EXE read 0x10 1 off DIR --", "timeout-s", "not a plain decimal integer"},
		{"timeout unit", "tool a EXE read 5s 1 off DIR --", "timeout-s", "not a plain decimal integer"},
		{"timeout float", "tool a EXE read 1.5 1 off DIR --", "timeout-s", "not a plain decimal integer"},
		{"timeout huge", "tool a EXE read 99999999999999999999 1 off DIR --", "timeout-s", "out of range"},
		// max-bytes
		{"max-bytes zero", "tool a EXE read 1 0 off DIR --", "max-bytes", "out of range: want 1 to 1048576"},
		{"max-bytes above", "tool a EXE read 1 1048577 off DIR --", "max-bytes", "out of range"},
		{"max-bytes suffix", "tool a EXE read 1 1M off DIR --", "max-bytes", "not a plain decimal integer"},
		{"max-bytes underscore", "tool a EXE read 1 1_000 off DIR --", "max-bytes", "not a plain decimal integer"},
		// sandbox
		{"sandbox word", "tool a EXE read 1 1 no DIR --", "sandbox", `"no": want on or off`},
		{"sandbox key=value", "tool a EXE read 1 1 sandbox=off DIR --", "sandbox", "want on or off"},
		{"read with sandbox on", "tool a EXE read 1 1 on DIR --", "sandbox", "class read runs unsandboxed"},
		{"test with sandbox off", "tool a EXE test 1 1 off DIR --", "sandbox", "class test always runs sandboxed"},
		// dir
		{"dir relative", "tool a EXE read 1 1 off work --", "dir", "not an absolute path"},
		{"dir dotdot", "tool a EXE read 1 1 off DIR/.. --", "dir", ".. component"},
		{"dir trailing slash", "tool a EXE read 1 1 off DIR/ --", "dir", "not clean"},
		{"dir missing", "tool a EXE read 1 1 off ROOT/nothere --", "dir", "no such file"},
		{"dir is a file", "tool a EXE read 1 1 off EXE --", "dir", "not a directory"},
		{"dir state substring", "tool a EXE read 1 1 off /srv/stage4/incoming --", "dir", `contains "stage4/incoming"`},
		{"dir out substring", "tool a EXE read 1 1 off /build/out/x --", "dir", `contains "/out/"`},
		// fixed args
		{"arg state substring", "tool a EXE read 1 1 off DIR -- --db=/var/lib/notes.db", "args[0]", `contains "notes.db"`},
		{"arg buildpkg", "tool a EXE read 1 1 off DIR -- x .buildpkg/y", "args[1]", `contains ".buildpkg"`},
		// directives
		{"unknown directive", "run a EXE", "directive", `unknown directive "run"`},
		{"directive case", "Tool a EXE read 1 1 off DIR --", "directive", `unknown directive "Tool"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parse(t, f.line(tc.line))
			e := firstErr(t, c)
			if e.Field != tc.field {
				t.Errorf("Field = %q, want %q (%v)", e.Field, tc.field, e)
			}
			if !strings.Contains(e.Err.Error(), tc.reason) {
				t.Errorf("reason = %q, want it to contain %q", e.Err, tc.reason)
			}
			if e.Line != 1 || e.Text != f.line(tc.line) || e.File != "tools.conf" {
				t.Errorf("position = %s:%d %q, want tools.conf:1 and the line", e.File, e.Line, e.Text)
			}
		})
	}
}

func TestDeniedErrorsWrapSentinel(t *testing.T) {
	f := newFixture(t)
	c := parse(t, f.line("tool a ROOT/bin/bash read 1 1 off DIR --"))
	if !errors.Is(c.Err(), ErrDenied) {
		t.Errorf("Err() = %v, want errors.Is ErrDenied", c.Err())
	}
	c = parse(t, f.line("tool a EXE read 0 1 off DIR --"))
	if errors.Is(c.Err(), ErrDenied) {
		t.Errorf("range error %v must not be ErrDenied", c.Err())
	}
}

func TestSymlinksAccepted(t *testing.T) {
	f := newFixture(t)
	c := parse(t, f.line("tool a ROOT/bin/alias read 1 1 off ROOT/worklink --"))
	if c.State != StateLoaded {
		t.Fatalf("State = %s (%v)", c.State, c.Err())
	}
	got := c.Tools[0]
	if got.Exe != f.root+"/bin/alias" || got.ExeResolved != f.exe {
		t.Errorf("Exe = %q resolved %q, want %q resolved %q", got.Exe, got.ExeResolved, f.root+"/bin/alias", f.exe)
	}
	if got.Dir != f.root+"/worklink" || got.DirResolved != f.dir {
		t.Errorf("Dir = %q resolved %q, want resolved %q", got.Dir, got.DirResolved, f.dir)
	}
}

func TestDuplicateAndOrder(t *testing.T) {
	f := newFixture(t)
	c := parse(t, f.line("tool b EXE read 1 1 off DIR --\ntool a EXE read 1 1 off DIR --\ntool b EXE read 1 1 off DIR --\n"))
	e := firstErr(t, c)
	if e.Line != 3 || e.Field != "name" || !strings.Contains(e.Err.Error(), "already declared on line 1") {
		t.Errorf("got %v, want line 3 name already declared on line 1", e)
	}
	c = parse(t, f.line("tool b EXE read 1 1 off DIR --\ntool a EXE test 2 3 on DIR --\n"))
	if c.State != StateLoaded || len(c.Tools) != 2 || c.Tools[0].Name != "b" || c.Tools[1].Name != "a" {
		t.Fatalf("tools not in conf order: %+v (%v)", c.Tools, c.Err())
	}
	if c.Tools[1].Line != 2 || !c.Tools[1].Sandbox || c.Tools[1].Class != ClassTest {
		t.Errorf("Tools[1] = %+v", c.Tools[1])
	}
}

func TestExposeRules(t *testing.T) {
	f := newFixture(t)
	tool := f.line("tool mine EXE read 1 1 off DIR --\n")
	for _, tc := range []struct {
		name, text string
		wantErr    string // "" means accepted
		hidden     []string
		shown      []string
	}{
		{name: "off builtin", text: "expose repo_manifest off", hidden: []string{"repo_manifest"}, shown: []string{"mine", "sloc"}},
		{name: "off external", text: tool + "expose mine off", hidden: []string{"mine"}, shown: []string{"repo_manifest"}},
		{name: "off external declared later", text: "expose mine off\n" + tool, hidden: []string{"mine"}},
		{name: "on is a no-op", text: "expose repo_manifest on", shown: []string{"repo_manifest"}},
		{name: "checkpoint on accepted", text: "expose checkpoint_status on", shown: []string{"checkpoint_status"}},
		{name: "checkpoint off refused", text: "expose checkpoint_status off", wantErr: "can never be switched off"},
		{name: "checkpoint_ unknown off refused", text: "expose checkpoint_other off", wantErr: "unknown tool"},
		{name: "unknown name", text: "expose nothing off", wantErr: `unknown tool "nothing"`},
		{name: "duplicate", text: "expose sloc off\nexpose sloc off", wantErr: "already exposed on line 1"},
		{name: "duplicate on on", text: "expose sloc on\nexpose sloc on", wantErr: "already exposed"},
		{name: "bad state", text: "expose sloc maybe", wantErr: `"maybe": want on or off`},
		{name: "too many fields", text: "expose sloc off now", wantErr: "got 4 fields"},
		{name: "too few fields", text: "expose sloc", wantErr: "got 2 fields"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parse(t, tc.text)
			if tc.wantErr != "" {
				e := firstErr(t, c)
				if e.Field != "expose" || !strings.Contains(e.Err.Error(), tc.wantErr) {
					t.Errorf("got %v, want expose: %q", e, tc.wantErr)
				}
				return
			}
			if c.State != StateLoaded {
				t.Fatalf("State = %s (%v)", c.State, c.Err())
			}
			for _, n := range tc.hidden {
				if !c.Hidden(n) {
					t.Errorf("Hidden(%q) = false, want true", n)
				}
			}
			for _, n := range tc.shown {
				if c.Hidden(n) {
					t.Errorf("Hidden(%q) = true, want false", n)
				}
			}
		})
	}
}

// TestFailClosed: one bad line anywhere disables every tool and every
// expose, and every error is reported with its line, in line order.
func TestFailClosed(t *testing.T) {
	f := newFixture(t)
	text := f.line("tool good EXE read 1 1 off DIR --\nexpose repo_manifest off\ntool bad ROOT/bin/bash read 1 1 off DIR --\ntool good2 EXE read 0 1 off DIR --\nexpose nothing off\n")
	c := parse(t, text)
	if c.State != StateRefused {
		t.Fatalf("State = %s, want refused", c.State)
	}
	if len(c.Tools) != 0 || len(c.Exposes) != 0 || c.Hidden("repo_manifest") {
		t.Fatalf("refused config still has tools %v exposes %v", c.Tools, c.Exposes)
	}
	var lines []int
	for _, err := range c.Errors {
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("%v is not *Error", err)
		}
		lines = append(lines, e.Line)
	}
	if want := []int{3, 4, 5}; len(lines) != 3 || lines[0] != want[0] || lines[1] != want[1] || lines[2] != want[2] {
		t.Errorf("error lines = %v, want %v", lines, want)
	}
	if _, ok := c.Tool("good"); ok {
		t.Error("Tool(good) found in a refused config")
	}
}

func TestFileRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		line int
		want string
	}{
		{"NUL byte", []byte("# ok\nexpose sl\x00oc off\n"), 2, "NUL byte at column 10"},
		{"invalid UTF-8", []byte("# ok\n# \xff\xfe\n"), 2, "invalid UTF-8"},
		{"CRLF", []byte("expose sloc off\r\n"), 1, "CR (\\r)"},
		{"lone CR", []byte("# a\rexpose sloc off\n"), 1, "CR (\\r)"},
		{"control char", []byte("expose sloc\x0boff\n"), 1, "control character U+000B at column 12"},
		{"escape char in comment", []byte("# \x1b[31m\n"), 1, "control character U+001B"},
		{"C1 control", []byte("# \u0085\n"), 1, "control character U+0085"},
		{"too large", []byte(strings.Repeat("#", MaxFileSize+1)), 0, "larger than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Parse("tools.conf", tc.data, Options{Builtins: testBuiltins})
			e := firstErr(t, c)
			if e.Field != "file" || e.Line != tc.line || !strings.Contains(e.Err.Error(), tc.want) {
				t.Errorf("got %v (line %d), want file error at line %d containing %q", e, e.Line, tc.line, tc.want)
			}
		})
	}
	// Exactly at the size limit and UTF-8 beyond ASCII are fine.
	ok := append([]byte("# héllo ✓\n"), []byte(strings.Repeat("#", MaxFileSize-len("# héllo ✓\n")))...)
	if c := Parse("tools.conf", ok, Options{}); c.State != StateLoaded {
		t.Errorf("a %d-byte comment file: State = %s (%v), want loaded", len(ok), c.State, c.Err())
	}
}

func TestLoad(t *testing.T) {
	f := newFixture(t)
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(f.root, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := f.line("tool a EXE read 1 1 off DIR --\n")

	t.Run("absent", func(t *testing.T) {
		c := Load(filepath.Join(f.root, "none.conf"), Options{})
		if c.State != StateAbsent || !strings.Contains(c.Reason, "no file") || len(c.Tools) != 0 || len(c.Errors) != 0 {
			t.Errorf("got %+v, want absent with no file reason", c)
		}
	})
	t.Run("directory", func(t *testing.T) {
		c := Load(f.dir, Options{})
		if c.State != StateAbsent || !strings.Contains(c.Reason, "is a directory") {
			t.Errorf("got %+v, want absent (a directory)", c)
		}
	})
	t.Run("loaded with digest", func(t *testing.T) {
		c := Load(write("ok.conf", good, 0o640), Options{})
		if c.State != StateLoaded || len(c.Tools) != 1 {
			t.Fatalf("State = %s (%v)", c.State, c.Err())
		}
		// sha256 of the bytes, so an operator can tell which file served.
		if len(c.SHA256) != 64 || c.Path != filepath.Join(f.root, "ok.conf") {
			t.Errorf("SHA256 = %q Path = %q", c.SHA256, c.Path)
		}
	})
	for _, mode := range []os.FileMode{0o660, 0o646, 0o666, 0o620} {
		t.Run("writable by others "+mode.String(), func(t *testing.T) {
			c := Load(write("w.conf", good, mode), Options{})
			e := firstErr(t, c)
			if e.Field != "file" || !strings.Contains(e.Err.Error(), "group- or world-writable") {
				t.Errorf("got %v, want a writable-file refusal", e)
			}
		})
	}
	t.Run("fifo is not a regular file", func(t *testing.T) {
		// A FIFO would block open; a symlink to /dev/null is a non-regular
		// file that opens at once.
		p := filepath.Join(f.root, "null.conf")
		symlink(t, "/dev/null", p)
		c := Load(p, Options{})
		e := firstErr(t, c)
		if !strings.Contains(e.Err.Error(), "not a regular file") {
			t.Errorf("got %v, want not a regular file", e)
		}
	})
	// unreadable: TestUnreadableConf, as an unprivileged user.
}

func TestCheckHook(t *testing.T) {
	f := newFixture(t)
	calls := 0
	opts := Options{Check: func(tl Tool) error {
		calls++
		if tl.Class == ClassTest {
			return errors.New("sandbox uid cannot traverse the dir")
		}
		return nil
	}}
	c := Parse("tools.conf", []byte(f.line("tool a EXE read 1 1 off DIR --\ntool b EXE test 1 1 on DIR --\n")), opts)
	e := firstErr(t, c)
	if e.Line != 2 || e.Field != "tool" || !strings.Contains(e.Err.Error(), "cannot traverse") {
		t.Errorf("got %v, want line 2 tool: cannot traverse", e)
	}
	if calls != 2 {
		t.Errorf("Check called %d times, want 2", calls)
	}
}

func TestPathFromEnv(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	if got := PathFromEnv(get); got != "/etc/saphira/mcp/tools.conf" {
		t.Errorf("PathFromEnv() = %q, want the seed default", got)
	}
	env[EnvPath] = "/tmp/x.conf"
	if got := PathFromEnv(get); got != "/tmp/x.conf" {
		t.Errorf("PathFromEnv() = %q, want $SBM_TOOLS_CONF", got)
	}
}

// TestLongInputsAreLinear: huge tokens are refused quickly (the fuzzer once
// found a quadratic denylist check).
func TestLongInputsAreLinear(t *testing.T) {
	f := newFixture(t)
	long := strings.Repeat("a", 500000)
	start := time.Now()
	for _, line := range []string{
		"tool a /" + long + " read 1 1 off DIR --",
		"tool a /bin/" + strings.Repeat("9", 250) + " read 1 1 off DIR --",
		"tool a EXE read 1 1 off /" + long + " --",
		"tool a EXE read 1 1 off DIR -- " + long,
		"tool " + long + " EXE read 1 1 off DIR --",
	} {
		parse(t, f.line(line))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("parsing 2.5 MB of long tokens took %s", d)
	}
	if _, _, denied := DeniedExe("python" + strings.Repeat("3", 100000)); !denied {
		t.Error("a long versioned python is not denied")
	}
	e := firstErr(t, parse(t, f.line("tool a /"+long+" read 1 1 off DIR --")))
	if e.Field != "exe" || !strings.Contains(e.Err.Error(), "longer than 4096") {
		t.Errorf("got %v", e)
	}
}

// TestEgressRules: an egress line gives a test-class tool its allowlist,
// wherever it stands in the file; every malformed or misplaced one refuses
// the file with its line and reason; a file without one parses as before.
func TestEgressRules(t *testing.T) {
	f := newFixture(t)
	base := "tool api EXE test 60 4096 on DIR -- fetch\ntool rd EXE read 60 4096 off DIR --\n"
	c := parse(t, f.line("egress api api.example.com:443 *.example.org:443 127.0.0.1:8080\n"+base))
	if c.State != StateLoaded {
		t.Fatalf("refused: %v", c.Errors)
	}
	if got := strings.Join(c.Tools[0].Egress.Strings(), " "); got != "api.example.com:443 *.example.org:443 127.0.0.1:8080" || c.Tools[0].EgressLine != 1 {
		t.Errorf("egress of api = %q (line %d)", got, c.Tools[0].EgressLine)
	}
	if c.Tools[1].Egress != nil {
		t.Errorf("rd has an allowlist: %v", c.Tools[1].Egress)
	}
	if c := parse(t, f.line(base)); c.State != StateLoaded || c.Tools[0].Egress != nil {
		t.Errorf("without an egress line: %s, %v", c.State, c.Tools[0].Egress)
	}
	for _, tc := range []struct {
		name, line, want string
	}{
		{"no destination", "egress api", "want `egress <name> <host:port>...`"},
		{"unknown tool", "egress nosuch api.example.com:443", `unknown tool "nosuch"`},
		{"a read-class tool", "egress rd api.example.com:443", "read-class tool"},
		{"a built-in", "egress sloc api.example.com:443", `unknown tool "sloc"`},
		{"no port", "egress api api.example.com", "host:port"},
		{"a scheme", "egress api https://api.example.com:443", "no scheme"},
		{"a top-level wildcard", "egress api *.com:443", "two labels"},
		{"twice the same", "egress api a.example.com:1 a.example.com:1", "listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := firstErr(t, parse(t, f.line(base+tc.line+"\n")))
			if e.Line != 3 || e.Field != "egress" || !strings.Contains(e.Err.Error(), tc.want) {
				t.Errorf("error %+v, want line 3, field egress, %q", e, tc.want)
			}
		})
	}
	c = parse(t, f.line(base+"egress api a.example.com:1\negress api b.example.com:1\n"))
	if e := firstErr(t, c); e.Line != 4 || !strings.Contains(e.Err.Error(), "egress line already, line 3") {
		t.Errorf("a second egress line: %+v", e)
	}
}

// TestLoadFIFO: a FIFO where tools.conf is expected is refused at once,
// never waited on (opening a FIFO to read blocks until a writer comes).
func TestLoadFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tools.conf")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan *Config, 1)
	go func() { done <- Load(p, Options{}) }()
	select {
	case c := <-done:
		if c.State != StateRefused || len(c.Errors) != 1 || !strings.Contains(c.Errors[0].Error(), "not a regular file") {
			t.Errorf("Load of a FIFO = %s %v, want refused: not a regular file", c.State, c.Errors)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Load of a FIFO blocked")
	}
	for _, read := range []func() error{
		func() error { _, err := LoadTokens(p); return err },
		func() error { _, err := ReadTrusted(p, "policy file", 10); return err },
	} {
		errc := make(chan error, 1)
		go func() { errc <- read() }()
		select {
		case err := <-errc:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("reading a FIFO: %v, want not a regular file", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("reading a FIFO blocked")
		}
	}
}
