package bundle

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
)

// The sandbox policy: every fact of the sandbox a call runs in, whatever
// the backend, defined once here. Two renderers turn one Policy into what a
// backend runs: Spec (this package) into an OCI runtime spec for runc, crun
// and runsc, and runtime/bwrap's Args into bubblewrap's argv. A parity test
// (runtime/oci/parity_test.go) renders both from the same inputs and
// compares what they mean; the few differences that remain are listed
// there, each with its reason. The load-time checks of tools.conf and of
// the tool-MCP registry call the rule functions below (CheckToolDir,
// CheckExe, CheckBind), so a line is accepted exactly when every backend
// can run it.
//
// What every sandbox is (SANDBOX.md records why each measure is needed):
//
//   - namespaces: pid, network (loopback only), ipc, uts (Hostname), mount,
//     cgroup; bwrap adds a user namespace mapping SandboxUID (an OCI
//     runtime, run as root, sets the uid instead);
//   - no capabilities, no_new_privs, the seccomp profile of DefaultSeccomp,
//     the rlimits of Policy.Rlimits, the cgroup limits of Policy.Pids and
//     Policy.Memory;
//   - a read-only root holding nothing of the host but /usr, the usr-merge
//     names (symlinks into /usr, or the unmerged directories bound
//     read-only) and the EtcAllowList entries that exist; the tool dir bound
//     read-only at its own path and the working directory; the exe bound
//     read-only when nothing else shows it; the shim at ShimPath;
//   - /proc of the sandbox's own pid namespace, a /dev with the usual nodes,
//     read-only, and two writable places: /tmp and /dev/shm, private
//     tmpfs of Policy.TmpSize each;
//   - exactly the Env variables.
const (
	// Hostname is the hostname inside every sandbox.
	Hostname = "sandbox"
	// ShimPath is where the shim binary is bound read-only inside every
	// sandbox; the sandbox's first process is its init mode.
	ShimPath = "/.toolgate/shim"
	// SandboxUID and SandboxGID are the ids every sandbox runs as (nobody:
	// nogroup): inside the sandbox always, and on the host when toolgate
	// is root.
	SandboxUID = 65534
	SandboxGID = 65534
	// DefaultPath is the fixed PATH of every tool.
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Env is the exact environment of every tool: nothing else is passed.
var Env = []string{
	"PATH=" + DefaultPath,
	"PAGER=cat",
	"GIT_PAGER=cat",
	"GIT_CONFIG_NOSYSTEM=1",
}

// A sandbox with an egress allowlist keeps its network namespace of lo
// alone; its one way out is toolgate's egress proxy, whose socket's
// directory is bound read-only at EgressDir. The init (or service) shim
// listens on 127.0.0.1:EgressPort inside, bridges each connection onto
// the socket, and adds ProxyEnv to the tool's environment: the one
// addition to Env, present only for a tool with an allowlist.
const (
	EgressDir    = "/.toolgate/egress"
	EgressSocket = "proxy.sock"
	EgressPort   = 3128
	// EgressSocketPath is the socket's path inside the sandbox.
	EgressSocketPath = EgressDir + "/" + EgressSocket
)

// A call with a credential trusts the server CA that its proxy terminates
// the credentialed destinations' TLS with: its egress directory holds
// TrustCA (the CA's certificate) and TrustBundle (the host's roots and
// the CA), TrustBundle is bound over SystemTrust where the host has it
// (OpenSSL, GnuTLS, curl, git, Go read it), and TrustEnv points the tools
// that read a variable at them (Node, Python requests, rustls).
const (
	TrustBundle = "ca-bundle.crt"
	TrustCA     = "toolgate-ca.pem"
	SystemTrust = "/etc/ssl/certs/ca-certificates.crt"
)

// TrustEnv are the variables a call with a credential gets besides its
// own (names tools.conf's env lines may not set).
var TrustEnv = []string{
	"SSL_CERT_FILE=" + EgressDir + "/" + TrustBundle,
	"REQUESTS_CA_BUNDLE=" + EgressDir + "/" + TrustBundle,
	"CURL_CA_BUNDLE=" + EgressDir + "/" + TrustBundle,
	"NODE_EXTRA_CA_CERTS=" + EgressDir + "/" + TrustCA,
}

// ProxyEnv are the proxy variables of a tool with an egress allowlist, in
// both spellings that tools read: the one addition to Env, present only
// for such a tool. NO_PROXY keeps loopback inside the sandbox: a test
// suite's own server on localhost is the sandbox's (the proxy would refuse
// the host's loopback anyway unless it is listed). A downstream server's
// entry may set its own NO_PROXY (NoProxyVars); nothing else here.
var ProxyEnv = []string{
	"HTTP_PROXY=http://127.0.0.1:3128",
	"HTTPS_PROXY=http://127.0.0.1:3128",
	"NO_PROXY=localhost,127.0.0.1,::1",
	"http_proxy=http://127.0.0.1:3128",
	"https_proxy=http://127.0.0.1:3128",
	"no_proxy=localhost,127.0.0.1,::1",
}

// NoProxyVars are the names of ProxyEnv's NO_PROXY entries.
var NoProxyVars = []string{"NO_PROXY", "no_proxy"}

// EtcAllowList is every /etc entry a sandbox may see, when it exists on
// the host: what the dynamic loader, name-service lookups, time zones and
// TLS need. Never all of /etc: /etc/shadow, keys and service credentials
// stay outside.
var EtcAllowList = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/localtime", "/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/hosts",
	"/etc/ssl", "/etc/ca-certificates",
}

// NetEtcAllowList are the /etc entries name resolution needs, bound only
// into a sandbox that keeps the host's network (a registry entry with
// network = true).
var NetEtcAllowList = []string{"/etc/resolv.conf", "/etc/host.conf", "/etc/gai.conf"}

// UsrMergeNames are the top-level names a usr-merged host links into /usr
// (lib32 and libx32 on multilib hosts).
var UsrMergeNames = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// Bind is one read-only bind of a host path at the same or another path.
type Bind struct {
	Source string `json:"source"`
	Dest   string `json:"dest"`
	// Dir is true for a directory (bound recursively read-only), false
	// for a file.
	Dir bool `json:"dir"`
}

// Host is what this host has of what a sandbox shows, found once at
// start-up by DetectHost.
type Host struct {
	// UsrLinks are the UsrMergeNames that are symlinks into /usr here:
	// each sandbox has them as the same symlinks.
	UsrLinks []string `json:"usrLinks,omitempty"`
	// RootDirs are the UsrMergeNames that are real directories here (a
	// host that is not usr-merged): bound read-only.
	RootDirs []string `json:"rootDirs,omitempty"`
	// Etc are the entries of EtcAllowList that exist here.
	Etc []Bind `json:"etc"`
	// NetEtc are the entries of NetEtcAllowList that exist here.
	NetEtc []Bind `json:"netEtc,omitempty"`
}

// DetectHost reads the host's / and /etc: lstat and stat are os.Lstat and
// os.Stat, readlink os.Readlink (tests pass fakes). A missing entry is left
// out; any other error is returned.
func DetectHost(lstat, stat func(string) (fs.FileInfo, error), readlink func(string) (string, error)) (Host, error) {
	var h Host
	for _, n := range UsrMergeNames {
		p := "/" + n
		fi, err := lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return Host{}, fmt.Errorf("host %s: %w", p, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			if t, err := readlink(p); err == nil && filepath.Clean(strings.TrimPrefix(t, "/")) == "usr/"+n {
				h.UsrLinks = append(h.UsrLinks, n)
			}
		case fi.IsDir():
			h.RootDirs = append(h.RootDirs, p)
		}
	}
	var err error
	if h.Etc, err = present(EtcAllowList, stat); err != nil {
		return Host{}, err
	}
	if h.NetEtc, err = present(NetEtcAllowList, stat); err != nil {
		return Host{}, err
	}
	return h, nil
}

// present returns the binds of the entries of list that exist.
func present(list []string, stat func(string) (fs.FileInfo, error)) ([]Bind, error) {
	var out []Bind
	for _, p := range list {
		fi, err := stat(p) // follows /etc/localtime → /usr/share/zoneinfo/...
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", p, err)
		}
		out = append(out, Bind{Source: p, Dest: p, Dir: fi.IsDir()})
	}
	return out, nil
}

// Binds are the read-only binds of the host every sandbox gets: /usr, the
// unmerged root directories and the /etc allow-list; with network, the
// name-resolution files too.
func (h Host) Binds(network bool) []Bind {
	binds := []Bind{{Source: "/usr", Dest: "/usr", Dir: true}}
	for _, d := range h.RootDirs {
		binds = append(binds, Bind{Source: d, Dest: d, Dir: true})
	}
	binds = append(binds, h.Etc...)
	if network {
		binds = append(binds, h.NetEtc...)
	}
	return binds
}

// Visible reports whether p lies in a tree every sandbox binds from the
// host (/usr, an unmerged root directory), so needs no bind of its own.
func (h Host) Visible(p string) bool {
	if Within(p, "/usr") {
		return true
	}
	for _, d := range h.RootDirs {
		if Within(p, d) {
			return true
		}
	}
	return false
}

// Within reports whether p is dir or below it, on path boundaries (/etc
// does not contain /etcd). Both are clean absolute paths.
func Within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// privateDirs may never be bound into a sandbox: each would hand it the
// host's private state (all of /etc, /run, /var, the home directories),
// every project below a shared root (/srv, /opt, /mnt), or hide what the
// sandbox mounts itself (/tmp, /usr).
var privateDirs = []string{"/", "/etc", "/run", "/var", "/home", "/root", "/boot", "/tmp", "/usr", "/mnt", "/media", "/srv", "/opt"}

// sandboxTrees are where nothing of the host may be bound at any depth:
// the kernel's interfaces (/proc, /sys, /dev), which the sandbox mounts
// itself, and /etc, whose allow-list entries the sandbox binds one by one
// (a tool dir there could hold host configuration, and under an OCI
// runtime could not be bound at all).
var sandboxTrees = []string{"/proc", "/sys", "/dev", "/etc", "/.toolgate"}

// CheckBind checks that the host path p (canonical: absolute, clean,
// symlinks resolved) may be bound read-only into a sandbox: a tool dir, a
// downstream server's dir or one of its read-only paths.
func CheckBind(p string) error {
	if !cleanAbs(p) {
		return fmt.Errorf("%q is not an absolute, clean path", p)
	}
	for _, f := range privateDirs {
		if p == f {
			return fmt.Errorf("%q cannot be bound into a sandbox: it would expose the host's %s (use a directory below it)", p, f)
		}
	}
	for _, f := range sandboxTrees {
		if Within(p, f) {
			return fmt.Errorf("%q is under %s, which is never bound into a sandbox (the sandbox has its own)", p, f)
		}
	}
	return nil
}

// CheckToolDir checks a tool's dir (canonical): the rule of CheckBind.
func CheckToolDir(dir string) error {
	if err := CheckBind(dir); err != nil {
		return fmt.Errorf("dir %w", err)
	}
	return nil
}

// CheckExe checks a tool's executable (canonical): it may lie anywhere the
// sandbox can bind it from but the trees the sandbox mounts itself.
func CheckExe(exe string) error {
	if !cleanAbs(exe) {
		return fmt.Errorf("exe %q: not an absolute, clean path", exe)
	}
	for _, f := range []string{"/proc", "/sys", "/dev", "/.toolgate"} {
		if Within(exe, f) {
			return fmt.Errorf("exe %q: under %s, which the sandbox mounts itself", exe, f)
		}
	}
	return nil
}

// cleanAbs reports whether p is absolute and already clean (no "..", no
// "//", no trailing slash): binds are made at exactly the path given.
func cleanAbs(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == p && !strings.ContainsRune(p, 0)
}
