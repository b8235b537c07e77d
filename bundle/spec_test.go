package bundle

import (
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// env4 is the environment every sandbox gets, pinned here literally (not
// read from Env): a fifth variable must fail a test.
var env4 = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PAGER=cat", "GIT_PAGER=cat", "GIT_CONFIG_NOSYSTEM=1"}

func testTool() Tool {
	return Tool{
		Exe:  "/srv/repo/check",
		Dir:  "/srv/repo",
		Args: []string{ShimPath, "__toolgate_shim", "init", "--", "/srv/repo/check", "/srv/repo/check"},
	}
}

func testPolicy() Policy {
	return Policy{
		Rootfs: "/run/toolgate/1/rootfs", UID: SandboxUID, GID: SandboxGID,
		Limits: Limits{
			Rlimits: Rlimits{NoFile: 1024, NProc: 512, Core: 0, FSize: 1 << 30},
			TmpSize: 64 << 20, Pids: 256, Memory: 512 << 20,
		},
		MemorySwap:  true,
		CgroupsPath: "toolgate-1/toolgate-1-c1",
		Host: Host{Etc: []Bind{
			{Source: "/etc/passwd", Dest: "/etc/passwd"},
			{Source: "/etc/ssl", Dest: "/etc/ssl", Dir: true},
		}},
		Shim: "/usr/local/bin/toolgate-shim",
	}
}

func mustSpec(t *testing.T, tl Tool, p Policy, extra ...Opt) *specs.Spec {
	t.Helper()
	s, err := Spec(tl, p, extra...)
	if err != nil {
		t.Fatalf("Spec() = %v", err)
	}
	return s
}

// TestSecurityCriticalFields asserts, field by field, what SANDBOX.md §3
// maps from the bwrap flags.
func TestSecurityCriticalFields(t *testing.T) {
	s := mustSpec(t, testTool(), testPolicy())
	wantNS := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace},
		{Type: specs.NetworkNamespace},
		{Type: specs.IPCNamespace},
		{Type: specs.UTSNamespace},
		{Type: specs.MountNamespace},
		{Type: specs.CgroupNamespace},
	}
	if d := cmp.Diff(wantNS, s.Linux.Namespaces); d != "" {
		t.Errorf("namespaces (-want +got):\n%s", d)
	}
	for _, ns := range s.Linux.Namespaces {
		if ns.Path != "" {
			t.Errorf("namespace %s joins %q: want a new one", ns.Type, ns.Path)
		}
		if ns.Type == specs.UserNamespace {
			t.Errorf("user namespace present")
		}
	}
	if s.Hostname != "sandbox" {
		t.Errorf("hostname = %q, want sandbox", s.Hostname)
	}
	p := s.Process
	if p.Terminal || !p.NoNewPrivileges {
		t.Errorf("terminal = %v, noNewPrivileges = %v; want false, true", p.Terminal, p.NoNewPrivileges)
	}
	if d := cmp.Diff(specs.User{UID: 65534, GID: 65534}, p.User); d != "" {
		t.Errorf("user (-want +got):\n%s", d)
	}
	c := p.Capabilities
	for name, set := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "inheritable": c.Inheritable, "permitted": c.Permitted, "ambient": c.Ambient} {
		if len(set) != 0 {
			t.Errorf("capabilities %s = %q, want empty", name, set)
		}
	}
	if d := cmp.Diff(env4, p.Env); d != "" {
		t.Errorf("env (-want +got):\n%s", d)
	}
	if p.Cwd != "/srv/repo" {
		t.Errorf("cwd = %q, want the tool dir", p.Cwd)
	}
	wantR := []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024},
		{Type: "RLIMIT_NPROC", Hard: 512, Soft: 512},
		{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
		{Type: "RLIMIT_FSIZE", Hard: 1 << 30, Soft: 1 << 30},
	}
	if d := cmp.Diff(wantR, p.Rlimits); d != "" {
		t.Errorf("rlimits (-want +got):\n%s", d)
	}
	if s.Root == nil || !s.Root.Readonly || s.Root.Path != "/run/toolgate/1/rootfs" {
		t.Errorf("root = %+v, want the read-only skeleton", s.Root)
	}
	if d := cmp.Diff(MaskedPaths, s.Linux.MaskedPaths); d != "" {
		t.Errorf("maskedPaths (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger", "/dev"}, s.Linux.ReadonlyPaths); d != "" {
		t.Errorf("readonlyPaths (-want +got):\n%s", d)
	}
	res := s.Linux.Resources
	if res.Pids == nil || *res.Pids.Limit != 256 {
		t.Errorf("pids = %+v, want 256", res.Pids)
	}
	if res.Memory == nil || *res.Memory.Limit != 512<<20 || res.Memory.Swap == nil || *res.Memory.Swap != 512<<20 {
		t.Errorf("memory = %+v, want limit = swap = 512 MiB", res.Memory)
	}
	if d := cmp.Diff([]specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}, res.Devices); d != "" {
		t.Errorf("device cgroup (-want +got):\n%s", d)
	}
	if len(s.Linux.Devices) != 0 {
		t.Errorf("devices = %+v, want none beyond the runtime's defaults", s.Linux.Devices)
	}
	if s.Linux.CgroupsPath != "toolgate-1/toolgate-1-c1" {
		t.Errorf("cgroupsPath = %q", s.Linux.CgroupsPath)
	}
	if s.Hooks != nil {
		t.Errorf("hooks = %+v, want none", s.Hooks)
	}
}

// mountsByDest indexes the mounts, failing on a duplicate destination.
func mountsByDest(t *testing.T, s *specs.Spec) map[string]specs.Mount {
	t.Helper()
	m := map[string]specs.Mount{}
	for _, x := range s.Mounts {
		if _, dup := m[x.Destination]; dup {
			t.Errorf("mount %s twice", x.Destination)
		}
		m[x.Destination] = x
	}
	return m
}

func TestMounts(t *testing.T) {
	s := mustSpec(t, testTool(), testPolicy())
	m := mountsByDest(t, s)
	want := map[string]specs.Mount{
		"/proc":       {Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		"/tmp":        {Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", "size=67108864"}},
		"/usr":        {Destination: "/usr", Type: "bind", Source: "/usr", Options: []string{"rbind", "rro", "nosuid", "nodev"}},
		"/etc/passwd": {Destination: "/etc/passwd", Type: "bind", Source: "/etc/passwd", Options: []string{"rbind", "ro", "nosuid", "nodev"}},
		"/etc/ssl":    {Destination: "/etc/ssl", Type: "bind", Source: "/etc/ssl", Options: []string{"rbind", "rro", "nosuid", "nodev"}},
		ShimPath:      {Destination: ShimPath, Type: "bind", Source: "/usr/local/bin/toolgate-shim", Options: []string{"rbind", "ro", "nosuid", "nodev"}},
		"/srv/repo":   {Destination: "/srv/repo", Type: "bind", Source: "/srv/repo", Options: []string{"rbind", "rro", "nosuid", "nodev"}},
	}
	for dest, w := range want {
		if d := cmp.Diff(w, m[dest]); d != "" {
			t.Errorf("mount %s (-want +got):\n%s", dest, d)
		}
	}
	for dest := range m {
		switch {
		case dest == "/sys" || strings.HasPrefix(dest, "/sys/"):
			t.Errorf("sysfs mounted at %s", dest)
		case dest == "/etc", dest == "/", dest == "/home", dest == "/root", dest == "/run":
			t.Errorf("whole %s bound", dest)
		case dest == "/srv/repo/check":
			t.Errorf("exe inside the dir bound again")
		}
	}
	// No bind is writable.
	for _, x := range s.Mounts {
		if x.Type == "bind" && !slices.Contains(x.Options, "ro") && !slices.Contains(x.Options, "rro") {
			t.Errorf("bind %s is writable: %q", x.Destination, x.Options)
		}
	}
	// The private /tmp comes before any bind below it.
	tl := testTool()
	tl.Dir, tl.Exe = "/tmp/w/repo", "/tmp/w/repo/check"
	s = mustSpec(t, tl, testPolicy())
	ti := slices.IndexFunc(s.Mounts, func(x specs.Mount) bool { return x.Destination == "/tmp" })
	di := slices.IndexFunc(s.Mounts, func(x specs.Mount) bool { return x.Destination == "/tmp/w/repo" })
	if ti < 0 || di < 0 || ti > di {
		t.Errorf("/tmp at %d, the dir at %d: the dir bind must come after the tmpfs", ti, di)
	}
}

func TestExeBind(t *testing.T) {
	for _, tc := range []struct {
		name, exe string
		bound     bool
	}{
		{"in the dir", "/srv/repo/bin/check", false},
		{"under /usr", "/usr/bin/git", false},
		{"outside", "/opt/tool/bin/check", true},
		{"sibling prefix of the dir", "/srv/repository/check", true},
		{"sibling prefix of /usr", "/usrlocal/check", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := testTool()
			tl.Exe = tc.exe
			m := mountsByDest(t, mustSpec(t, tl, testPolicy()))
			got, ok := m[tc.exe]
			if ok != tc.bound {
				t.Fatalf("exe %s bound = %v, want %v", tc.exe, ok, tc.bound)
			}
			if ok {
				want := specs.Mount{Destination: tc.exe, Type: "bind", Source: tc.exe, Options: []string{"rbind", "ro", "nosuid", "nodev"}}
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("exe bind (-want +got):\n%s", d)
				}
			}
		})
	}
}

func TestWithoutRecursiveReadonly(t *testing.T) {
	s := mustSpec(t, testTool(), testPolicy(), WithoutRecursiveReadonly())
	for _, x := range s.Mounts {
		if slices.Contains(x.Options, "rro") {
			t.Errorf("mount %s keeps rro: %q", x.Destination, x.Options)
		}
		if x.Type == "bind" && !slices.Contains(x.Options, "ro") {
			t.Errorf("bind %s lost ro: %q", x.Destination, x.Options)
		}
	}
	// The default is untouched by the option (no shared option slices).
	s = mustSpec(t, testTool(), testPolicy())
	if m := mountsByDest(t, s); !slices.Contains(m["/usr"].Options, "rro") {
		t.Errorf("/usr lost rro after another spec relaxed it: %q", m["/usr"].Options)
	}
}

func TestNoLimitsWhenNotAsked(t *testing.T) {
	p := testPolicy()
	p.Pids, p.Memory, p.MemorySwap = 0, 0, false
	s := mustSpec(t, testTool(), p)
	if s.Linux.Resources.Pids != nil || s.Linux.Resources.Memory != nil {
		t.Errorf("resources = %+v, want no pids or memory limit", s.Linux.Resources)
	}
	p.Memory = 1 << 30
	s = mustSpec(t, testTool(), p)
	if s.Linux.Resources.Memory.Swap != nil {
		t.Errorf("swap limit set without MemorySwap")
	}
}

func TestValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tool    func(*Tool)
		policy  func(*Policy)
		wantErr string
	}{
		{name: "exe relative", tool: func(t *Tool) { t.Exe = "check" }, wantErr: `tool exe "check": not an absolute, clean path`},
		{name: "exe unclean", tool: func(t *Tool) { t.Exe = "/srv/repo/../x" }, wantErr: `tool exe "/srv/repo/../x"`},
		{name: "exe in /dev", tool: func(t *Tool) { t.Exe = "/dev/shm/x" }, wantErr: "under /dev"},
		{name: "exe at the shim", tool: func(t *Tool) { t.Exe = ShimPath }, wantErr: "under /.toolgate"},
		{name: "dir root", tool: func(t *Tool) { t.Dir = "/" }, wantErr: `"/" cannot be bound into a sandbox`},
		{name: "dir /etc", tool: func(t *Tool) { t.Dir = "/etc" }, wantErr: `"/etc" cannot be bound`},
		{name: "dir under /etc", tool: func(t *Tool) { t.Dir = "/etc/app" }, wantErr: "under /etc"},
		{name: "dir /srv", tool: func(t *Tool) { t.Dir = "/srv" }, wantErr: `"/srv" cannot be bound`},
		{name: "dir /opt", tool: func(t *Tool) { t.Dir = "/opt" }, wantErr: `"/opt" cannot be bound`},
		{name: "dir under /proc", tool: func(t *Tool) { t.Dir = "/proc/1" }, wantErr: "under /proc"},
		{name: "dir is /tmp", tool: func(t *Tool) { t.Dir = "/tmp" }, wantErr: `"/tmp" cannot be bound`},
		{name: "dir trailing slash", tool: func(t *Tool) { t.Dir = "/srv/repo/" }, wantErr: "not an absolute, clean path"},
		{name: "args empty", tool: func(t *Tool) { t.Args = nil }, wantErr: "tool args: empty"},
		{name: "args relative", tool: func(t *Tool) { t.Args = []string{"toolgate"} }, wantErr: "want an absolute path"},
		{name: "rootfs relative", policy: func(p *Policy) { p.Rootfs = "rootfs" }, wantErr: `policy rootfs "rootfs"`},
		{name: "rootfs slash", policy: func(p *Policy) { p.Rootfs = "/" }, wantErr: `policy rootfs "/"`},
		{name: "uid 0", policy: func(p *Policy) { p.UID = 0 }, wantErr: "never runs as uid or gid 0"},
		{name: "gid 0", policy: func(p *Policy) { p.GID = 0 }, wantErr: "never runs as uid or gid 0"},
		{name: "nofile 0", policy: func(p *Policy) { p.NoFile = 0 }, wantErr: "rlimit nofile 0"},
		{name: "nproc 0", policy: func(p *Policy) { p.NProc = 0 }, wantErr: "rlimit nproc 0"},
		{name: "fsize 0", policy: func(p *Policy) { p.FSize = 0 }, wantErr: "rlimit fsize 0"},
		{name: "tmp 0", policy: func(p *Policy) { p.TmpSize = 0 }, wantErr: "tmp size 0"},
		{name: "pids negative", policy: func(p *Policy) { p.Pids = -1 }, wantErr: "policy pids -1"},
		{name: "memory negative", policy: func(p *Policy) { p.Memory = -1; p.MemorySwap = false }, wantErr: "policy memory -1"},
		{name: "swap without memory", policy: func(p *Policy) { p.Memory = 0 }, wantErr: "set without a memory limit"},
		{name: "cgroups path empty", policy: func(p *Policy) { p.CgroupsPath = "" }, wantErr: "policy cgroups path"},
		{name: "cgroups path dotdot", policy: func(p *Policy) { p.CgroupsPath = "../x" }, wantErr: "policy cgroups path"},
		{name: "shim relative", policy: func(p *Policy) { p.Shim = "toolgate" }, wantErr: "policy shim"},
		{name: "all of /etc", policy: func(p *Policy) { p.Host.Etc = append(p.Host.Etc, Bind{"/etc", "/etc", true}) }, wantErr: "not in the /etc allow-list"},
		{name: "etc/shadow", policy: func(p *Policy) {
			p.Host.Etc = append(p.Host.Etc, Bind{"/etc/shadow", "/etc/shadow", false})
		}, wantErr: "not in the /etc allow-list"},
		{name: "etc elsewhere", policy: func(p *Policy) { p.Host.Etc = append(p.Host.Etc, Bind{"/etc/hosts", "/srv/hosts", false}) }, wantErr: "bound at itself"},
		{name: "a root dir not usr-merged", policy: func(p *Policy) { p.Host.RootDirs = append(p.Host.RootDirs, "/home") }, wantErr: "not one of the usr-merge names"},
		{name: "a usr link not usr-merged", policy: func(p *Policy) { p.Host.UsrLinks = append(p.Host.UsrLinks, "home") }, wantErr: "not one of the usr-merge names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl, p := testTool(), testPolicy()
			if tc.tool != nil {
				tc.tool(&tl)
			}
			if tc.policy != nil {
				tc.policy(&p)
			}
			s, err := Spec(tl, p)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Spec() = %v, %v; want error containing %q", s != nil, err, tc.wantErr)
			}
		})
	}
}

func TestOptionsReject(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opt     Opt
		wantErr string
	}{
		{"WithArgs empty", WithArgs(), "process args: empty"},
		{"WithCwd relative", WithCwd("x"), `cwd "x": not absolute`},
		{"WithUser root", WithUser(0, 1), "never runs as uid or gid 0"},
		{"WithPidsLimit 0", WithPidsLimit(0), "pids limit 0"},
		{"WithMemoryLimit 0", WithMemoryLimit(0, false), "memory limit 0"},
		{"WithCgroupsPath empty", WithCgroupsPath(""), "cgroups path: empty"},
		{"WithClone3Allowed without seccomp", WithClone3Allowed(), "no seccomp profile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Apply(Default(), tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Apply(%s) = %v, want %q", tc.name, err, tc.wantErr)
			}
		})
	}
}

// fakeInfo is a fs.FileInfo of a directory, a file or a symlink.
type fakeInfo struct{ mode fs.FileMode }

func (f fakeInfo) Name() string       { return "x" }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return f.mode }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fakeInfo) Sys() any           { return nil }

func TestDetectHost(t *testing.T) {
	host := map[string]fs.FileMode{
		"/bin": fs.ModeSymlink, "/sbin": fs.ModeSymlink, "/lib": fs.ModeDir, // /lib not merged
		"/lib32": fs.ModeSymlink, "/libx32": fs.ModeSymlink, // multilib
		"/lib64":           fs.ModeSymlink, // a link, but not into /usr
		"/etc/ld.so.cache": 0, "/etc/ssl": fs.ModeDir, "/etc/passwd": 0,
		"/etc/localtime":   0, // stat follows the symlink to a file
		"/etc/resolv.conf": 0,
	}
	links := map[string]string{"/bin": "usr/bin", "/sbin": "/usr/sbin", "/lib32": "usr/lib32", "/libx32": "usr/libx32", "/lib64": "/opt/lib64"}
	stat := func(p string) (fs.FileInfo, error) {
		m, ok := host[p]
		if !ok {
			return nil, fs.ErrNotExist
		}
		return fakeInfo{m}, nil
	}
	readlink := func(p string) (string, error) { return links[p], nil }
	got, err := DetectHost(stat, stat, readlink)
	if err != nil {
		t.Fatal(err)
	}
	want := Host{
		UsrLinks: []string{"bin", "sbin", "lib32", "libx32"},
		RootDirs: []string{"/lib"},
		Etc: []Bind{
			{"/etc/ld.so.cache", "/etc/ld.so.cache", false},
			{"/etc/localtime", "/etc/localtime", false},
			{"/etc/passwd", "/etc/passwd", false},
			{"/etc/ssl", "/etc/ssl", true},
		},
		NetEtc: []Bind{{"/etc/resolv.conf", "/etc/resolv.conf", false}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("DetectHost (-want +got):\n%s", d)
	}
	wantBinds := append([]Bind{{"/usr", "/usr", true}, {"/lib", "/lib", true}}, want.Etc...)
	if d := cmp.Diff(wantBinds, got.Binds(false)); d != "" {
		t.Errorf("Binds(false) (-want +got):\n%s", d)
	}
	if d := cmp.Diff(append(wantBinds, want.NetEtc...), got.Binds(true)); d != "" {
		t.Errorf("Binds(true) (-want +got):\n%s", d)
	}
	boom := errors.New("boom")
	if _, err = DetectHost(stat, func(string) (fs.FileInfo, error) { return nil, boom }, readlink); !errors.Is(err, boom) {
		t.Errorf("DetectHost with a failing stat = %v, want it wrapped", err)
	}
}

// TestCheckBind is the rule every tool dir, downstream dir and read-only
// bind passes, at load and in both renderers.
func TestCheckBind(t *testing.T) {
	for _, tc := range []struct {
		path, wantErr string
	}{
		{"/srv/repo", ""},
		{"/srv/x", ""},
		{"/opt/x", ""},
		{"/home/me/project", ""},
		{"/tmp/work", ""},
		{"/usr/share/x", ""},
		{"/var/cache/toolgate/npm", ""},
		{"/", "cannot be bound"},
		{"/srv", "cannot be bound"},
		{"/opt", "cannot be bound"},
		{"/home", "cannot be bound"},
		{"/tmp", "cannot be bound"},
		{"/etc", "cannot be bound"},
		{"/etc/app", "under /etc"},
		{"/proc/1", "under /proc"},
		{"/sys/fs", "under /sys"},
		{"/dev/shm", "under /dev"},
		{"/.toolgate", "under /.toolgate"},
		{"srv/repo", "not an absolute, clean path"},
		{"/srv/../etc", "not an absolute, clean path"},
	} {
		err := CheckBind(tc.path)
		if (tc.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("CheckBind(%q) = %v, want %q", tc.path, err, tc.wantErr)
		}
	}
}

// withDefaults is testPolicy with seccomp on, for the seccomp tests.
func (Policy) withDefaults() Policy {
	p := testPolicy()
	p.Seccomp = true
	return p
}
