package cgroup

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestMountDir(t *testing.T) {
	for _, tc := range []struct {
		root, point, path string
		want              string
		ok                bool
	}{
		{"/", "/sys/fs/cgroup/pids", "/", "/sys/fs/cgroup/pids", true},
		{"/", "/sys/fs/cgroup/memory", "/process_api/abc", "/sys/fs/cgroup/memory/process_api/abc", true},
		// A container's mount shows only its own subtree.
		{"/libpod_parent/libpod-1", "/sys/fs/cgroup/pids", "/libpod_parent/libpod-1", "/sys/fs/cgroup/pids", true},
		{"/libpod_parent/libpod-1", "/sys/fs/cgroup/pids", "/libpod_parent/libpod-1/sub", "/sys/fs/cgroup/pids/sub", true},
		{"/libpod_parent/libpod-1", "/sys/fs/cgroup/pids", "/libpod_parent/libpod-10", "", false},
		{"/a", "/sys/fs/cgroup", "/b", "", false},
	} {
		got, ok := Mount{Root: tc.root, Point: tc.point}.dir(tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Mount{%s at %s}.dir(%s) = %q, %v; want %q, %v", tc.root, tc.point, tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

// Detection only reads: doctor's report and the OCI backend's choice of
// limits come from ReadHost, and neither may create a directory or
// move the process (Setup does both, for serve).
func TestReadHostChangesNothing(t *testing.T) {
	ours := func() []string {
		var found []string
		_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.HasPrefix(d.Name(), Prefix+strconv.Itoa(os.Getpid())) {
				found = append(found, p)
				return fs.SkipDir
			}
			return nil
		})
		return found
	}
	self := func() string {
		b, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	beforeDirs, beforeSelf := ours(), self()
	h := ReadHost()
	roots := h.Roots()
	if len(h.Mounts) == 0 {
		t.Fatalf("no mounts read: %v", h.Notes)
	}
	if got := ours(); !slices.Equal(got, beforeDirs) {
		t.Errorf("ReadHost created %v (before: %v)", got, beforeDirs)
	}
	if got := self(); got != beforeSelf {
		t.Errorf("ReadHost moved the process: %q, was %q", got, beforeSelf)
	}
	// Setup, from the same reading, is what creates them.
	c := h.Setup()
	defer c.Close()
	if c.V2 == "" && len(c.V1) == 0 {
		t.Skipf("no usable cgroups here to compare with (%v); roots %+v", c.Notes, roots)
	}
	if got := ours(); len(got) == len(beforeDirs) {
		t.Errorf("Setup created nothing: %v", got)
	}
}
