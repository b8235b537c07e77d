package bwrap

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rt "github.com/toolgate/toolgate/runtime"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var debianHost = Host{
	UsrLinks: []string{"bin", "sbin", "lib", "lib64"},
	Etc:      EtcAllowList,
	NetEtc:   NetEtcAllowList,
}

// TestArgsGolden pins the exact argv for representative plans. Run with
// -update to rewrite, and review the diff.
func TestArgsGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		host Host
		plan Plan
	}{
		{"usr-tool", debianHost, Plan{Shim: "/usr/libexec/toolgate/toolgate-shim", Seccomp: true, Exe: "/usr/bin/git", ExeResolved: "/usr/bin/git",
			Argv: []string{"/usr/bin/git", "--no-pager", "diff", "--check"}, Dir: "/srv/repo", TmpSize: 64 << 20}},
		{"opt-tool", debianHost, Plan{Shim: "/usr/libexec/toolgate/toolgate-shim", Seccomp: true, Exe: "/opt/lint/bin/lint", ExeResolved: "/opt/lint/bin/lint",
			Argv: []string{"/opt/lint/bin/lint", "--strict", "a b"}, Dir: "/srv/repo", TmpSize: 1 << 20}},
		{"symlinked-tool", debianHost, Plan{Shim: "/usr/libexec/toolgate/toolgate-shim", Seccomp: true, Exe: "/usr/local/bin/ruff", ExeResolved: "/opt/ruff/ruff",
			Argv: []string{"/usr/local/bin/ruff", "check"}, Dir: "/srv/repo", TmpSize: 64 << 20}},
		{"symlink-outside", debianHost, Plan{Shim: "/usr/libexec/toolgate/toolgate-shim", Seccomp: true, Exe: "/srv/bin/lint", ExeResolved: "/srv/real/lint",
			Argv: []string{"/srv/bin/lint"}, Dir: "/workspace", TmpSize: 64 << 20}},
		{"tool-in-dir", debianHost, Plan{Shim: "/usr/libexec/toolgate/toolgate-shim", Seccomp: true, Exe: "/srv/repo/scripts/check", ExeResolved: "/srv/repo/scripts/check",
			Argv: []string{"/srv/repo/scripts/check"}, Dir: "/srv/repo", TmpSize: 64 << 20}},
		{"with-rlimits", debianHost, Plan{Shim: "/usr/libexec/toolgate/toolgate-shim", Seccomp: true, Exe: "/usr/bin/make-check", ExeResolved: "/usr/bin/make-check",
			Argv: []string{"/usr/bin/make-check"}, Dir: "/srv/repo", TmpSize: 64 << 20,
			Rlimits: []rt.Rlimit{{Name: "nofile", Value: 1024}, {Name: "nproc", Value: 512}}}},
		{"unmerged-usr", Host{RootDirs: []string{"/bin", "/lib"}, Etc: []string{"/etc/passwd"}}, Plan{Shim: "/usr/libexec/toolgate/toolgate-shim", Seccomp: true, Exe: "/bin/true", ExeResolved: "/bin/true",
			Argv: []string{"/bin/true"}, Dir: "/srv/repo", TmpSize: 64 << 20}},
		// Services (StartService): no --clearenv or --setenv, the service
		// shim; ReadOnly binds, skipping what is visible already.
		{"service-node", debianHost, Plan{Shim: "/usr/libexec/toolgate/toolgate-shim", Seccomp: true, Exe: "/usr/bin/node", ExeResolved: "/usr/bin/node",
			Argv: []string{"/usr/bin/node", "/opt/mcp/node_modules/srv/dist/index.js", "stdio"}, Dir: "/opt/mcp", TmpSize: 64 << 20,
			Service: true, ReadOnly: []string{"/opt/mcp/node_modules/srv/dist/index.js", "/srv/data", "/usr/share/doc"}}},
		{"service-net-no-dir", debianHost, Plan{Shim: "/usr/libexec/toolgate/toolgate-shim", Seccomp: true, Exe: "/usr/local/bin/mcp-web", ExeResolved: "/opt/web/bin/mcp-web",
			Argv: []string{"/usr/local/bin/mcp-web", "--stdio"}, TmpSize: 64 << 20, Service: true, ShareNet: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(Args(tc.host, tc.plan), "\n") + "\n"
			golden := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("Args() differs from %s:\ngot:\n%s\nwant:\n%s", golden, got, want)
			}
			// Idempotence: a pure function of its inputs.
			if again := strings.Join(Args(tc.host, tc.plan), "\n") + "\n"; again != got {
				t.Error("Args() is not deterministic")
			}
		})
	}
}

// TestArgsInvariants checks the flags every sandbox must carry, by name,
// independently of the golden files.
func TestArgsInvariants(t *testing.T) {
	a := Args(debianHost, Plan{Shim: "/usr/libexec/toolgate/toolgate-shim", Exe: "/usr/bin/true", ExeResolved: "/usr/bin/true", Argv: []string{"/usr/bin/true"}, Dir: "/srv/repo", TmpSize: 42})
	for _, flag := range []string{"--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
		"--unshare-cgroup", "--disable-userns", "--die-with-parent", "--new-session", "--as-pid-1", "--clearenv"} {
		if !slices.Contains(a, flag) {
			t.Errorf("argv lacks %s", flag)
		}
	}
	joined := " " + strings.Join(a, " ") + " "
	for _, want := range []string{
		" --cap-drop ALL ", " --ro-bind /srv/repo /srv/repo ", " --chdir /srv/repo ", " --remount-ro / ",
		" --size 42 --tmpfs /tmp ", " --setenv PAGER cat ", " --setenv GIT_PAGER cat ", " --setenv GIT_CONFIG_NOSYSTEM 1 ",
		" -- /.toolgate/shim __toolgate_shim init -- /usr/bin/true /usr/bin/true",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("argv lacks %q", strings.TrimSpace(want))
		}
	}
	// Never the whole of /etc, never a writable bind, never the host's /.
	for i, x := range a {
		if x == "--bind" || x == "--dev-bind" || x == "--share-net" {
			t.Errorf("argv has a relaxing flag %s", x)
		}
		if (x == "--ro-bind" || x == "--ro-bind-try") && (a[i+1] == "/etc" || a[i+1] == "/" || a[i+1] == "/home" || a[i+1] == "/root" || a[i+1] == "/run" || a[i+1] == "/var") {
			t.Errorf("argv binds %s", a[i+1])
		}
	}
	if n := strings.Count(joined, " --setenv "); n != 4 {
		t.Errorf("%d --setenv, want exactly 4", n)
	}
}

func TestDetectHost(t *testing.T) {
	fs := map[string]struct {
		link   string
		isDir  bool
		exists bool
	}{
		"/bin": {link: "usr/bin", exists: true}, "/sbin": {link: "usr/sbin", exists: true},
		"/lib": {isDir: true, exists: true}, "/lib64": {link: "/usr/lib64", exists: true},
		"/lib32":      {link: "elsewhere/lib32", exists: true},
		"/etc/passwd": {exists: true}, "/etc/ssl": {isDir: true, exists: true},
	}
	lst := func(p string) (bool, bool, error) {
		e, ok := fs[p]
		if !ok {
			return false, false, os.ErrNotExist
		}
		return e.link != "", e.isDir, nil
	}
	rl := func(p string) (string, error) { return fs[p].link, nil }
	h := DetectHost(lst, rl)
	if got := strings.Join(h.UsrLinks, ","); got != "bin,sbin,lib64" {
		t.Errorf("UsrLinks = %s, want bin,sbin,lib64 (lib32 points elsewhere)", got)
	}
	if got := strings.Join(h.RootDirs, ","); got != "/lib" {
		t.Errorf("RootDirs = %s, want /lib", got)
	}
	if got := strings.Join(h.Etc, ","); got != "/etc/passwd,/etc/ssl" {
		t.Errorf("Etc = %s", got)
	}
}

// TestServiceArgsInvariants checks what a service's sandbox must and must
// not carry: the same isolation flags as a tool's (the network namespace
// only without ShareNet), no environment flag at all (values travel in
// bwrap's environment, never its argv), and the service shim.
func TestServiceArgsInvariants(t *testing.T) {
	base := Plan{Shim: "/usr/libexec/toolgate/toolgate-shim", Exe: "/usr/bin/node", ExeResolved: "/usr/bin/node",
		Argv: []string{"/usr/bin/node", "/opt/mcp/index.js"}, Dir: "/opt/mcp", TmpSize: 42, Service: true}
	for _, shareNet := range []bool{false, true} {
		p := base
		p.ShareNet = shareNet
		a := Args(debianHost, p)
		for _, flag := range []string{"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
			"--unshare-cgroup", "--disable-userns", "--die-with-parent", "--new-session", "--as-pid-1"} {
			if !slices.Contains(a, flag) {
				t.Errorf("ShareNet=%v: argv lacks %s", shareNet, flag)
			}
		}
		if got := slices.Contains(a, "--unshare-net"); got == shareNet {
			t.Errorf("ShareNet=%v: --unshare-net present = %v", shareNet, got)
		}
		if got := slices.Contains(a, "/etc/resolv.conf"); got != shareNet {
			t.Errorf("ShareNet=%v: /etc/resolv.conf bound = %v", shareNet, got)
		}
		for _, x := range a {
			if x == "--clearenv" || x == "--setenv" || x == "--unsetenv" || x == "--bind" || x == "--dev-bind" {
				t.Errorf("ShareNet=%v: service argv has %s", shareNet, x)
			}
		}
		joined := " " + strings.Join(a, " ") + " "
		for _, want := range []string{" --cap-drop ALL ", " --ro-bind /opt/mcp /opt/mcp ", " --chdir /opt/mcp ", " --remount-ro / ",
			" -- /.toolgate/shim __toolgate_shim service -- /usr/bin/node /usr/bin/node /opt/mcp/index.js"} {
			if !strings.Contains(joined, want) {
				t.Errorf("ShareNet=%v: argv lacks %q", shareNet, strings.TrimSpace(want))
			}
		}
	}
	// A tool never gets the relaxations, whatever the host offers.
	tool := Args(debianHost, Plan{Shim: "/s", Exe: "/usr/bin/true", ExeResolved: "/usr/bin/true", Argv: []string{"/usr/bin/true"}, Dir: "/srv/repo", TmpSize: 1})
	if slices.Contains(tool, "/etc/resolv.conf") || !slices.Contains(tool, "--unshare-net") {
		t.Error("a tool's sandbox has the network or its /etc entries")
	}
}
