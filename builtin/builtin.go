// Package builtin holds toolgate's deterministic built-in tools: the
// workspace tools of seed 001 and checkpoint_status. A built-in is described
// by a Tool value; the server package turns it into an MCP tool, so this
// package does not depend on the MCP library.
package builtin

import (
	"context"
	"encoding/json"
	"fmt"
)

// Group is a capability group of built-ins, switched by `serve --caps`.
type Group string

// The capability groups. GroupStatus (checkpoint_*) is always on.
const (
	GroupStatus  Group = "status"
	GroupRepo    Group = "repo"
	GroupGit     Group = "git"
	GroupReport  Group = "report"
	GroupHelpers Group = "helpers"
)

// Tool is one built-in tool.
type Tool struct {
	// Name is the MCP tool name.
	Name string
	// Group is the capability group that switches it.
	Group Group
	// Description is what tools/list shows.
	Description string
	// InputSchema and OutputSchema are JSON Schema objects.
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	// Writes marks the renderers: the only built-ins that write, and the
	// only ones --locked-down removes.
	Writes bool
	// Sandboxed marks the tools whose helper (git, tokei, ctags) runs in
	// the sandbox backend.
	Sandboxed bool
	// Handler runs the tool. A tool failure (bad path, failed helper) is a
	// Result with IsError; the error return is for infrastructure failures.
	Handler func(ctx context.Context, args json.RawMessage) (Result, error)
}

// Result is a built-in's answer: text content and structured content.
type Result struct {
	Text       string
	Structured any
	IsError    bool
}

// Names lists every built-in toolgate can serve, in tools/list order,
// whether or not a helper makes it available on this host. tools.conf may
// not reuse these names and may name them in expose.
func Names() []string {
	names := []string{"checkpoint_status"}
	for _, c := range catalogue {
		names = append(names, c.name)
	}
	return names
}

// Errorf returns a tool-failure Result.
func Errorf(format string, a ...any) Result {
	return Result{Text: fmt.Sprintf(format, a...), IsError: true}
}
