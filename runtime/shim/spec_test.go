package shim

import (
	"strings"
	"testing"
)

// TestServiceArgs pins the service shim's argv and its parse.
func TestServiceArgs(t *testing.T) {
	spec := Spec{Mode: Service, UID: -1, GID: -1, Path: "/usr/bin/node", Argv: []string{"/usr/bin/node", "x.js"}}
	got := strings.Join(spec.Args(), " ")
	if want := "__toolgate_shim service -- /usr/bin/node /usr/bin/node x.js"; got != want {
		t.Errorf("Args() = %q, want %q", got, want)
	}
	back, err := parse(spec.Args()[1:])
	if err != nil || back.Mode != Service || back.Path != spec.Path || strings.Join(back.Argv, " ") != "/usr/bin/node x.js" {
		t.Errorf("parse(Args()) = %+v, %v", back, err)
	}
}

// TestStandbyAndHoldArgs: the standby and hold shims' arguments parse
// back to what rendered them; a bad value is refused.
func TestStandbyAndHoldArgs(t *testing.T) {
	for _, spec := range []Spec{
		{Mode: Standby, UID: -1, GID: -1, ReleaseFD: 4, KeepStderr: true, KeepEnv: true,
			Rlimits: []Rlimit{{"nofile", 64}}, Path: "/usr/bin/env", Argv: []string{"env"}},
		{Mode: Hold, UID: -1, GID: -1, ReleaseFD: 3, PidFile: "/run/b/pid", Mask: "/run/x=/sys/fs/cgroup/unified/cgroup.controllers",
			Start: []string{"/usr/bin/runc", "start", "c1"}, Path: "/usr/bin/runc", Argv: []string{"/usr/bin/runc", "create", "c1"}},
	} {
		back, err := parse(spec.Args()[1:])
		if err != nil {
			t.Fatalf("parse(%q): %v", spec.Args(), err)
		}
		if strings.Join(back.Args(), " ") != strings.Join(spec.Args(), " ") {
			t.Errorf("parse(Args()).Args() = %q, want %q", back.Args(), spec.Args())
		}
	}
	for _, bad := range [][]string{
		{Standby, "--release-fd", "2", "--", "/x", "x"},
		{Standby, "--env", "all", "--", "/x", "x"},
		{Hold, "--mask", "relative=/x", "--", "/x", "x"},
	} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}
