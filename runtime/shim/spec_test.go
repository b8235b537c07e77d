package shim

import (
	"fmt"
	"strings"
	"testing"
)

// TestServiceArgs pins the service shim's argv and its parse.
func TestServiceArgs(t *testing.T) {
	spec := Spec{Mode: Service, Path: "/usr/bin/node", Argv: []string{"/usr/bin/node", "x.js"}}
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
		{
			Mode: Standby, ReleaseFD: 4, KeepStderr: true, KeepEnv: true,
			Rlimits: []Rlimit{{"nofile", 64}}, Path: "/usr/bin/env", Argv: []string{"env"},
		},
		{
			Mode: Session, ReleaseFD: 4, Rlimits: []Rlimit{{"nofile", 64}}, Verbs: []string{"rev-parse", "diff"},
			Path: "/usr/bin/git", Argv: []string{"/usr/bin/git", "--git-dir=/w/.git", "-c", "protocol.allow=never"},
		},
		{
			Mode: Hold, ReleaseFD: 3, PidFile: "/run/b/pid", Mask: "/run/x=/sys/fs/cgroup/unified/cgroup.controllers",
			Start: []string{"/usr/bin/runc", "start", "c1"}, Path: "/usr/bin/runc", Argv: []string{"/usr/bin/runc", "create", "c1"},
		},
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
		{string(Standby), "--release-fd", "2", "--", "/x", "x"},
		{string(Standby), "--env", "all", "--", "/x", "x"},
		{string(Hold), "--mask", "relative=/x", "--", "/x", "x"},
		{string(Session), "--verb", "", "--", "/x", "x"},
	} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}

// TestEnterDrop: the enter shim drops to a uid and gid only when Drop is
// set (the zero Spec keeps the caller's ids, never uid 0), the two parse
// back together, and one without the other is refused.
func TestEnterDrop(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
		want string
	}{
		{
			"keep the caller's",
			Spec{Mode: Enter, Path: "/usr/bin/bwrap", Argv: []string{"bwrap"}},
			"__toolgate_shim enter -- /usr/bin/bwrap bwrap",
		},
		{
			"drop",
			Spec{Mode: Enter, Drop: &IDs{UID: 65534, GID: 65533}, Path: "/usr/bin/bwrap", Argv: []string{"bwrap"}},
			"__toolgate_shim enter --uid 65534 --gid 65533 -- /usr/bin/bwrap bwrap",
		},
		{
			"drop to root",
			Spec{Mode: Enter, Drop: &IDs{}, Path: "/usr/bin/bwrap", Argv: []string{"bwrap"}},
			"__toolgate_shim enter --uid 0 --gid 0 -- /usr/bin/bwrap bwrap",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.spec.Args()
			if got := strings.Join(args, " "); got != tc.want {
				t.Errorf("Args() = %q, want %q", got, tc.want)
			}
			back, err := parse(args[1:])
			if err != nil {
				t.Fatalf("parse(%q): %v", args, err)
			}
			if (back.Drop == nil) != (tc.spec.Drop == nil) || back.Drop != nil && *back.Drop != *tc.spec.Drop {
				t.Errorf("parse(%q).Drop = %+v, want %+v", args, back.Drop, tc.spec.Drop)
			}
		})
	}
	for _, bad := range [][]string{
		{string(Enter), "--uid", "65534", "--", "/x", "x"},
		{string(Enter), "--gid", "65534", "--", "/x", "x"},
		{string(Enter), "--uid", "-1", "--gid", "-1", "--", "/x", "x"},
	} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
	if _, err := parse([]string{string(Enter), "--uid", "1", "--", "/x", "x"}); err == nil || !strings.Contains(err.Error(), "--uid and --gid go together") {
		t.Errorf("parse of --uid alone = %v, want the two named together", err)
	}
}

// TestModes: every known mode renders and parses back as itself; a mode
// that is not one is refused by parse, with the word it was given.
func TestModes(t *testing.T) {
	for _, m := range KnownModes() {
		spec := Spec{Mode: m, Path: "/usr/bin/true", Argv: []string{"true"}}
		if m == Guard { // it runs nothing, and needs its server
			spec = Spec{Mode: m, Parent: 42, ParentFD: 3}
		}
		back, err := parse(spec.Args()[1:])
		if err != nil || back.Mode != m {
			t.Errorf("parse(%q) = mode %q, %v; want %q", spec.Args(), back.Mode, err, m)
		}
	}
	for _, bad := range []string{"", "Init", "exec", "reap "} {
		_, err := parse([]string{bad, "--", "/usr/bin/true", "true"})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("unknown mode %q", bad)) {
			t.Errorf("parse(mode %q) = %v, want unknown mode", bad, err)
		}
	}
}

// TestGuardArgs pins the guard's argv and its parse; what it must have
// (its server, the pipe) and must not (anything to run) is refused.
func TestGuardArgs(t *testing.T) {
	spec := Spec{Mode: Guard, Cgroups: []string{"/sys/fs/cgroup/unified/toolgate-42", "/sys/fs/cgroup/pids/toolgate-42.oci"}, Parent: 42, ParentFD: 3}
	got := strings.Join(spec.Args(), " ")
	if want := "__toolgate_shim guard --cgroup /sys/fs/cgroup/unified/toolgate-42 --cgroup /sys/fs/cgroup/pids/toolgate-42.oci --parent 42 --parent-fd 3"; got != want {
		t.Errorf("Args() = %q, want %q", got, want)
	}
	back, err := parse(spec.Args()[1:])
	if err != nil || strings.Join(back.Args(), " ") != got {
		t.Errorf("parse(Args()) = %q, %v; want %q", back.Args(), err, got)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--parent", "42"}, "guard needs --parent and --parent-fd"},
		{[]string{"--parent-fd", "3"}, "guard needs --parent and --parent-fd"},
		{[]string{"--parent", "0", "--parent-fd", "3"}, `bad --parent "0"`},
		{[]string{"--parent", "42", "--parent-fd", "2"}, `bad --parent-fd "2"`},
		{[]string{"--cgroup", "sys/fs/cgroup/toolgate-42", "--parent", "42", "--parent-fd", "3"}, `bad --cgroup "sys/fs/cgroup/toolgate-42"`},
		{[]string{"--cgroup", "/sys/fs/cgroup/x/../toolgate-42", "--parent", "42", "--parent-fd", "3"}, `bad --cgroup "/sys/fs/cgroup/x/../toolgate-42"`},
		{[]string{"--parent", "42", "--parent-fd", "3", "--", "/bin/sh", "sh"}, "guard runs nothing"},
	} {
		_, err := parse(append([]string{string(Guard)}, tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse(guard %q) = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestCheckCommand: a session command is its prefix word for word, then
// one of the verbs when there are any; anything else is refused.
func TestCheckCommand(t *testing.T) {
	prefix := []string{"/usr/bin/git", "--git-dir=/w/.git", "-c", "protocol.allow=never"}
	verbs := []string{"rev-parse", "diff"}
	with := func(words ...string) []string { return append(append([]string(nil), prefix...), words...) }
	for _, tc := range []struct {
		name  string
		verbs []string
		argv  []string
		ok    bool
	}{
		{"a verb and its arguments", verbs, with("diff", "--no-color", "HEAD"), true},
		{"a verb alone", verbs, with("rev-parse"), true},
		{"no verb", verbs, prefix, false},
		{"another verb", verbs, with("config", "core.pager", "sh"), false},
		{"a verb not in its place", verbs, append([]string{prefix[0], "diff"}, prefix[1:]...), false},
		{"a prefix word dropped", verbs, append(append([]string(nil), prefix[:2]...), "diff"), false},
		{"a prefix word changed", verbs, append([]string{prefix[0], prefix[1], "-c", "protocol.allow=always"}, "diff"), false},
		{"another exe", verbs, append([]string{"/bin/sh"}, append(prefix[1:], "diff")...), false},
		{"shorter than the prefix", verbs, prefix[:1], false},
		{"a NUL byte", verbs, with("diff", "a\x00b"), false},
		{"no verbs: the prefix alone", nil, prefix, true},
		{"no verbs: anything after it", nil, with("./x", "./y"), true},
		{"no verbs: another prefix", nil, []string{"/usr/bin/git", "./x"}, false},
	} {
		err := CheckCommand(prefix, tc.verbs, tc.argv)
		if (err == nil) != tc.ok {
			t.Errorf("%s: CheckCommand(%q) = %v, want ok %v", tc.name, tc.argv, err, tc.ok)
		}
	}
	if err := CheckCommand(nil, nil, []string{"/bin/sh"}); err == nil {
		t.Error("a session with no prefix runs anything")
	}
}
