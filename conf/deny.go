package conf

import (
	"regexp"
	"sort"
	"strings"
)

// Family names a group of executables that can never be registered as a
// tool, with the reason an operator reads when a line is refused.
type Family string

// The denied families. Each entry of deniedExes belongs to exactly one.
const (
	FamilyShell       Family = "shell or interpreter"
	FamilyFilter      Family = "command-running filter or wrapper"
	FamilyPrivilege   Family = "privilege tool"
	FamilyPackaging   Family = "build/sign/publish/install lane"
	FamilyNamespace   Family = "namespace escape or container runtime"
	FamilyNetwork     Family = "network tool"
	FamilyEditor      Family = "editor"
	FamilyMutator     Family = "file mutator"
	FamilyCompiler    Family = "compiler or build tool"
	FamilyDebugger    Family = "debugger or tracer"
	FamilyPackageMgr  Family = "package manager"
	FamilyMultiplexer Family = "terminal multiplexer"
)

// deniedExes is the executable denylist, by basename. A basename is denied
// when it equals an entry, or equals an entry followed by a version suffix
// (python3.12, perl5.36, gcc-12, lua5.4, node20), or, for entries ending in
// '*', when it starts with the entry's stem (buildpkg-foo). Cross-toolchain
// names (x86_64-linux-gnu-gcc-12) are matched on the part after the triple.
//
// Security caveat: a denylist by name cannot stop a renamed copy of a denied
// program. It is one layer: the others are fixed argv, no shell, the scrubbed
// environment and, for test-class tools, the sandbox.
var deniedExes = map[Family][]string{
	FamilyShell: {
		"sh", "bash", "dash", "zsh", "ksh", "mksh", "pdksh", "lksh", "ksh93", "csh", "tcsh",
		"fish", "ash", "yash", "rc", "es", "elvish", "nu", "xonsh", "oil", "osh", "ysh", "busybox", "toybox",
		"python", "pypy", "ipython", "perl", "ruby", "irb", "jruby", "lua", "luajit",
		"php", "php-cgi", "node", "nodejs", "deno", "bun", "tclsh", "wish", "expect",
		"guile", "racket", "sbcl", "clisp", "ecl", "scheme", "chicken", "csi", "gsi", "ocaml",
		"ghci", "runghc", "runhaskell", "R", "Rscript", "julia", "java", "jshell", "groovy",
		"scala", "kotlin", "swift", "dotnet", "mono", "pwsh", "powershell", "osascript",
		"jjs", "rhino", "qjs", "gjs", "erl", "escript", "elixir", "iex", "gst", "pike",
		"octave", "matlab", "bc", "dc", "m4", "sqlite3", "psql", "mysql",
	},
	FamilyFilter: {
		"awk", "gawk", "mawk", "nawk", "sed", "gsed", "find", "xargs", "parallel",
		"env", "timeout", "nice", "nohup", "stdbuf", "setsid", "ionice", "chrt", "taskset",
		"watch", "flock", "script", "time", "run-parts", "start-stop-daemon", "daemonize",
		"at", "batch", "crontab", "systemctl", "service", "strace", "ltrace", "valgrind",
		"unbuffer", "rlwrap", "entr", "vipe",
		"git-shell", "rsh",
	},
	FamilyPrivilege: {
		"su", "sudo", "doas", "pkexec", "runuser", "setpriv", "capsh", "setcap", "chpst",
		"sg", "newgrp", "login", "sulogin", "passwd", "chpasswd", "usermod", "useradd",
		"userdel", "groupadd", "visudo", "sudoedit", "polkit-agent-helper-1", "ssh-agent",
	},
	FamilyPackaging: {
		"apk", "abuild", "buildpkg*", "bumppkg", "makepkg", "resolvepkg", "sign-apk-repo",
		"installpkg", "dpkg", "dpkg-deb", "dpkg-buildpackage", "debuild", "rpm", "rpmbuild",
		"gpg", "gpg2", "signify", "minisign", "cosign", "twine", "makeself",
	},
	FamilyPackageMgr: {
		"apt", "apt-get", "aptitude", "yum", "dnf", "zypper", "pacman", "emerge", "nix",
		"nix-shell", "nix-env", "brew", "snap", "flatpak", "pip", "pipx", "uv", "poetry",
		"conda", "mamba", "npm", "npx", "pnpm", "yarn", "corepack", "gem", "bundle",
		"bundler", "composer", "mise", "asdf",
	},
	FamilyNamespace: {
		"chroot", "nsenter", "unshare", "bwrap", "firejail", "systemd-run", "systemd-nspawn",
		"machinectl", "podman", "docker", "dockerd", "containerd", "ctr", "nerdctl", "runc",
		"crun", "runsc", "youki", "lxc", "lxc-attach", "lxc-execute", "buildah", "kubectl",
		"pivot_root", "switch_root", "ip", "newuidmap", "newgidmap", "toolgate",
	},
	FamilyNetwork: {
		"ssh", "scp", "sftp", "sshd", "socat", "curl", "wget", "nc", "ncat", "netcat", "nc.openbsd",
		"nc.traditional", "telnet", "ftp", "tftp", "rsync", "rclone", "aria2c", "lftp", "nmap",
		"openssl", "ssh-keyscan", "dig", "nslookup", "host", "ping", "tcpdump", "tshark",
		"iptables", "nft", "mosh", "websocat", "httpie", "http", "xh", "lynx", "w3m", "links",
	},
	FamilyEditor: {
		"vi", "vim", "nvim", "view", "vimdiff", "ex", "emacs", "emacsclient", "nano", "pico",
		"ed", "red", "joe", "jed", "mg", "micro", "kak", "helix", "hx", "ne", "mcedit", "code",
	},
	FamilyMutator: {
		"tee", "dd", "cp", "mv", "rm", "rmdir", "chmod", "chown", "chgrp", "chattr", "ln",
		"link", "unlink", "install", "truncate", "shred", "touch", "mkdir", "mkfifo", "mknod",
		"mktemp", "fallocate", "patch", "tar", "cpio", "unzip", "zip", "sponge", "rename",
		"split", "csplit", "mount", "umount", "losetup", "mkfs", "wipefs", "fdisk", "sfdisk",
		"parted", "setfacl", "restorecon", "chcon", "gzip", "gunzip", "bzip2", "xz", "zstd",
	},
	FamilyCompiler: {
		"cc", "c++", "gcc", "g++", "cpp", "clang", "clang++", "clang-cl", "tcc", "icc", "ld",
		"ld.bfd", "ld.gold", "ld.lld", "lld", "as", "gas", "nasm", "yasm", "make", "gmake",
		"bmake", "cmake", "ninja", "meson", "scons", "bazel", "bazelisk", "buck", "buck2",
		"gradle", "gradlew", "mvn", "ant", "sbt", "go", "gccgo", "cargo", "rustc", "rustup",
		"javac", "kotlinc", "scalac", "ghc", "cabal", "stack", "dub", "ldc2", "dmd", "gfortran",
		"zig", "nim", "crystal", "tsc", "esbuild", "swc", "autoconf", "automake",
		"libtool", "configure", "gcc-ar", "ar", "ranlib", "objcopy", "strip",
	},
	FamilyDebugger: {
		"gdb", "lldb", "rr", "perf", "bpftrace", "bpftool", "ptrace", "gdbserver", "pstack",
	},
	FamilyMultiplexer: {
		"tmux", "screen", "byobu", "dtach", "abduco", "zellij", "xterm",
	},
}

// deniedSubstrings is the state denylist: no tool may name MCP-owned build
// and package state anywhere in its exe, dir or fixed args.
var deniedSubstrings = []string{
	"queue.db", "repository.db", "notes.db", "stage4/incoming", "/out/", ".buildpkg",
}

type deniedEntry struct {
	family Family
	name   string
	prefix bool
}

var (
	// maxDeniedLen is the length of the longest denied name.
	maxDeniedLen int
	deniedByName map[string]deniedEntry
	deniedPrefix []deniedEntry
	// versionSuffix is what may follow a denied name: 3, 3.12, -12, 5.36,
	// 20, and a build flavour after the version (3.11-dbg, 3.12m).
	versionSuffix = regexp.MustCompile(`^[-._]?[0-9][0-9.]*(?:[-._][0-9][0-9.]*)*(?:[-_.]?[a-z]+)?$`)
	// crossTriple strips a cross toolchain prefix: x86_64-linux-gnu-, aarch64-linux-musl-,
	// arm-none-eabi-.
	crossTriple = regexp.MustCompile(`^[a-z0-9_]+-(?:[a-z0-9_]+-)?(?:linux|none|w64|pc|apple|unknown)-[a-z0-9_]+-(.+)$`)
)

func init() {
	deniedByName = make(map[string]deniedEntry)
	for fam, names := range deniedExes {
		for _, n := range names {
			n = strings.ToLower(n)
			if stem, ok := strings.CutSuffix(n, "*"); ok {
				deniedPrefix = append(deniedPrefix, deniedEntry{family: fam, name: stem, prefix: true})
				continue
			}
			if prev, dup := deniedByName[n]; dup {
				// One family per name keeps refusal messages deterministic.
				panic("conf: " + n + " denied twice: " + string(prev.family) + ", " + string(fam))
			}
			deniedByName[n] = deniedEntry{family: fam, name: n}
			maxDeniedLen = max(maxDeniedLen, len(n))
		}
	}
	sort.Slice(deniedPrefix, func(i, j int) bool { return deniedPrefix[i].name < deniedPrefix[j].name })
}

// DeniedExe reports whether an executable with this basename can never be a
// tool, and the family and denylist entry that deny it.
func DeniedExe(base string) (Family, string, bool) {
	b := strings.ToLower(base)
	for _, cand := range exeCandidates(b) {
		if e, ok := deniedByName[cand]; ok {
			return e.family, e.name, true
		}
		for _, e := range deniedPrefix {
			if strings.HasPrefix(cand, e.name) {
				return e.family, e.name + "*", true
			}
		}
		// Versioned names: the longest denied name that is a prefix, followed
		// by a version suffix (python3.12, gcc-12, node20, lua5.4). Only
		// prefixes as long as a denied name can match: linear in the input.
		for i := min(len(cand)-1, maxDeniedLen); i > 0; i-- {
			if !versionSuffix.MatchString(cand[i:]) {
				continue
			}
			if e, ok := deniedByName[cand[:i]]; ok {
				return e.family, e.name, true
			}
		}
	}
	return "", "", false
}

// exeCandidates lists the names a basename is checked under: itself, and
// the tool name of a cross toolchain (x86_64-linux-gnu-gcc-12 → gcc-12).
func exeCandidates(b string) []string {
	c := []string{b}
	if m := crossTriple.FindStringSubmatch(b); m != nil {
		c = append(c, m[1])
	}
	return c
}

// DeniedSubstring returns the state substring s contains, if any.
func DeniedSubstring(s string) (string, bool) {
	for _, d := range deniedSubstrings {
		if strings.Contains(s, d) {
			return d, true
		}
	}
	return "", false
}

// DeniedFamilies returns every denied basename grouped by family, for
// documentation and tests.
func DeniedFamilies() map[Family][]string {
	out := make(map[Family][]string, len(deniedExes))
	for f, names := range deniedExes {
		out[f] = append([]string(nil), names...)
	}
	return out
}
