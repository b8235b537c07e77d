package runtime

import "testing"

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
