package registry

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/conf"
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

func chown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Lchown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// TestLoadRegistryTrust: the same rule for the tool-MCP registry: its
// directory, every directory above it, and each fragment.
func TestLoadRegistryTrust(t *testing.T) {
	requireRoot(t)
	f := newRegFixture(t)
	good := "schema_version = 8\n"
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, base string) string // returns the registry dir
		wantErr string
	}{
		{name: "ours", setup: func(t *testing.T, base string) string {
			regWrite(t, filepath.Join(base, "d"), map[string]string{"10-a.toml": good})
			return filepath.Join(base, "d")
		}},
		{name: "the directory owned by 65534", setup: func(t *testing.T, base string) string {
			d := filepath.Join(base, "d")
			regWrite(t, d, map[string]string{"10-a.toml": good})
			chown(t, d, nobody)
			return d
		}, wantErr: "/d is owned by uid 65534 (mode 0755), not by root"},
		{name: "an ancestor owned by 65534", setup: func(t *testing.T, base string) string {
			d := filepath.Join(base, "u", "d")
			regWrite(t, d, map[string]string{"10-a.toml": good})
			chown(t, filepath.Join(base, "u"), nobody)
			return d
		}, wantErr: "/u (mode 0755) is owned by uid 65534"},
		{name: "a fragment owned by 65534", setup: func(t *testing.T, base string) string {
			d := filepath.Join(base, "d")
			regWrite(t, d, map[string]string{"10-a.toml": good, "20-b.toml": good})
			chown(t, filepath.Join(d, "20-b.toml"), nobody)
			return d
		}, wantErr: "20-b.toml is owned by uid 65534 (mode 0644), not by root"},
		{name: "a fragment symlinked into 65534's directory", setup: func(t *testing.T, base string) string {
			d := filepath.Join(base, "d")
			regWrite(t, d, map[string]string{"10-a.toml": good})
			regWrite(t, filepath.Join(base, "home"), map[string]string{"x.toml": good})
			chown(t, filepath.Join(base, "home"), nobody)
			if err := os.Symlink(filepath.Join(base, "home", "x.toml"), filepath.Join(d, "20-b.toml")); err != nil {
				t.Fatal(err)
			}
			return d
		}, wantErr: "/home (mode 0755) is owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir := tc.setup(t, base)
			r := Load(dir, f.opts)
			if tc.wantErr == "" {
				if r.State != conf.StateLoaded {
					t.Errorf("Load = %s %v, want loaded", r.State, r.Err())
				}
				return
			}
			if r.State != conf.StateRefused || len(r.Servers) != 0 || !errors.Is(r.Err(), conf.ErrUntrusted) || !strings.Contains(r.Err().Error(), tc.wantErr) {
				t.Errorf("Load = %s %v\nwant refused with ErrUntrusted and %q", r.State, r.Err(), tc.wantErr)
			}
		})
	}
}
