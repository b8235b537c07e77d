package conf

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestWarnings: a read-class line whose executable honours repository
// configuration (by basename as written or as resolved) is warned about,
// with the line to write instead; the same executable in the test class,
// and other executables, are not.
func TestWarnings(t *testing.T) {
	f := newFixture(t)
	bin := filepath.Join(f.root, "bin")
	for _, name := range []string{"git", "git-lfs", "hg", "chg", "digit", "gitk", "git-"} {
		writeExe(t, filepath.Join(bin, name))
	}
	symlink(t, filepath.Join(bin, "git"), filepath.Join(bin, "vcs"))
	text := strings.NewReplacer("BIN", bin, "DIR", f.dir).Replace(`tool git_status BIN/git read 30 65536 off DIR -- --no-pager status --short
tool git_sandboxed BIN/git test 30 65536 on DIR -- --no-pager status
tool lfs BIN/git-lfs read 30 100 off DIR -- ls-files
tool hg_log BIN/hg read 30 100 off DIR -- log
tool chg_log BIN/chg read 30 100 off DIR -- log
tool vcs BIN/vcs read 30 100 off DIR -- status
tool digit BIN/digit read 30 100 off DIR --
tool gitk BIN/gitk read 30 100 off DIR --
tool bare BIN/git- read 30 100 off DIR --
tool lint BIN/lint read 30 100 off DIR --
`)
	c := Parse("tools.conf", []byte(text), Options{Builtins: testBuiltins})
	if c.State != StateLoaded {
		t.Fatalf("Parse: %s %v", c.State, c.Err())
	}
	var got []string
	for _, w := range c.Warnings() {
		got = append(got, w.Tool)
	}
	want := []string{"git_status", "lfs", "hg_log", "chg_log", "vcs"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Warnings() tools = %v, want %v", got, want)
	}
	w := c.Warnings()[0]
	wantText := "tool git_status is class read and runs " + bin + "/git (git) directly on the host, in " + f.dir +
		": git runs programs the repository's configuration names (core.fsmonitor, hooks, diff and filter drivers, aliases) through /bin/sh, " +
		"so whoever can write that repository's configuration can run code on the host as toolgate's user; make it class test with the sandbox on: " +
		"tool git_status " + bin + "/git test 30 65536 on " + f.dir + " -- --no-pager status --short"
	if w.Line != 1 || w.Text != wantText {
		t.Errorf("Warnings()[0] = line %d %q\nwant line 1 %q", w.Line, w.Text, wantText)
	}
	if v := c.Warnings()[4]; !strings.Contains(v.Text, "runs "+bin+"/vcs (git)") {
		t.Errorf("the resolved basename is not named: %q", v.Text)
	}
	if h := c.Warnings()[2]; !strings.Contains(h.Text, "Mercurial runs the hooks") {
		t.Errorf("hg warning = %q", h.Text)
	}
}
