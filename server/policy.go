package server

// Authorization: the one policy engine (package policy) that decides
// which tools a principal lists and calls. serve --policy is the
// Server's (Options.Policy), over every transport; --tool-scope is the
// HTTP transport's (HTTPOptions.Scopes, compiled by policy.FromScopes),
// over HTTP only, as it always was. Both are never set at once (NewHTTP
// refuses it).
//
// tools/list is filtered (gateTools): a tool not permitted for "list" is
// absent. mcp-go runs the same filter again when a tool is called; a
// tools/call request (its context carries the transport's CallInfo) is
// let through there, and the call is decided for "call", with its
// arguments, by the handler middleware (authorizeCall), which audits a
// denial.

import (
	"context"
	"maps"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/internal/jsonrpc"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/policy"
)

// engineFor is the engine that decides ctx's requests: the HTTP
// transport's --tool-scope engine for a request it serves, else the
// server's --policy; nil when nothing gates (every tool is served).
// fromFile is true for the policy file's.
func (s *Server) engineFor(ctx context.Context) (e *policy.Engine, fromFile bool) {
	if h, ok := servedBy(ctx); ok && h.scopes != nil {
		return h.scopes, false
	}
	e = s.policy.Load()
	return e, e != nil
}

// principalOf is ctx's principal as policies see it: over HTTP the
// authenticated principal (a unix socket's "local" has auth "none"),
// over stdio Principal::"stdio".
func principalOf(ctx context.Context) policy.Principal {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok {
		return policy.Stdio
	}
	return policyPrincipal(p)
}

// policyPrincipal is an HTTP principal as policies see it.
func policyPrincipal(p auth.Principal) policy.Principal {
	out := policy.Principal{Name: p.Name, Scopes: p.Scopes, Client: p.Client}
	switch p.Method {
	case auth.MethodToken:
		out.Auth = policy.AuthToken
	case auth.MethodOAuth:
		out.Auth, out.Issuer = policy.AuthOAuth, p.Issuer
	default:
		out.Auth = policy.AuthNone
	}
	return out
}

// setResources records the policy resources of tools served (or that
// may be served: a downstream server's enabled tools).
func (s *Server) setResources(tools map[string]policy.Tool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.Copy(s.resources, tools)
}

// decide asks e about action on the tool name for p. A name with no
// resource is denied: nothing can permit what toolgate does not serve.
// fromFile decides with the policy file's engine read with the resource,
// so that a reload (which swaps both under s.mu) is never seen half done.
func (s *Server) decide(e *policy.Engine, fromFile bool, p policy.Principal, action policy.Action, name string, args any) policy.Decision {
	s.mu.RLock()
	t, ok := s.resources[name]
	if fromFile {
		e = s.policy.Load()
	}
	s.mu.RUnlock()
	if !ok {
		return policy.Decision{Policies: []string{policy.NoPermit}, Reason: "the tool is not served"}
	}
	return e.Decide(policy.Request{Principal: p, Action: action, Tool: t, Arguments: args})
}

// scopeAllows reports whether --tool-scope lets p list and call name
// (true without --tool-scope).
func (h *HTTP) scopeAllows(p auth.Principal, name string) bool {
	return h.scopes == nil || h.s.decide(h.scopes, false, policyPrincipal(p), policy.ActionCall, name, nil).Allow
}

// isCall reports whether ctx is a tools/call request's: both transports
// give one its CallInfo before mcp-go sees it.
func isCall(ctx context.Context) bool { return jsonrpc.CallInfoFrom(ctx).ID != "" }

// gateTools is the tools/list filter New installs: the tools the engine
// of ctx permits its principal to list; a tool the policy file hides is
// audited (kind "policy"). At call time (mcp-go filters the called tool
// too) it lets a tools/call through to authorizeCall.
func (s *Server) gateTools(ctx context.Context, tools []mcp.Tool) []mcp.Tool {
	e, fromFile := s.engineFor(ctx)
	if e == nil || isCall(ctx) {
		return tools
	}
	p := principalOf(ctx)
	var who *auth.Principal
	if ap, ok := auth.PrincipalFrom(ctx); ok {
		who = &ap
	}
	out := tools[:0:0]
	for _, t := range tools {
		d := s.decide(e, fromFile, p, policy.ActionList, t.Name, nil)
		if d.Allow {
			out = append(out, t)
			continue
		}
		if fromFile {
			audit.Policy{Action: string(policy.ActionList), Tool: t.Name, Principal: who, Policies: d.Policies, Reason: d.Reason}.Write(s.auditLog)
		}
	}
	return out
}

// authorizeCall decides a call under the policy file (nil: allowed, or
// no policy file; --tool-scope is decided by the HTTP transport's gate).
// A denial is audited (refused "policy", the deciding policies) and
// answered isError.
func (s *Server) authorizeCall(ctx context.Context, req mcp.CallToolRequest) *mcp.CallToolResult {
	e, fromFile := s.engineFor(ctx)
	if !fromFile {
		return nil
	}
	name := req.Params.Name
	// The policy judges the very bytes the tool is given (toolcall.Args),
	// and only when every decoder reads them alike.
	var d policy.Decision
	if args, err := policy.ArgumentsOf(toolcall.Args(req)); err != nil {
		d = policy.Decision{Policies: []string{policy.NoPermit}, Reason: "the arguments cannot be given to the policy: " + err.Error()}
	} else {
		d = s.decide(e, fromFile, principalOf(ctx), policy.ActionCall, name, args)
	}
	if d.Allow {
		return nil
	}
	rec := &audit.Call{
		RequestID: jsonrpc.CallInfoFrom(ctx).ID, Tool: name, Kind: s.kindOf(name), Backend: s.backendOf(name),
		Refused: "policy", Policies: d.Policies, IsError: true,
	}
	if d.Reason != "" {
		rec.Error = audit.Some(d.Reason)
	}
	rec.Annotate(ctx, req)
	s.audit(rec, "call")
	return toolcall.ErrorResult("toolgate: %s: not permitted by the policy: %s", name, d)
}
