package server

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/policy"
)

// AllTools in a scope mapping stands for every tool served.
const AllTools = policy.AllTools

// ToolScopes maps each scope to the tools it opens (serve --tool-scope
// SCOPE=TOOL,...). Empty, every principal lists and calls every tool.
// Otherwise a principal lists and calls exactly the tools of the scopes it
// holds: a tool no scope names is served to no HTTP principal (fail
// closed), and serve says so at start. NewHTTP compiles it to the policy
// engine (policy.FromScopes), which decides.
type ToolScopes map[string][]string

// ParseToolScope parses one --tool-scope value, SCOPE=TOOL[,TOOL...].
func ParseToolScope(v string) (string, []string, error) {
	scope, list, ok := strings.Cut(v, "=")
	if !ok || scope == "" || list == "" {
		return "", nil, fmt.Errorf("--tool-scope %q: want SCOPE=TOOL[,TOOL...] (TOOL * for every tool)", v)
	}
	if !conf.ValidScope(scope) {
		return "", nil, fmt.Errorf("--tool-scope %q: %q is not an RFC 6749 scope token", v, scope)
	}
	var tools []string
	for t := range strings.SplitSeq(list, ",") {
		if t == "" {
			return "", nil, fmt.Errorf("--tool-scope %q: empty tool name", v)
		}
		tools = append(tools, t)
	}
	return scope, tools, nil
}

// Add records scope's tools.
func (m ToolScopes) Add(scope string, tools []string) {
	for _, t := range tools {
		if !slices.Contains(m[scope], t) {
			m[scope] = append(m[scope], t)
		}
	}
}

// ScopesFor returns the scopes that open tool, sorted.
func (m ToolScopes) ScopesFor(tool string) []string {
	var out []string
	for s, tools := range m {
		if slices.Contains(tools, tool) || slices.Contains(tools, AllTools) {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// Scopes returns every scope named, sorted.
func (m ToolScopes) Scopes() []string {
	out := make([]string, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Unknown returns the tool names of the mapping that are not served.
func (m ToolScopes) Unknown(served []string) []string {
	var out []string
	for _, tools := range m {
		for _, t := range tools {
			if t != AllTools && !slices.Contains(served, t) && !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Unmapped returns the served tools that no scope opens.
func (m ToolScopes) Unmapped(served []string) []string {
	if len(m) == 0 {
		return nil
	}
	var out []string
	for _, t := range served {
		if len(m.ScopesFor(t)) == 0 {
			out = append(out, t)
		}
	}
	return out
}
