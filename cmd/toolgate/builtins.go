package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/builtin"
	rt "github.com/toolgate/toolgate/runtime"
)

// builtinFlags select and configure the workspace built-ins.
type builtinFlags struct {
	caps              string
	lockedDown        bool
	git, tokei, ctags string
	// ids are the host ids the sandbox runs helpers as (sandboxFlags.ids).
	ids func() rt.IDRange
}

func (f *builtinFlags) register(fs *flag.FlagSet) {
	var groups []string
	for _, g := range builtin.KnownGroups() {
		groups = append(groups, string(g))
	}
	all := strings.Join(groups, ",")
	fs.StringVar(&f.caps, "caps", all, "built-in capability groups to serve, comma-separated: "+all+" (checkpoint_status is always on)")
	fs.BoolVar(&f.lockedDown, "locked-down", false, "serve only the read-only built-ins: no report renderers")
	fs.StringVar(&f.git, "git", "", "absolute path of git for git_diff_input (default: searched on PATH)")
	fs.StringVar(&f.tokei, "tokei", "", "absolute path of tokei for sloc (default: searched on PATH)")
	fs.StringVar(&f.ctags, "ctags", "", "absolute path of Universal Ctags for outline (default: searched on PATH)")
}

// config turns the flags into a builtin.Config for the workspace root,
// whose helpers run in sandbox (nil: there is none, and the tools that need
// a helper are not served).
func (f *builtinFlags) config(root string, sandbox rt.Runner) (builtin.Config, error) {
	caps, err := builtin.ParseCaps(f.caps)
	if err != nil {
		return builtin.Config{}, fmt.Errorf("--caps: %w", err)
	}
	ids := f.ids()
	return builtin.Config{
		Root: root, Caps: caps, LockedDown: f.lockedDown,
		Git: f.git, Tokei: f.tokei, Ctags: f.ctags,
		SearchPath: os.Getenv("PATH"), Version: version,
		Sandbox: sandbox,
		SandboxCheck: func(dir, exe string) error {
			return rt.CheckSandboxTool(dir, exe, ids)
		},
	}, nil
}

// tools builds the workspace built-ins and logs each helper's state, and
// returns the helper runs a sandbox can be prepared for
// (builtin.PoolTemplates). A helper given by flag that does not work, a
// bad --caps or a bad --root is an error: the server does not start.
func (f *builtinFlags) tools(root string, sandbox rt.Runner, log *logrus.Logger) ([]builtin.Tool, []rt.Template, error) {
	cfg, err := f.config(root, sandbox)
	if err != nil {
		return nil, nil, err
	}
	tools, helpers, err := builtin.Tools(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("built-in tools: %w", err)
	}
	for _, h := range helpers {
		e := log.WithFields(logrus.Fields{"helper": h.Name, "source": h.Source})
		if h.Available() {
			e.WithFields(logrus.Fields{"path": h.Path, "version": h.Version, "enables": strings.Join(h.Enables, ",")}).Info("helper found")
		} else {
			e.WithField("reason", h.Reason().Error()).Info("helper unavailable: " + strings.Join(h.Enables, ", ") + " not served")
		}
	}
	return tools, builtin.PoolTemplates(cfg.Root, tools, helpers), nil
}

// writeHelpers is doctor's helpers section: each helper, its path and
// version, the tools it enables, and the fix when it is missing.
func writeHelpers(w io.Writer, f *builtinFlags, root string, sandbox rt.Runner) bool {
	cfg, err := f.config(root, sandbox)
	if err != nil {
		fmt.Fprintf(w, "[FAIL] built-ins: %v\n", err)
		return false
	}
	helpers, err := builtin.ResolveHelpers(cfg)
	ok := err == nil
	for _, h := range helpers {
		tools := strings.Join(h.Enables, ", ")
		if h.Available() {
			fmt.Fprintf(w, "[ok]   helper %s: %s (%s, from %s); enables %s\n", h.Name, h.Path, h.Version, h.Source, tools)
			continue
		}
		mark := "[--]  "
		if h.Source == "flag" {
			mark = "[FAIL]"
		}
		fmt.Fprintf(w, "%s helper %s: %v; %s not served\n", mark, h.Name, h.Reason(), tools)
		if h.Err != nil {
			fmt.Fprintf(w, "         fix: %s, or pass %s /absolute/path\n", h.Fix, h.Flag)
		} else {
			fmt.Fprintf(w, "         fix: make the sandbox backend work here (above), and serve a --root the sandbox uid can reach\n")
		}
	}
	return ok
}
