package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/policy"
)

const policyUsage = `usage:
  toolgate policy check --policy FILE --principal NAME --tool TOOL [--action list|call]
      [--auth token|oauth|none] [--scopes S1,S2 | --auth-tokens FILE] [--issuer URL] [--client ID]
      [--arguments JSON] [--conf PATH] [--tool-mcp-dir DIR]
`

// policyCmd runs `toolgate policy SUBCOMMAND`.
func policyCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprint(stderr, policyUsage)
		return 2
	}
	return policyCheck(args[1:], stdout, stderr)
}

// policyCheckFlags are what policy check needs to know: the policy, the
// principal's attributes, and where the tool is served from.
type policyCheckFlags struct {
	policy, principal, tool, action string
	auth, scopes, tokens            string
	issuer, client, arguments       string
	confPath, registryDir           string
}

func (f *policyCheckFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.policy, "policy", "", "the Cedar policy file (required)")
	fs.StringVar(&f.principal, "principal", "", "the principal's name: a token file's name, an OAuth principal's, local or stdio (required)")
	fs.StringVar(&f.tool, "tool", "", "the tool's served name (required): looked up in the built-ins, --conf and --tool-mcp-dir for its attributes")
	fs.StringVar(&f.action, "action", "", "list or call (default: both)")
	fs.StringVar(&f.auth, "auth", "", "how the principal authenticated: token, oauth or none (default: none for stdio and local, else token)")
	fs.StringVar(&f.scopes, "scopes", "", "the principal's scopes, comma-separated")
	fs.StringVar(&f.tokens, "auth-tokens", "", "take the principal's scopes from the entry of its name in this token file (serve's --auth-tokens)")
	fs.StringVar(&f.issuer, "issuer", "", "an OAuth principal's issuer (with --auth oauth)")
	fs.StringVar(&f.client, "client", "", "an OAuth principal's client (with --auth oauth)")
	fs.StringVar(&f.arguments, "arguments", "", "the call's arguments, a JSON object (context.arguments)")
	fs.StringVar(&f.confPath, "conf", conf.PathFromEnv(os.Getenv), "tools.conf path (default: $"+conf.EnvPath+", else "+conf.DefaultPath+")")
	fs.StringVar(&f.registryDir, "tool-mcp-dir", registry.DefaultDir, "directory of the tool-MCP registry's *.toml fragments")
}

// policyCheck explains the decision of a policy file for one principal and
// tool, without serving: exit 0 when every action asked is allowed, 1 when
// one is denied, 2 when the question cannot be asked (a refused policy
// file, a tool not served).
func policyCheck(args []string, stdout, stderr io.Writer) int {
	var f policyCheckFlags
	fs := flag.NewFlagSet("policy check", flag.ContinueOnError)
	f.register(fs)
	if !parse(fs, args, stderr) {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "toolgate policy check: %v\n", err)
		return 2
	}
	if f.policy == "" || f.principal == "" || f.tool == "" {
		return fail(errors.New("--policy, --principal and --tool are required"))
	}
	actions := []policy.Action{policy.ActionList, policy.ActionCall}
	if f.action != "" {
		a, err := policy.ParseAction(f.action)
		if err != nil {
			return fail(fmt.Errorf("--action: %w", err))
		}
		actions = []policy.Action{a}
	}
	e, err := policy.Load(f.policy)
	if err != nil {
		return fail(fmt.Errorf("the policy file is refused:\n%w", err))
	}
	p, err := f.principalOf()
	if err != nil {
		return fail(err)
	}
	t, err := f.lookupTool()
	if err != nil {
		return fail(err)
	}
	var arguments any
	if f.arguments != "" {
		if err := json.Unmarshal([]byte(f.arguments), &arguments); err != nil {
			return fail(fmt.Errorf("--arguments: %w", err))
		}
	}
	fmt.Fprintf(stdout, "policy %s: %d policies\n", e.Name(), len(e.IDs()))
	fmt.Fprintf(stdout, "principal %s\n", describePrincipal(p))
	fmt.Fprintf(stdout, "tool %s\n", describeTool(t))
	code := 0
	for _, a := range actions {
		r := policy.Request{Principal: p, Action: a, Tool: t}
		if a == policy.ActionCall {
			r.Arguments = arguments
		}
		d := e.Decide(r)
		fmt.Fprintf(stdout, "%s: %s\n", a, explain(e, d))
		for _, msg := range d.Errors {
			fmt.Fprintf(stdout, "  not evaluated: %s\n", msg)
		}
		if !d.Allow {
			code = 1
		}
	}
	return code
}

// principalOf is the principal the flags describe.
func (f *policyCheckFlags) principalOf() (policy.Principal, error) {
	p := policy.Principal{Name: f.principal, Auth: f.auth, Issuer: f.issuer, Client: f.client}
	if p.Auth == "" {
		p.Auth = policy.AuthToken
		if p.Name == policy.StdioPrincipal || p.Name == policy.LocalPrincipal {
			p.Auth = policy.AuthNone
		}
	}
	switch p.Auth {
	case policy.AuthToken, policy.AuthNone:
		if p.Issuer != "" || p.Client != "" {
			return p, errors.New("--issuer and --client are an OAuth principal's (--auth oauth)")
		}
	case policy.AuthOAuth:
		if p.Issuer == "" {
			return p, errors.New("--auth oauth needs --issuer: every OAuth principal has one")
		}
	default:
		return p, fmt.Errorf("--auth %q: want token, oauth or none", p.Auth)
	}
	if f.scopes != "" {
		p.Scopes = strings.Split(f.scopes, ",")
	}
	if f.tokens != "" {
		if f.scopes != "" || p.Auth != policy.AuthToken {
			return p, errors.New("--auth-tokens gives a token principal's scopes: not with --scopes or --auth " + p.Auth)
		}
		toks, err := conf.LoadTokens(f.tokens)
		if err != nil {
			return p, fmt.Errorf("--auth-tokens: %w", err)
		}
		i := slices.IndexFunc(toks.Tokens, func(t conf.Token) bool { return t.Name == p.Name })
		if i < 0 {
			return p, fmt.Errorf("--auth-tokens %s has no token named %q", f.tokens, p.Name)
		}
		p.Scopes = toks.Tokens[i].Scopes
	}
	return p, nil
}

// lookupTool finds the tool as serve would serve it: a built-in, a tool of
// a loaded tools.conf that is not exposed off, or an enabled tool of a
// registry server (ID__TOOL).
func (f *policyCheckFlags) lookupTool() (policy.Tool, error) {
	name := f.tool
	if slices.Contains(builtin.Names(), name) {
		return policy.Builtin(name), nil
	}
	c := conf.Load(f.confPath, conf.Options{})
	if t, ok := c.Tool(name); ok && c.State == conf.StateLoaded && !c.Hidden(name) {
		return policy.External(t), nil
	}
	if id, tool, ok := strings.Cut(name, registry.ServedNameSeparator); ok {
		r := registry.Load(f.registryDir, registry.Options{Taken: registry.TakenNames(builtin.Names(), c), Visible: sandboxVisible, Conf: c})
		if r.State == conf.StateRefused {
			return policy.Tool{}, fmt.Errorf("tool %q: the registry %s is refused: %w", name, f.registryDir, r.Err())
		}
		for _, s := range r.Servers {
			if s.ID == id && slices.Contains(s.EnabledTools, tool) {
				return policy.Downstream(name, s), nil
			}
		}
	}
	why := fmt.Sprintf("tools.conf %s is %s", c.Path, c.State)
	if c.State == conf.StateRefused {
		why += " (every external is off)"
	}
	return policy.Tool{}, fmt.Errorf("tool %q is not served: not a built-in, not in tools.conf (%s), not an enabled tool of the registry %s", name, why, f.registryDir)
}

func describePrincipal(p policy.Principal) string {
	attrs := []string{fmt.Sprintf("auth: %q", p.Auth), "scopes: " + quoteSet(p.Scopes)}
	if p.Issuer != "" {
		attrs = append(attrs, fmt.Sprintf("issuer: %q", p.Issuer))
	}
	if p.Client != "" {
		attrs = append(attrs, fmt.Sprintf("client: %q", p.Client))
	}
	return fmt.Sprintf("Principal::%q {%s}", p.Name, strings.Join(attrs, ", "))
}

func describeTool(t policy.Tool) string {
	return fmt.Sprintf("Tool::%q {kind: %q, class: %q, server: %q, network: %v}", t.Name, t.Kind, t.Class, t.Server, t.Network)
}

func quoteSet(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// explain renders a decision with the line of each deciding policy.
func explain(e *policy.Engine, d policy.Decision) string {
	verdict := "deny"
	if d.Allow {
		verdict = "allow"
	}
	var by []string
	for _, id := range d.Policies {
		if id == policy.NoPermit {
			by = append(by, "no policy permits it")
			continue
		}
		by = append(by, fmt.Sprintf("%q (line %d)", id, e.Line(id)))
	}
	switch {
	case d.Reason != "":
		return verdict + ": " + d.Reason
	case d.Allow:
		return verdict + ", permitted by " + strings.Join(by, ", ")
	case len(by) == 1 && d.Policies[0] == policy.NoPermit:
		return verdict + ": " + by[0]
	}
	return verdict + ", forbidden by " + strings.Join(by, ", ")
}
