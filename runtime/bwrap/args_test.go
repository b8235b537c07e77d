package bwrap

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/internal/golden"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/shim"
)

// debianHost is a usr-merged host with every /etc allow-list entry.
var debianHost = bundle.Host{
	UsrLinks: []string{"bin", "sbin", "lib", "lib64"},
	Etc:      binds(bundle.EtcAllowList...),
	NetEtc:   binds(bundle.NetEtcAllowList...),
}

// binds are read-only binds of paths at themselves; /etc/ssl,
// /etc/ld.so.conf.d, /etc/alternatives and /etc/ca-certificates are
// directories, as on Debian.
func binds(paths ...string) []bundle.Bind {
	var out []bundle.Bind
	for _, p := range paths {
		dir := slices.Contains([]string{"/etc/ssl", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/ca-certificates"}, p)
		out = append(out, bundle.Bind{Source: p, Dest: p, Dir: dir})
	}
	return out
}

// testPolicy is the default policy on host h with a /tmp of tmp bytes.
func testPolicy(h bundle.Host, tmp int64) bundle.Policy {
	l := rt.DefaultSandboxLimits()
	l.TmpSize = tmp
	return l.Policy(h, "/usr/libexec/toolgate/toolgate-shim")
}

// goldenPlan is one representative sandbox: a policy and a plan.
type goldenPlan struct {
	name   string
	policy bundle.Policy
	plan   Plan
}

// goldenPlans are the representative plans of the golden files, and the
// inputs of the parity test (parity_test.go).
func goldenPlans() []goldenPlan {
	multilib := debianHost
	multilib.UsrLinks = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}
	small := testPolicy(debianHost, 64<<20)
	small.Rlimits = bundle.Rlimits{NoFile: 64, NProc: 32, Core: 0, FSize: 1 << 20}
	return []goldenPlan{
		{"usr-tool", testPolicy(debianHost, 64<<20), Plan{Template: rt.Template{Path: "/usr/bin/git", Argv: []string{"/usr/bin/git", "--no-pager", "diff", "--check"}, Dir: "/srv/repo"}}},
		{"opt-tool", testPolicy(debianHost, 1<<20), Plan{Template: rt.Template{Path: "/opt/lint/bin/lint", Argv: []string{"/opt/lint/bin/lint", "--strict", "a b"}, Dir: "/srv/repo"}}},
		{"symlinked-tool", testPolicy(debianHost, 64<<20), Plan{Template: rt.Template{Path: "/opt/ruff/ruff", Argv: []string{"/usr/local/bin/ruff", "check"}, Dir: "/srv/repo"}}},
		{"symlink-outside", testPolicy(debianHost, 64<<20), Plan{Template: rt.Template{Path: "/srv/real/lint", Argv: []string{"/srv/bin/lint"}, Dir: "/workspace"}}},
		{"tool-in-dir", testPolicy(debianHost, 64<<20), Plan{Template: rt.Template{Path: "/srv/repo/scripts/check", Argv: []string{"/srv/repo/scripts/check"}, Dir: "/srv/repo"}}},
		{"with-rlimits", small, Plan{Template: rt.Template{Path: "/usr/bin/make-check", Argv: []string{"/usr/bin/make-check"}, Dir: "/srv/repo"}}},
		{
			"unmerged-usr", testPolicy(bundle.Host{RootDirs: []string{"/bin", "/lib"}, Etc: binds("/etc/passwd")}, 64<<20),
			Plan{Template: rt.Template{Path: "/bin/true", Argv: []string{"/bin/true"}, Dir: "/srv/repo"}},
		},
		{"multilib", testPolicy(multilib, 64<<20), Plan{Template: rt.Template{Path: "/usr/bin/true", Argv: []string{"/usr/bin/true"}, Dir: "/opt/x"}}},
		{"helper", testPolicy(debianHost, 64<<20), Plan{Template: rt.Template{Path: "/usr/bin/ctags-universal", Argv: []string{"/usr/bin/ctags", "--options=NONE", "--_interactive"}, Dir: "/srv/x", SplitStderr: true}}},
		// A tool with an egress allowlist: its proxy's directory bound,
		// the init shim told where the socket is; still --unshare-net.
		{"egress-tool", testPolicy(debianHost, 64<<20), Plan{
			Template:  rt.Template{Path: "/usr/bin/curl", Argv: []string{"/usr/bin/curl", "-sS", "https://api.example.com/"}, Dir: "/srv/repo"},
			EgressDir: "/tmp/toolgate-egress-1/00112233445566778899aabbccddeeff",
		}},
		// Services (StartService): no --clearenv or --setenv, the service
		// shim; ReadOnly binds, skipping what is visible already.
		{"service-node", testPolicy(debianHost, 64<<20), Plan{
			Template: rt.Template{Path: "/usr/bin/node", Argv: []string{"/usr/bin/node", "/opt/mcp/node_modules/srv/dist/index.js", "stdio"}, Dir: "/opt/mcp"},
			Service:  true, ReadOnly: []string{"/opt/mcp/node_modules/srv/dist/index.js", "/srv/data", "/usr/share/doc"},
		}},
		{"service-net-no-dir", testPolicy(debianHost, 64<<20), Plan{Template: rt.Template{Path: "/opt/web/bin/mcp-web", Argv: []string{"/usr/local/bin/mcp-web", "--stdio"}}, Service: true, ShareNet: true}},
		{"service-egress", testPolicy(debianHost, 64<<20), Plan{
			Template: rt.Template{Path: "/usr/bin/node", Argv: []string{"/usr/bin/node", "/opt/mcp/fetch.js"}, Dir: "/opt/mcp"}, Service: true,
			EgressDir: "/tmp/toolgate-egress-1/ffeeddccbbaa99887766554433221100",
		}},
		// Prepared sandboxes (the pool): the same sandbox, the standby
		// shim first.
		{"standby-tool", testPolicy(debianHost, 64<<20), Plan{Template: rt.Template{Path: "/usr/bin/git", Argv: []string{"/usr/bin/git", "--no-pager", "diff", "--check"}, Dir: "/srv/repo"}, Standby: true}},
		{"standby-helper", testPolicy(debianHost, 64<<20), Plan{Template: rt.Template{Path: "/usr/bin/ctags-universal", Argv: []string{"/usr/bin/ctags", "--options=NONE", "--_interactive"}, Dir: "/srv/x", SplitStderr: true}, Standby: true}},
		{"session-helper", testPolicy(debianHost, 64<<20), Plan{Template: rt.Template{
			Path: "/usr/bin/git", Argv: []string{"/usr/bin/git", "--git-dir=/srv/repo/.git", "-c", "protocol.allow=never"}, Dir: "/srv/repo",
			Session: true, Verbs: []string{"rev-parse", "diff"},
		}, Standby: true}},
		{"standby-service", testPolicy(debianHost, 64<<20), Plan{
			Template: rt.Template{Path: "/usr/bin/node", Argv: []string{"/usr/bin/node", "/opt/mcp/node_modules/srv/dist/index.js", "stdio"}, Dir: "/opt/mcp"},
			Service:  true, ReadOnly: []string{"/opt/mcp/node_modules/srv/dist/index.js"}, Standby: true,
		}},
	}
}

// TestStandbyIsTheSameSandbox holds a prepared sandbox to the one a call
// makes on its path: for every plan, the standby rendering has exactly the
// same bwrap flags, binds and environment, and its shim differs from the
// init (or service) shim only in its mode and the release descriptor; the
// tool it will exec, its argv and its rlimits are the same.
func TestStandbyIsTheSameSandbox(t *testing.T) {
	for _, tc := range goldenPlans() {
		// A plan with an egress proxy is never prepared ahead: the proxy
		// is the call's (or the process's) own.
		if tc.plan.Standby || tc.plan.EgressDir != "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			plain := Args(tc.policy, tc.plan)
			sp := tc.plan
			sp.Standby = true
			standby := Args(tc.policy, sp)
			cut := func(a []string) ([]string, []string) {
				i := slices.Index(a, "--")
				return a[:i], a[i+1:]
			}
			pb, ps := cut(plain)
			sb, ss := cut(standby)
			if !slices.Equal(pb, sb) {
				t.Fatalf("the sandbox differs:\n plain   %q\n standby %q", pb, sb)
			}
			wantMode := shim.Init
			if tc.plan.Service {
				wantMode = shim.Service
			}
			if ps[0] != bundle.ShimPath || ss[0] != bundle.ShimPath || shim.Mode(ps[2]) != wantMode || shim.Mode(ss[2]) != shim.Standby {
				t.Fatalf("shims: plain %q, standby %q", ps[:3], ss[:3])
			}
			// Standby adds the release descriptor and, for a tool, says to
			// answer its status (for a service: to keep stderr and the
			// environment, as the service mode does); nothing else
			// changes.
			extra := []string{"--answer", "status", "--release-fd", strconv.Itoa(ReleaseFD)}
			if tc.plan.Service {
				extra = []string{"--stderr", "keep", "--env", "keep", "--release-fd", strconv.Itoa(ReleaseFD)}
			}
			i := slices.Index(ps, "--")
			want := slices.Concat(ps[:2], []string{string(shim.Standby)}, ps[3:i], extra, ps[i:])
			if !slices.Equal(ss, want) {
				t.Errorf("standby shim argv = %q\nwant %q", ss, want)
			}
		})
	}
}

// TestSessionIsTheSameSandbox holds a helper session's sandbox to the one
// a call of a tool with the same exe and dir gets: the same bwrap flags,
// binds and environment; only the shim differs (session mode, the release
// descriptor, the verbs, and the fixed argv as the prefix of every
// command).
func TestSessionIsTheSameSandbox(t *testing.T) {
	for _, tc := range goldenPlans() {
		if !tc.plan.Session {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			tool := tc.plan
			tool.Session, tool.Verbs, tool.Standby = false, nil, false
			cut := func(a []string) ([]string, []string) {
				i := slices.Index(a, "--")
				return a[:i], a[i+1:]
			}
			tb, ts := cut(Args(tc.policy, tool))
			sb, ss := cut(Args(tc.policy, tc.plan))
			if !slices.Equal(tb, sb) {
				t.Fatalf("the sandbox differs:\n tool    %q\n session %q", tb, sb)
			}
			if shim.Mode(ts[2]) != shim.Init || shim.Mode(ss[2]) != shim.Session {
				t.Fatalf("shims: tool %q, session %q", ts[:3], ss[:3])
			}
			i := slices.Index(ts, "--")
			var verbs []string
			for _, v := range tc.plan.Verbs {
				verbs = append(verbs, "--verb", v)
			}
			want := slices.Concat(ts[:2], []string{string(shim.Session)}, ts[3:i], []string{"--release-fd", strconv.Itoa(ReleaseFD)}, verbs, ts[i:])
			if !slices.Equal(ss, want) {
				t.Errorf("session shim argv = %q\nwant %q", ss, want)
			}
		})
	}
}

// TestArgsGolden pins the exact argv for representative plans. Run with
// -update to rewrite, and review the diff.
func TestArgsGolden(t *testing.T) {
	for _, tc := range goldenPlans() {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(Args(tc.policy, tc.plan), "\n") + "\n"
			golden.Check(t, filepath.Join("testdata", tc.name+".golden"), []byte(got))
			// Idempotence: a pure function of its inputs.
			if again := strings.Join(Args(tc.policy, tc.plan), "\n") + "\n"; again != got {
				t.Error("Args() is not deterministic")
			}
		})
	}
}

// TestArgsInvariants checks the flags every sandbox must carry, by name,
// independently of the golden files.
func TestArgsInvariants(t *testing.T) {
	a := Args(testPolicy(debianHost, 42), Plan{Template: rt.Template{Path: "/usr/bin/true", Argv: []string{"/usr/bin/true"}, Dir: "/srv/repo"}})
	for _, flag := range []string{
		"--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
		"--unshare-cgroup", "--disable-userns", "--die-with-parent", "--new-session", "--as-pid-1", "--clearenv",
	} {
		if !slices.Contains(a, flag) {
			t.Errorf("argv lacks %s", flag)
		}
	}
	joined := " " + strings.Join(a, " ") + " "
	for _, want := range []string{
		" --cap-drop ALL ", " --ro-bind /srv/repo /srv/repo ", " --chdir /srv/repo ", " --remount-ro / ",
		" --size 42 --tmpfs /tmp ", " --setenv PAGER cat ", " --setenv GIT_PAGER cat ", " --setenv GIT_CONFIG_NOSYSTEM 1 ",
		" --seccomp 3 ", " --proc /proc --ro-bind /dev/null /proc/keys ", " -- /.toolgate/shim __toolgate_shim init --rlimit nofile=1024 --rlimit nproc=512 --rlimit core=0 --rlimit fsize=1073741824 -- /usr/bin/true /usr/bin/true",
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

// TestServiceArgsInvariants checks what a service's sandbox must and must
// not carry: the same isolation flags as a tool's (the network namespace
// only without ShareNet), no environment flag at all (values travel in
// bwrap's environment, never its argv), and the service shim.
func TestServiceArgsInvariants(t *testing.T) {
	base := Plan{Template: rt.Template{Path: "/usr/bin/node", Argv: []string{"/usr/bin/node", "/opt/mcp/index.js"}, Dir: "/opt/mcp"}, Service: true}
	for _, shareNet := range []bool{false, true} {
		p := base
		p.ShareNet = shareNet
		a := Args(testPolicy(debianHost, 42), p)
		for _, flag := range []string{
			"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
			"--unshare-cgroup", "--disable-userns", "--die-with-parent", "--new-session", "--as-pid-1",
		} {
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
		for _, want := range []string{
			" --cap-drop ALL ", " --ro-bind /opt/mcp /opt/mcp ", " --chdir /opt/mcp ", " --remount-ro / ",
			" -- /.toolgate/shim __toolgate_shim service --rlimit nofile=1024 --rlimit nproc=512 --rlimit core=0 --rlimit fsize=1073741824 -- /usr/bin/node /usr/bin/node /opt/mcp/index.js",
		} {
			if !strings.Contains(joined, want) {
				t.Errorf("ShareNet=%v: argv lacks %q", shareNet, strings.TrimSpace(want))
			}
		}
	}
	// A tool never gets the relaxations, whatever the host offers.
	tool := Args(testPolicy(debianHost, 1), Plan{Template: rt.Template{Path: "/usr/bin/true", Argv: []string{"/usr/bin/true"}, Dir: "/srv/repo"}})
	if slices.Contains(tool, "/etc/resolv.conf") || !slices.Contains(tool, "--unshare-net") {
		t.Error("a tool's sandbox has the network or its /etc entries")
	}
}
