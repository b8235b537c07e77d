package registry

// Normalising one validated registry entry into a ToolServer: the defaults
// filled in, the command resolved, the read-only binds of a sandboxed
// server's arguments.

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/egress/allowlist"
)

// normaliseEntry fills the defaults and resolves the command of a valid
// entry into e.server. Resolution failures are refusals.
func normaliseEntry(e *entry, opts Options) []error {
	r := e.raw
	t, _ := e.transport()
	s := ToolServer{
		ID:                        e.id,
		Transport:                 t,
		EnabledTools:              append([]string(nil), (*r.EnabledTools)...),
		DefaultApproval:           ApprovalMode(*r.DefaultToolsApprovalMode),
		StartupTimeout:            DefaultStartupTimeoutSec * time.Second,
		ToolTimeout:               DefaultToolTimeoutSec * time.Second,
		SupportsParallelToolCalls: deref(r.SupportsParallelToolCalls, false),
		Pinned:                    deref(r.Pinned, false),
		Fragment:                  e.frag.path,
		Line:                      e.frag.line(e.path()),
	}
	if r.StartupTimeoutSec != nil {
		s.StartupTimeout = time.Duration(*r.StartupTimeoutSec) * time.Second
	}
	if r.ToolTimeoutSec != nil {
		s.ToolTimeout = time.Duration(*r.ToolTimeoutSec) * time.Second
	}
	if len(r.Tools) > 0 {
		s.ToolApproval = make(map[string]ApprovalMode, len(r.Tools))
		for name, o := range r.Tools {
			s.ToolApproval[name] = ApprovalMode(*o.ApprovalMode)
		}
	}
	switch t {
	case TransportStdio:
		s.CommandAsWritten = *r.Command
		cmd, resolved, err := resolveCommand(*r.Command, opts.searchPath())
		if err != nil {
			return []error{e.errf([]string{"command"}, err)}
		}
		s.Command, s.CommandResolved = cmd, resolved
		s.Args = append([]string{}, deref(r.Args, nil)...)
		s.Cwd = deref(r.Cwd, "")
		s.Env = cloneMap(r.Env)
		s.EnvVars = append([]string(nil), deref(r.EnvVars, nil)...)
		s.Sandbox = deref(r.Sandbox, true)
		s.Network = s.Sandbox && deref(r.Network, false)
		if s.Sandbox {
			ro, err := readOnlyBinds(s.Args)
			if err != nil {
				return []error{e.errf([]string{"args"}, err)}
			}
			s.ReadOnly = ro
		}
		if r.AllowedHosts != nil {
			s.AllowedHosts, _ = allowlist.ParseList(*r.AllowedHosts) // checked by checkAllowedHosts
		}
		creds, errs := entryCredentials(e, s, opts)
		if len(errs) > 0 {
			return errs
		}
		s.Credentials = creds
	case TransportStreamableHTTP:
		s.URL = *r.URL
		s.BearerTokenEnvVar = deref(r.BearerTokenEnvVar, "")
		s.Headers = cloneMap(r.HTTPHeaders)
		s.EnvHeaders = cloneMap(r.EnvHTTPHeaders)
	}
	e.server = s
	return nil
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	maps.Copy(out, m)
	return out
}

// resolveCommand turns a command as written into the absolute path to
// execve and its symlink-resolved target. A bare name is looked up in dirs
// (absolute, in order); an absolute path is taken as written. Either way the
// file must exist and be a regular executable file, and neither path may
// name MCP-owned state.
func resolveCommand(cmd string, dirs []string) (string, string, error) {
	if filepath.IsAbs(cmd) {
		resolved, err := checkExecutable(cmd)
		if err != nil {
			return "", "", err
		}
		return cmd, resolved, nil
	}
	var tried []string
	for _, d := range dirs {
		p := filepath.Join(d, cmd)
		resolved, err := checkExecutable(p)
		if err == nil {
			return p, resolved, nil
		}
		if errors.Is(err, conf.ErrDenied) {
			return "", "", err
		}
		tried = append(tried, d)
	}
	return "", "", fmt.Errorf("%s not found as an executable file in %s (the fixed search path; toolgate's own $PATH is not used): install it or write its absolute path", quoteValue(cmd), strings.Join(tried, ":"))
}

// checkExecutable checks that p resolves to a regular executable file
// outside the state denylist, and returns the resolved path.
func checkExecutable(p string) (string, error) {
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", quoteValue(p), conf.UnwrapPathErr(err))
	}
	if d, bad := conf.DeniedSubstring(resolved); bad {
		return "", fmt.Errorf("%s resolves to %s, which contains %q: %w", quoteValue(p), quoteValue(resolved), d, conf.ErrDenied)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return "", fmt.Errorf("%s: %w", quoteValue(p), conf.UnwrapPathErr(err))
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file (mode %s)", quoteValue(p), fi.Mode().Type())
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s is not executable (mode %04o)", quoteValue(p), fi.Mode().Perm())
	}
	return resolved, nil
}

// readOnlyBinds resolves the arguments of a sandboxed server that are
// absolute paths of things that exist: what its sandbox binds read-only
// (an absolute argument that names nothing is an ordinary argument). Each
// must pass the sandbox policy's bind rule, or the server could never
// start.
func readOnlyBinds(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		if !filepath.IsAbs(a) {
			continue
		}
		p, err := filepath.EvalSymlinks(a)
		if err != nil {
			continue
		}
		if err := bundle.CheckBind(p); err != nil {
			return nil, fmt.Errorf("argument %q resolves to %s, which a sandbox would bind read-only: %w", a, p, err)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}
