package conf

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRegistryKubeletVolume: the registry as a ConfigMap volume
// mounted at --tool-mcp-dir (its directory is the volume's own, 2777; each
// fragment a symlink of the atomic writer) is loaded on a read-only mount
// no one in the pod can write through, and refused read-write.
func TestLoadRegistryKubeletVolume(t *testing.T) {
	f := newRegFixture(t)
	frags := map[string]string{"10-a.toml": "schema_version = 8\n"}
	_, mnt := kubePod(t, frags, true)
	if r := LoadRegistry(mnt, f.opts); r.State != StateLoaded {
		t.Errorf("read-only: LoadRegistry = %s %v, want loaded", r.State, r.Err())
	}
	_, mnt = kubePod(t, frags, false)
	r := LoadRegistry(mnt, f.opts)
	want := "group- or world-writable (mode 0777): anyone who can add a fragment can run a server as toolgate; chmod go-w " + mnt +
		" (not a read-only mount toolgate can trust: its mount is read-write)"
	if r.State != StateRefused || !strings.Contains(r.Err().Error(), want) {
		t.Errorf("read-write: LoadRegistry = %s %v\nwant refused with %q", r.State, r.Err(), want)
	}
	// A fragment through the read-only volume's directory, out of it.
	base, mnt := kubePod(t, frags, false)
	regWrite(t, filepath.Join(base, "etc", "out"), map[string]string{"x.toml": "schema_version = 8\n"})
	symlink(t, "../out/x.toml", filepath.Join(mnt, "20-b.toml"))
	remountRO(t, mnt)
	r = LoadRegistry(mnt, f.opts)
	if r.State != StateRefused || !errors.Is(r.Err(), ErrUntrusted) || !strings.Contains(r.Err().Error(), "is not on the read-only mount "+mnt) {
		t.Errorf("a fragment out of the mount: LoadRegistry = %s %v, want refused", r.State, r.Err())
	}
}
