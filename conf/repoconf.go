package conf

import (
	"fmt"
	"path/filepath"
	"strings"
)

// repoConfigExes are the executables, by basename, that run programs a
// repository's own configuration names. The list is short on purpose:
// each entry reads configuration from the working tree it runs in, which a
// workspace's author controls, and runs what that configuration names.
//
//   - git, and git-* (git's own commands in git-core, git-lfs and other
//     extensions): .git/config can name core.fsmonitor (run by status and
//     most porcelain), core.hooksPath, diff and merge drivers, clean and
//     smudge filters, core.sshCommand, credential helpers and aliases,
//     and git runs them through /bin/sh.
//   - hg and chg (Mercurial): .hg/hgrc can name [hooks] and load
//     [extensions], which are Python run in hg's process.
//
// Not listed: svn, whose runtime configuration is per user (~/.subversion)
// and system-wide, never in the working copy; and test runners, linters and
// build tools, which run the workspace's code by design (that is what the
// test class and its sandbox are for, and most are denied outright).
var repoConfigExes = []string{"git", "git-*", "hg", "chg"}

func repoConfigMatch(base string) bool {
	for _, e := range repoConfigExes {
		if stem, ok := strings.CutSuffix(e, "*"); ok {
			if strings.HasPrefix(base, stem) && len(base) > len(stem) {
				return true
			}
		} else if base == e {
			return true
		}
	}
	return false
}

// Warning is an accepted line the operator should reconsider: it is
// shown by `toolgate check` and logged at serve start, never a refusal.
type Warning struct {
	// Line is the tools.conf line.
	Line int
	// Tool is the tool's name.
	Tool string
	// Text says what the risk is and how to remove it.
	Text string
}

// Warnings returns the warnings of a loaded Config, in line order: each
// read-class tool whose executable (by its basename as written, or as
// resolved) honours the configuration of the repository it runs in. A
// read-class tool runs directly on the host, so the workspace's
// configuration would run programs there, as toolgate's user. The read
// class stays the operator's choice (seed 000): this is a warning.
func (c *Config) Warnings() []Warning {
	var out []Warning
	for _, t := range c.Tools {
		if t.Class != ClassRead {
			continue
		}
		exe := filepath.Base(t.Exe)
		if !repoConfigMatch(exe) {
			if r := filepath.Base(t.ExeResolved); t.ExeResolved != "" && repoConfigMatch(r) {
				exe = r
			} else {
				continue
			}
		}
		fix := append([]string{"tool", t.Name, t.Exe, string(ClassTest), fmt.Sprint(int(t.Timeout.Seconds())), fmt.Sprint(t.MaxBytes), "on", t.Dir, "--"}, t.Args...)
		what := "git runs programs the repository's configuration names (core.fsmonitor, hooks, diff and filter drivers, aliases) through /bin/sh"
		if exe == "hg" || exe == "chg" {
			what = "Mercurial runs the hooks and loads the extensions the repository's .hg/hgrc names"
		}
		out = append(out, Warning{Line: t.Line, Tool: t.Name, Text: fmt.Sprintf(
			"tool %s is class read and runs %s (%s) directly on the host, in %s: %s, so whoever can write that repository's configuration can run code on the host as toolgate's user; make it class test with the sandbox on: %s",
			t.Name, t.Exe, exe, t.Dir, what, strings.Join(fix, " "))})
	}
	return out
}
