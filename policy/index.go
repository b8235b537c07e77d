package policy

import (
	"iter"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
)

// scopeKey is what a policy's scope pins down: the principal's and the
// tool's name when the scope says `principal == ...` or `resource ==
// ...`, "" (with any false) for a scope that does not.
type scopeKey struct {
	principal, resource string
	anyP, anyR          bool
}

// index sorts the policies by the principal and tool their scopes name,
// so that a decision evaluates only the policies whose scope can match:
// a policy whose scope names another principal or tool is false for the
// request before its conditions are read, so leaving it out changes
// nothing of the decision, its reasons or its errors.
type index map[scopeKey][]indexed

type indexed struct {
	id cedar.PolicyID
	p  *cedar.Policy
}

func keyOf(p *cedar.Policy) scopeKey {
	a := (*xast.Policy)(p.AST())
	k := scopeKey{anyP: true, anyR: true}
	if eq, ok := a.Principal.(xast.ScopeTypeEq); ok && eq.Entity.Type == typePrincipal {
		k.principal, k.anyP = string(eq.Entity.ID), false
	}
	if eq, ok := a.Resource.(xast.ScopeTypeEq); ok && eq.Entity.Type == typeTool {
		k.resource, k.anyR = string(eq.Entity.ID), false
	}
	return k
}

func (x index) add(id cedar.PolicyID, p *cedar.Policy) {
	k := keyOf(p)
	x[k] = append(x[k], indexed{id, p})
}

// candidates is the cedar.PolicyIterator of the policies that can match
// a request of principal on tool.
type candidates struct {
	x               index
	principal, tool types.String
}

func (c candidates) All() iter.Seq2[cedar.PolicyID, *cedar.Policy] {
	return func(yield func(cedar.PolicyID, *cedar.Policy) bool) {
		for _, k := range [...]scopeKey{
			{anyP: true, anyR: true},
			{principal: string(c.principal), anyR: true},
			{resource: string(c.tool), anyP: true},
			{principal: string(c.principal), resource: string(c.tool)},
		} {
			for _, p := range c.x[k] {
				if !yield(p.id, p.p) {
					return
				}
			}
		}
	}
}
