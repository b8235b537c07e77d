package policy

import (
	"fmt"
	"slices"
	"strings"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"

	"github.com/toolgate/toolgate/status"
)

// Action is what a request asks: to see a tool in tools/list, or to call
// it.
type Action string

// The actions of the schema (Action::"list", Action::"call").
const (
	ActionList Action = "list"
	ActionCall Action = "call"
)

// ParseAction returns the action named s.
func ParseAction(s string) (Action, error) {
	switch a := Action(s); a {
	case ActionList, ActionCall:
		return a, nil
	}
	return "", fmt.Errorf("action %q: want %q or %q", s, ActionList, ActionCall)
}

// How a principal authenticated (its auth attribute).
const (
	AuthToken = "token" // a static bearer token
	AuthOAuth = "oauth" // an OAuth access token
	AuthNone  = "none"  // stdio, or a unix socket without authentication
)

// The principals of the transports without authentication.
const (
	StdioPrincipal = "stdio" // stdio's one principal
	LocalPrincipal = "local" // a unix socket listener without authentication
)

// Principal is who asks (Principal::"<Name>").
type Principal struct {
	Name   string
	Auth   string // AuthToken, AuthOAuth or AuthNone
	Scopes []string
	Issuer string // an OAuth principal's; "" leaves the attribute out
	Client string // an OAuth principal's client; "" leaves the attribute out
}

// Stdio is stdio's principal.
var Stdio = Principal{Name: StdioPrincipal, Auth: AuthNone}

// Tool is a served tool (Tool::"<Name>").
type Tool struct {
	Name    string
	Kind    status.Kind
	Class   string // an external's read or test
	Server  string // a downstream tool's server id
	Network bool
}

// Request is one question: may Principal do Action to Tool. Arguments are
// a call's, as JSON decodes them (a map[string]any, or nil for none); a
// list has none.
type Request struct {
	Principal Principal
	Action    Action
	Tool      Tool
	Arguments any
}

// Decision is the answer to a Request.
type Decision struct {
	Allow bool
	// Policies are the ids of the policies that decided, in file order:
	// the permits that matched an allowed request; the forbids that
	// matched a denied one, or NoPermit when none did (nothing
	// permitted it). None when no policy was asked (Reason says why).
	Policies []string
	// Reason says in words why, for a decision no policy made (the tool
	// is always permitted, the principal's name is reserved, the
	// arguments cannot be given to a policy); "" otherwise.
	Reason string
	// Errors are the policies that could not be evaluated for this
	// request (Cedar skips them): "id: message".
	Errors []string
}

// String renders d for humans and logs: "allow (by a, b)", "deny (by
// f)", "deny (no permit)", with the reason when there is one.
func (d Decision) String() string {
	var b strings.Builder
	if d.Allow {
		b.WriteString("allow")
	} else {
		b.WriteString("deny")
	}
	switch {
	case len(d.Policies) == 1 && d.Policies[0] == NoPermit:
		b.WriteString(" (" + NoPermit + ")")
	case len(d.Policies) > 0:
		b.WriteString(" (by " + strings.Join(d.Policies, ", ") + ")")
	}
	if d.Reason != "" {
		b.WriteString(": " + d.Reason)
	}
	return b.String()
}

// Decide answers r. It never errs: whatever cannot be decided is denied,
// and the Decision says why.
func (e *Engine) Decide(r Request) Decision {
	if e.always[r.Tool.Name] {
		return Decision{Allow: true, Reason: r.Tool.Name + " is always permitted (it is never off)"}
	}
	if r.Action != ActionList && r.Action != ActionCall {
		return Decision{Policies: []string{NoPermit}, Reason: fmt.Sprintf("unknown action %q", r.Action)}
	}
	p := r.Principal
	if e.reserved && p.Auth != AuthNone && (p.Name == StdioPrincipal || p.Name == LocalPrincipal) {
		return Decision{Policies: []string{NoPermit}, Reason: fmt.Sprintf("the principal name %q is reserved for the transport without authentication; a %s principal of that name is denied everything", p.Name, p.Auth)}
	}
	tags, err := arguments(r.Arguments)
	if err != nil {
		return Decision{Policies: []string{NoPermit}, Reason: "the arguments cannot be given to the policy: " + err.Error()}
	}
	entities, req := cedarRequest(r, tags)
	return e.decision(cedar.Authorize(candidates{e.index, types.String(p.Name), types.String(r.Tool.Name)}, entities, req))
}

// decision is Cedar's answer as toolgate's: the deciding policies in file
// order, "no permit" for a denial no policy decided, the evaluation errors.
func (e *Engine) decision(ok cedar.Decision, diag cedar.Diagnostic) Decision {
	d := Decision{Allow: ok == cedar.Allow}
	for _, reason := range diag.Reasons {
		d.Policies = append(d.Policies, string(reason.PolicyID))
	}
	slices.SortFunc(d.Policies, func(a, b string) int { return e.order[a] - e.order[b] })
	if !d.Allow && len(d.Policies) == 0 {
		d.Policies = []string{NoPermit}
	}
	for _, de := range diag.Errors {
		d.Errors = append(d.Errors, string(de.PolicyID)+": "+de.Message)
	}
	// Cedar skips a policy whose evaluation fails: a forbid that errs
	// would forbid nothing. toolgate fails closed instead: any error
	// denies, naming the policies that erred.
	if len(diag.Errors) > 0 {
		d.Allow = false
		d.Policies = d.Policies[:0]
		for _, de := range diag.Errors {
			d.Policies = append(d.Policies, string(de.PolicyID))
		}
		d.Reason = "a policy could not be evaluated, and an error never permits"
	}
	return d
}

// cedarRequest is r as Cedar asks it: the principal, the tool and the
// arguments (tags) as entities, and the request naming them.
func cedarRequest(r Request, tags types.Record) (types.EntityMap, cedar.Request) {
	argsUID := types.NewEntityUID(typeArguments, "arguments")
	principal := types.NewEntityUID(typePrincipal, types.String(r.Principal.Name))
	tool := types.NewEntityUID(typeTool, types.String(r.Tool.Name))
	entities := types.EntityMap{
		principal: {UID: principal, Attributes: principalAttrs(r.Principal)},
		tool: {UID: tool, Attributes: types.NewRecord(types.RecordMap{
			"kind":    types.String(r.Tool.Kind),
			"class":   types.String(r.Tool.Class),
			"server":  types.String(r.Tool.Server),
			"network": types.Boolean(r.Tool.Network),
		})},
		argsUID: {UID: argsUID, Tags: tags},
	}
	return entities, cedar.Request{
		Principal: principal,
		Action:    types.NewEntityUID(typeAction, types.String(r.Action)),
		Resource:  tool,
		Context:   types.NewRecord(types.RecordMap{"arguments": argsUID}),
	}
}

func principalAttrs(p Principal) types.Record {
	scopes := make([]types.Value, len(p.Scopes))
	for i, s := range p.Scopes {
		scopes[i] = types.String(s)
	}
	m := types.RecordMap{
		"auth":   types.String(p.Auth),
		"scopes": types.NewSet(scopes...),
	}
	if p.Issuer != "" {
		m["issuer"] = types.String(p.Issuer)
	}
	if p.Client != "" {
		m["client"] = types.String(p.Client)
	}
	return types.NewRecord(m)
}
