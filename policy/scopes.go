package policy

import (
	"slices"
	"sort"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/ast"
	"github.com/cedar-policy/cedar-go/types"
)

// scopePrefix starts the id of every policy FromScopes compiles; a
// policy file may not use it.
const scopePrefix = "tool-scope "

// AllTools in a scope mapping stands for every tool.
const AllTools = "*"

// FromScopes compiles serve --tool-scope (scope → the tools it opens) to
// an Engine: one policy per scope, id "tool-scope SCOPE", permitting a
// principal holding SCOPE to list and call the scope's tools (every tool
// for *). Nothing else is permitted, checkpoint_status included unless a
// scope names it: the rule --tool-scope has always had. A nil or empty
// mapping is not an Engine (nil: no gate).
func FromScopes(scopes map[string][]string) (*Engine, error) {
	if len(scopes) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(scopes))
	for s := range scopes {
		names = append(names, s)
	}
	sort.Strings(names)
	var list cedar.PolicyList
	for _, s := range names {
		holds := ast.Principal().Access("scopes").Contains(ast.String(s))
		p := ast.Annotation("id", types.String(scopePrefix+s)).Permit()
		if tools := scopes[s]; !slices.Contains(tools, AllTools) {
			uids := make([]ast.Node, len(tools))
			for i, t := range tools {
				uids[i] = ast.Value(types.NewEntityUID(typeTool, types.String(t)))
			}
			holds = holds.And(ast.Set(uids...).Contains(ast.Resource()))
		}
		list = append(list, cedar.NewPolicyFromAST(p.When(holds)))
	}
	e, errs := build("--tool-scope", list, true)
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return e, nil
}
