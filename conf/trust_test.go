package conf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testbin"
)

// nobody is the uid (and gid) the tests give files that toolgate must not
// trust: the reviewer's attacker, 65534.
const nobody = 65534

// requireRoot skips a test that must chown, or fails it under
// TOOLGATE_REQUIRE_ALL=1 (CI runs as root), so that a skip never hides a
// regression.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testbin.Missing(t, "this test chowns files to uid 65534 and must run as root (uid %d)", os.Geteuid())
	}
}

// trustTree builds, under a fresh directory of the test's (root-owned,
// 0700, in the sticky /tmp), the layout a case describes: each entry is a
// path and what it is. It returns the base directory.
type node struct {
	path   string
	kind   string // "dir", "file" or "link" (to target)
	target string
	mode   os.FileMode
	uid    int
}

func trustTree(t *testing.T, nodes []node) string {
	t.Helper()
	base := t.TempDir()
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		p := filepath.Join(base, n.path)
		var err error
		switch n.kind {
		case "dir":
			err = os.Mkdir(p, 0o700)
		case "file":
			err = os.WriteFile(p, []byte("# a tools.conf\n"), 0o600)
		case "link":
			err = os.Symlink(strings.ReplaceAll(n.target, "BASE", base), p)
		}
		if err != nil {
			t.Fatal(err)
		}
		if n.kind != "link" {
			if err := os.Chmod(p, n.mode); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Lchown(p, n.uid, n.uid); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

// TestLoadTrust: the real rule on real files. A tools.conf is loaded only
// when it, and every directory traversed to reach it (from /, through
// symlinks), is owned by root or toolgate's uid and not writable by others;
// a sticky root-owned directory (like /tmp) is the one exception, and then
// what the path takes from it must be ours.
func TestLoadTrust(t *testing.T) {
	requireRoot(t)
	const sticky = os.ModeSticky | 0o777
	for _, tc := range []struct {
		name    string
		nodes   []node
		conf    string // relative to the base
		wantErr string // "" for loaded; else in the refusal
	}{
		{
			name: "ours, in our directory", conf: "etc/tools.conf",
			nodes: []node{{"etc", "dir", "", 0o755, 0}, {"etc/tools.conf", "file", "", 0o640, 0}},
		},
		{
			name: "the reviewer's: owned by 65534, in 65534's directory", conf: "home/tools.conf",
			nodes:   []node{{"home", "dir", "", 0o755, nobody}, {"home/tools.conf", "file", "", 0o644, nobody}},
			wantErr: "home (mode 0755) is owned by uid 65534, not by root: its owner can replace",
		},
		{
			name: "the file owned by 65534", conf: "etc/tools.conf",
			nodes:   []node{{"etc", "dir", "", 0o755, 0}, {"etc/tools.conf", "file", "", 0o644, nobody}},
			wantErr: "tools.conf is owned by uid 65534 (mode 0644), not by root: its owner can change it and run code as toolgate; chown root",
		},
		{
			name: "ours, in a directory of 65534's", conf: "home/tools.conf",
			nodes:   []node{{"home", "dir", "", 0o755, nobody}, {"home/tools.conf", "file", "", 0o644, 0}},
			wantErr: "home (mode 0755) is owned by uid 65534",
		},
		{
			name: "an ancestor further up owned by 65534", conf: "u/etc/mcp/tools.conf",
			nodes: []node{
				{"u", "dir", "", 0o755, nobody},
				{"u/etc", "dir", "", 0o755, 0},
				{"u/etc/mcp", "dir", "", 0o755, 0},
				{"u/etc/mcp/tools.conf", "file", "", 0o644, 0},
			},
			wantErr: "/u (mode 0755) is owned by uid 65534",
		},
		{
			name: "a group-writable directory", conf: "etc/tools.conf",
			nodes:   []node{{"etc", "dir", "", 0o775, 0}, {"etc/tools.conf", "file", "", 0o644, 0}},
			wantErr: "etc (mode 0775, owner uid 0) is writable by group or others: they can replace",
		},
		{
			name: "a world-writable directory, not sticky", conf: "etc/tools.conf",
			nodes:   []node{{"etc", "dir", "", 0o777, 0}, {"etc/tools.conf", "file", "", 0o644, 0}},
			wantErr: "chmod go-w",
		},
		{
			name: "ours, in our directory in a sticky root directory (as /tmp)", conf: "tmp/d/tools.conf",
			nodes: []node{{"tmp", "dir", "", sticky, 0}, {"tmp/d", "dir", "", 0o700, 0}, {"tmp/d/tools.conf", "file", "", 0o600, 0}},
		},
		{
			name: "ours, right in a sticky root directory", conf: "tmp/tools.conf",
			nodes: []node{{"tmp", "dir", "", sticky, 0}, {"tmp/tools.conf", "file", "", 0o600, 0}},
		},
		{
			name: "a directory of 65534's in a sticky directory", conf: "tmp/d/tools.conf",
			nodes:   []node{{"tmp", "dir", "", sticky, 0}, {"tmp/d", "dir", "", 0o755, nobody}, {"tmp/d/tools.conf", "file", "", 0o644, 0}},
			wantErr: "tmp/d is owned by uid 65534, not by root, in ",
		},
		{
			name: "a symlink of 65534's in a sticky directory", conf: "tmp/tools.conf",
			nodes: []node{
				{"etc", "dir", "", 0o755, 0},
				{"etc/tools.conf", "file", "", 0o644, 0},
				{"tmp", "dir", "", sticky, 0},
				{"tmp/tools.conf", "link", "BASE/etc/tools.conf", 0, nobody},
			},
			wantErr: "tmp/tools.conf is owned by uid 65534, not by root, in ",
		},
		{
			name: "a sticky directory owned by 65534", conf: "tmp/tools.conf",
			nodes:   []node{{"tmp", "dir", "", sticky, nobody}, {"tmp/tools.conf", "file", "", 0o644, 0}},
			wantErr: "tmp (mode 0777) is owned by uid 65534",
		},
		{
			name: "a symlink to ours", conf: "etc/link.conf",
			nodes: []node{
				{"etc", "dir", "", 0o755, 0},
				{"etc/real", "dir", "", 0o755, 0},
				{"etc/real/tools.conf", "file", "", 0o644, 0},
				{"etc/link.conf", "link", "real/tools.conf", 0, 0},
			},
		},
		{
			name: "a symlink into 65534's directory", conf: "etc/tools.conf",
			nodes: []node{
				{"etc", "dir", "", 0o755, 0},
				{"home", "dir", "", 0o755, nobody},
				{"home/tools.conf", "file", "", 0o644, nobody},
				{"etc/tools.conf", "link", "../home/tools.conf", 0, 0},
			},
			wantErr: "home (mode 0755) is owned by uid 65534",
		},
		{
			name: "a symlinked directory leading through 65534's", conf: "etc/mcp/tools.conf",
			nodes: []node{
				{"etc", "dir", "", 0o755, 0},
				{"home", "dir", "", 0o755, nobody},
				{"home/mcp", "dir", "", 0o755, 0},
				{"home/mcp/tools.conf", "file", "", 0o644, 0},
				{"etc/mcp", "link", "BASE/home/mcp", 0, 0},
			},
			wantErr: "home (mode 0755) is owned by uid 65534",
		},
		{
			name: "dot-dot in the path", conf: "etc/sub/../tools.conf",
			nodes: []node{{"etc", "dir", "", 0o755, 0}, {"etc/sub", "dir", "", 0o755, 0}, {"etc/tools.conf", "file", "", 0o644, 0}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := trustTree(t, tc.nodes)
			path := filepath.Join(base, tc.conf)
			if strings.Contains(tc.conf, "..") {
				path = base + "/" + tc.conf
			}
			c := Load(path, Options{})
			if tc.wantErr == "" {
				if c.State != StateLoaded {
					t.Errorf("Load(%s) = %s %v, want loaded", tc.conf, c.State, c.Err())
				}
				return
			}
			if c.State != StateRefused || len(c.Tools) != 0 {
				t.Fatalf("Load(%s) = %s, want refused", tc.conf, c.State)
			}
			e := firstErr(t, c)
			if e.Field != "file" || !errors.Is(e, ErrUntrusted) || !strings.Contains(e.Error(), tc.wantErr) || !strings.Contains(e.Error(), path) {
				t.Errorf("Load(%s) refused with %q\nwant field file, ErrUntrusted, the path and %q", tc.conf, e.Error(), tc.wantErr)
			}
		})
	}
}

// TestReadTrusted: a file read by ReadTrusted (the policy file) is held
// to tools.conf's rules: refused when another user could change it, when
// others may write it, when it is not a regular file, when it is too big.
func TestReadTrusted(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name    string
		nodes   []node
		path    string
		wantErr string // "" for read
	}{
		{
			name: "ours", path: "etc/policy.cedar",
			nodes: []node{{"etc", "dir", "", 0o755, 0}, {"etc/policy.cedar", "file", "", 0o644, 0}},
		},
		{
			name: "owned by 65534", path: "etc/policy.cedar",
			nodes:   []node{{"etc", "dir", "", 0o755, 0}, {"etc/policy.cedar", "file", "", 0o644, nobody}},
			wantErr: "policy.cedar is owned by uid 65534 (mode 0644), not by root",
		},
		{
			name: "in a directory of 65534's", path: "home/policy.cedar",
			nodes:   []node{{"home", "dir", "", 0o755, nobody}, {"home/policy.cedar", "file", "", 0o644, 0}},
			wantErr: "home (mode 0755) is owned by uid 65534",
		},
		{
			name: "group-writable", path: "etc/policy.cedar",
			nodes:   []node{{"etc", "dir", "", 0o755, 0}, {"etc/policy.cedar", "file", "", 0o664, 0}},
			wantErr: "group- or world-writable (mode 0664): anyone who can write the policy file decides what toolgate runs",
		},
		{
			name: "a directory", path: "etc",
			nodes:   []node{{"etc", "dir", "", 0o755, 0}},
			wantErr: "not a regular file",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := trustTree(t, tc.nodes)
			data, err := ReadTrusted(filepath.Join(base, tc.path), "policy file", 1<<10)
			if tc.wantErr == "" {
				if err != nil || string(data) != "# a tools.conf\n" {
					t.Fatalf("ReadTrusted = %q, %v; want the file", data, err)
				}
				return
			}
			var ce *Error
			if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ReadTrusted = %v, want a *Error with %q", err, tc.wantErr)
			}
		})
	}
	base := trustTree(t, []node{{"etc", "dir", "", 0o755, 0}, {"etc/big", "file", "", 0o644, 0}})
	if _, err := ReadTrusted(filepath.Join(base, "etc/big"), "policy file", 4); err == nil || !strings.Contains(err.Error(), "over 4 bytes") {
		t.Errorf("ReadTrusted(15 bytes, max 4) = %v, want refused", err)
	}
}
