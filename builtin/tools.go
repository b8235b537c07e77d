package builtin

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	rt "github.com/toolgate/toolgate/runtime"
)

// KnownGroups lists the capability groups `serve --caps` selects from, in
// the order of the default value. GroupStatus is not among them: it is
// always on.
//
//   - repo: repo_manifest, repo_chunks
//   - git: git_diff_input (when git is found)
//   - report: existing_report, render_audit_report, render_review_report
//   - helpers: sloc (when tokei is found), outline (when Universal Ctags is)
func KnownGroups() []Group { return []Group{GroupRepo, GroupGit, GroupReport, GroupHelpers} }

// ParseCaps parses the value of --caps: a comma-separated list of known
// groups, each at most once.
func ParseCaps(s string) ([]Group, error) {
	known := make([]string, 0, 4)
	for _, g := range KnownGroups() {
		known = append(known, string(g))
	}
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("caps %q: empty: want a comma-separated list of %s", s, strings.Join(known, ", "))
	}
	var out []Group
	for f := range strings.SplitSeq(s, ",") {
		g := Group(strings.TrimSpace(f))
		if !slices.Contains(KnownGroups(), g) {
			return nil, fmt.Errorf("caps %q: unknown group %q: want %s", s, string(g), strings.Join(known, ", "))
		}
		if slices.Contains(out, g) {
			return nil, fmt.Errorf("caps %q: group %q given twice", s, string(g))
		}
		out = append(out, g)
	}
	return out, nil
}

// Config configures the workspace built-ins.
type Config struct {
	// Root is the workspace root (serve --root); it must be a directory.
	Root string
	// Caps are the enabled capability groups; nil means all of them.
	Caps []Group
	// LockedDown leaves only the read-only built-ins: no renderers.
	LockedDown bool
	// Git, Tokei and Ctags, when set, are absolute paths that override the
	// PATH search for that helper. A helper given this way must work:
	// otherwise Tools fails.
	Git, Tokei, Ctags string
	// SearchPath is the PATH searched for helpers not overridden;
	// relative entries are skipped. Empty means the tools' fixed PATH
	// (runtime.DefaultPath).
	SearchPath string
	// Sandbox runs the helpers. git, tokei and ctags read workspace
	// content, and a repository's configuration is code (.git/config can
	// name programs git runs): they run only sandboxed, under the same
	// policy as a test-class tool, never on the host. Nil means no sandbox
	// backend: the tools that need a helper are not served.
	Sandbox rt.Runner
	// SandboxCheck, when set, says whether a helper (canonical path) can
	// run sandboxed over the workspace root: the rule a test-class tool's
	// exe and dir must pass. A helper that fails it is unavailable.
	SandboxCheck func(dir, exe string) error
	// Version is toolgate's version, written into SARIF reports.
	Version string
}

// env is what the tool handlers share.
type env struct {
	ws      *Workspace
	helpers map[string]Helper
	version string
	sandbox rt.Runner
	runs    atomic.Uint64
}

// catalogue is every workspace built-in, in tools/list order (after
// checkpoint_status, which the server adds first): its name, how it is
// made, and the helper it cannot run without ("" for none). Names, Tools
// and the helpers' Enables are all read from it.
var catalogue = []struct {
	name   string
	make   func(*env) Tool
	helper string
}{
	{"repo_manifest", repoManifestTool, ""},
	{"repo_chunks", repoChunksTool, ""},
	{"git_diff_input", gitDiffTool, HelperGit},
	{"existing_report", existingReportTool, ""},
	{"sloc", slocTool, HelperTokei},
	{"outline", outlineTool, HelperCtags},
	{"render_audit_report", renderAuditTool, ""},
	{"render_review_report", renderReviewTool, ""},
}

// Tools resolves the workspace root and the helpers and returns the
// workspace built-ins the configuration enables, in the fixed order of
// Names: repo_manifest, repo_chunks, git_diff_input, existing_report,
// sloc, outline, render_audit_report, render_review_report. A tool whose
// group is off, whose helper is missing, or that writes when LockedDown is
// set, is left out. It also returns every helper's state, for doctor.
func Tools(cfg Config) ([]Tool, []Helper, error) {
	ws, err := NewWorkspace(cfg.Root)
	if err != nil {
		return nil, nil, err
	}
	caps := cfg.Caps
	if caps == nil {
		caps = KnownGroups()
	}
	for _, g := range caps {
		if !slices.Contains(KnownGroups(), g) {
			return nil, nil, fmt.Errorf("unknown capability group %q", string(g))
		}
	}
	helpers, err := ResolveHelpers(cfg)
	if err != nil {
		return nil, nil, err
	}
	e := &env{ws: ws, helpers: map[string]Helper{}, version: cfg.Version, sandbox: cfg.Sandbox}
	for _, h := range helpers {
		e.helpers[h.Name] = h
	}
	var tools []Tool
	for _, c := range catalogue {
		t := c.make(e)
		if !slices.Contains(caps, t.Group) || (cfg.LockedDown && t.Writes) {
			continue
		}
		if c.helper != "" {
			if !e.helpers[c.helper].Available() {
				continue
			}
			t.Sandboxed = true
		}
		tools = append(tools, t)
	}
	return tools, helpers, nil
}

// enables lists the tools a helper makes available, in tools/list order.
func enables(helper string) []string {
	var out []string
	for _, c := range catalogue {
		if c.helper == helper {
			out = append(out, c.name)
		}
	}
	return out
}
