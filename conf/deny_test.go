package conf

import (
	"strings"
	"testing"
)

// TestDenylistEveryEntry checks each entry of the table: the name itself,
// a versioned form and an upper-case form are denied, under the entry's
// family.
func TestDenylistEveryEntry(t *testing.T) {
	for fam, names := range DeniedFamilies() {
		for _, name := range names {
			t.Run(string(fam)+"/"+name, func(t *testing.T) {
				base := strings.TrimSuffix(name, "*")
				forms := []string{base, base + "-12", base + "3.11", strings.ToUpper(base)}
				if strings.HasSuffix(name, "*") {
					forms = append(forms, base+"-extra")
				}
				for _, form := range forms {
					gotFam, entry, denied := DeniedExe(form)
					if !denied {
						t.Errorf("DeniedExe(%q) = not denied, want denied", form)
						continue
					}
					if entry != strings.ToLower(name) {
						// A form may hit a longer entry first (e.g. "php-cgi").
						if _, _, ok := DeniedExe(entry); !ok {
							t.Errorf("DeniedExe(%q) entry = %q, not itself denied", form, entry)
						}
						continue
					}
					if gotFam != fam {
						t.Errorf("DeniedExe(%q) family = %q, want %q", form, gotFam, fam)
					}
				}
			})
		}
	}
}

// TestDenylistIssueNames are the names the seed and the foundation issue
// list explicitly, including versioned and cross-toolchain forms.
func TestDenylistIssueNames(t *testing.T) {
	for _, name := range []string{
		// seed 000
		"sh", "bash", "python", "python3", "perl", "ruby", "lua", "php", "node", "deno",
		"awk", "find", "xargs", "parallel", "env", "su", "sudo", "doas",
		"apk", "buildpkg", "buildpkg-index", "bumppkg", "makepkg", "resolvepkg", "sign-apk-repo", "installpkg",
		"chroot", "nsenter", "unshare", "bwrap", "ssh", "scp", "curl", "wget", "nc", "socat",
		"vi", "emacs", "tee", "dd", "cp", "mv", "rm", "chmod", "chown",
		"cc", "gcc", "make", "cmake", "go", "cargo",
		// the issue's completions
		"dash", "zsh", "ksh", "fish", "busybox", "gawk", "mawk", "sed", "timeout", "nice", "nohup",
		"stdbuf", "setsid", "strace", "gdb", "pkexec", "runuser", "setpriv", "capsh", "firejail",
		"systemd-run", "systemd-nspawn", "podman", "docker", "runc", "crun", "runsc", "rsync", "sftp",
		"telnet", "ncat", "nano", "ed", "ln", "install", "truncate", "shred", "touch", "mkdir",
		"clang", "g++", "ld", "ninja", "meson", "rustc", "javac",
		// versioned
		"python3.12", "perl5.36", "gcc-12", "clang-14", "lua5.4", "ruby3.1", "php8.2", "tclsh8.6", "node20",
		"pypy3", "python3.11-dbg", "g++-12", "clang++-14", "ld.gold",
		// cross toolchains
		"x86_64-linux-gnu-gcc-12", "aarch64-linux-gnu-ld", "arm-none-eabi-gcc", "x86_64-w64-mingw32-g++",
		// toolgate itself: its shim modes must not be reachable from a conf
		"toolgate",
	} {
		if _, _, denied := DeniedExe(name); !denied {
			t.Errorf("DeniedExe(%q) = not denied, want denied", name)
		}
	}
}

// TestDenylistAllows: the tools the product exists for, and names that only
// look like denied ones, are not denied.
func TestDenylistAllows(t *testing.T) {
	for _, name := range []string{
		"git", "codex", "opencode", "eslint", "ruff", "pytest", "golangci-lint", "shellcheck",
		"cat", "ls", "grep", "rg", "diff", "wc", "head", "jq", "gofmt", "tokei", "ctags",
		"shfmt", "bashate", "perlcritic", "nodeunit", "gccgo-doc", "makeself-check", "gitk",
		"ssh-keygen", "cargo-deny", "go-licenses", "lint", "true", "echo", "sort", "uniq",
	} {
		if fam, entry, denied := DeniedExe(name); denied {
			t.Errorf("DeniedExe(%q) = denied (%s, %q), want allowed", name, fam, entry)
		}
	}
}

func TestDeniedSubstring(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"/var/lib/queue.db", "queue.db"},
		{"repository.db-wal", "repository.db"},
		{"--notes=notes.db", "notes.db"},
		{"/srv/stage4/incoming/x", "stage4/incoming"},
		{"/build/out/pkg", "/out/"},
		{"/src/.buildpkg", ".buildpkg"},
		{"/srv/output/x", ""},
		{"/srv/out", ""},
		{"queue", ""},
	} {
		got, bad := DeniedSubstring(tc.in)
		if got != tc.want || bad != (tc.want != "") {
			t.Errorf("DeniedSubstring(%q) = %q, %v; want %q", tc.in, got, bad, tc.want)
		}
	}
}
