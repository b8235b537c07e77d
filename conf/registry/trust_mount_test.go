package registry

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/kubevol"
)

// TestLoadRegistryKubeletVolume: the registry as a ConfigMap volume
// mounted at --tool-mcp-dir (its directory is the volume's own, 2777; each
// fragment a symlink of the atomic writer) is loaded on a read-only mount
// no one in the pod can write through, and refused read-write.
func TestLoadRegistryKubeletVolume(t *testing.T) {
	f := newRegFixture(t)
	frags := map[string]string{"10-a.toml": "schema_version = 8\n"}
	_, mnt := kubevol.Pod(t, frags, true)
	if r := Load(mnt, f.opts); r.State != conf.StateLoaded {
		t.Errorf("read-only: LoadRegistry = %s %v, want loaded", r.State, r.Err())
	}
	_, mnt = kubevol.Pod(t, frags, false)
	r := Load(mnt, f.opts)
	want := "group- or world-writable (mode 0777): anyone who can add a fragment can run a server as toolgate; chmod go-w " + mnt +
		" (not a read-only mount toolgate can trust: its mount is read-write)"
	if r.State != conf.StateRefused || !strings.Contains(r.Err().Error(), want) {
		t.Errorf("read-write: LoadRegistry = %s %v\nwant refused with %q", r.State, r.Err(), want)
	}
	// A fragment through the read-only volume's directory, out of it.
	base, mnt := kubevol.Pod(t, frags, false)
	regWrite(t, filepath.Join(base, "etc", "out"), map[string]string{"x.toml": "schema_version = 8\n"})
	kubevol.Must(t, os.Symlink("../out/x.toml", filepath.Join(mnt, "20-b.toml")))
	kubevol.RemountRO(t, mnt)
	r = Load(mnt, f.opts)
	if r.State != conf.StateRefused || !errors.Is(r.Err(), conf.ErrUntrusted) || !strings.Contains(r.Err().Error(), "is not on the read-only mount "+mnt) {
		t.Errorf("a fragment out of the mount: LoadRegistry = %s %v, want refused", r.State, r.Err())
	}
}
