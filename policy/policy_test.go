package policy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolgate/toolgate/conf"
)

func team(t *testing.T) *Engine {
	t.Helper()
	e, err := Load("testdata/team.cedar")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// The principals and tools of the tests.
var (
	alice = Principal{Name: "alice", Auth: AuthToken, Scopes: []string{"tools.read"}}
	bob   = Principal{Name: "bob", Auth: AuthToken}
	carol = Principal{Name: "carol", Auth: AuthOAuth, Issuer: "https://issuer.test", Client: "agent-1", Scopes: []string{"web"}}

	hello   = Tool{Name: "hello", Kind: "external", Class: "read", Network: true}
	sbx     = Tool{Name: "sbx", Kind: "external", Class: "test"}
	other   = Tool{Name: "other", Kind: "external", Class: "read", Network: true}
	fetch   = Tool{Name: "web__fetch", Kind: "downstream", Server: "web", Network: true}
	statusT = Tool{Name: StatusTool, Kind: "builtin"}
)

// TestDecide: the team policy (alice two tools, bob one read-class tool,
// carol a downstream tool for some arguments only) for list and call,
// with the policies that decided.
func TestDecide(t *testing.T) {
	e := team(t)
	for _, tc := range []struct {
		name string
		req  Request
		want Decision
	}{
		{"alice lists hello", Request{alice, ActionList, hello, nil}, Decision{Allow: true, Policies: []string{"alice-two-tools"}}},
		{"alice calls sbx", Request{alice, ActionCall, sbx, map[string]any{}}, Decision{Allow: true, Policies: []string{"alice-two-tools"}}},
		{"alice lists other", Request{alice, ActionList, other, nil}, Decision{Policies: []string{NoPermit}}},
		{"alice calls other", Request{alice, ActionCall, other, nil}, Decision{Policies: []string{NoPermit}}},
		{"bob lists hello", Request{bob, ActionList, hello, nil}, Decision{Allow: true, Policies: []string{"bob-read"}}},
		{"bob calls hello", Request{bob, ActionCall, hello, nil}, Decision{Allow: true, Policies: []string{"bob-read"}}},
		{"bob calls sbx", Request{bob, ActionCall, sbx, nil}, Decision{Policies: []string{NoPermit}}},
		{"bob calls hello were it test-class", Request{bob, ActionCall, Tool{Name: "hello", Kind: "external", Class: "test"}, nil}, Decision{Policies: []string{NoPermit}}},
		{"stdio calls hello", Request{Stdio, ActionCall, hello, nil}, Decision{Policies: []string{NoPermit}}},
		{"checkpoint_status for anyone", Request{bob, ActionCall, statusT, nil}, Decision{Allow: true, Reason: "checkpoint_status is always permitted (it is never off)"}},
		{"checkpoint_status over stdio", Request{Stdio, ActionList, statusT, nil}, Decision{Allow: true, Reason: "checkpoint_status is always permitted (it is never off)"}},
		{"carol lists fetch", Request{carol, ActionList, fetch, nil}, Decision{Allow: true, Policies: []string{"list-fetch"}}},
		{
			"carol fetches the docs",
			Request{carol, ActionCall, fetch, map[string]any{"url": "https://docs.example.com/a"}},
			Decision{Allow: true, Policies: []string{"fetch-docs"}},
		},
		{
			"carol fetches elsewhere",
			Request{carol, ActionCall, fetch, map[string]any{"url": "https://evil.example/a"}},
			Decision{Policies: []string{NoPermit}},
		},
		{"carol fetches without a url", Request{carol, ActionCall, fetch, map[string]any{}}, Decision{Policies: []string{NoPermit}}},
		{
			"carol fetches an array of urls",
			Request{carol, ActionCall, fetch, map[string]any{"url": []any{"https://docs.example.com/a"}}},
			Decision{Policies: []string{NoPermit}},
		},
		{
			"carol fetches a small page",
			Request{carol, ActionCall, fetch, map[string]any{"url": "https://docs.example.com/a", "max_bytes": float64(4096)}},
			Decision{Allow: true, Policies: []string{"fetch-docs"}},
		},
		{
			"carol fetches a big page",
			Request{carol, ActionCall, fetch, map[string]any{"url": "https://docs.example.com/a", "max_bytes": float64(1 << 20)}},
			Decision{Policies: []string{"small-pages"}},
		},
		{
			"carol fetches a fractional size",
			Request{carol, ActionCall, fetch, map[string]any{"url": "https://docs.example.com/a", "max_bytes": 1.5}},
			Decision{Policies: []string{"small-pages"}},
		},
		{
			"carol fetches a size as text",
			Request{carol, ActionCall, fetch, map[string]any{"url": "https://docs.example.com/a", "max_bytes": "10"}},
			Decision{Policies: []string{"small-pages"}},
		},
		{
			"a token of carol's name fetches",
			Request{Principal{Name: "carol", Auth: AuthToken, Scopes: []string{"web"}}, ActionCall, fetch, map[string]any{"url": "https://docs.example.com/a"}},
			Decision{Policies: []string{NoPermit}},
		},
		{
			"a token named stdio",
			Request{Principal{Name: "stdio", Auth: AuthToken}, ActionCall, hello, nil},
			Decision{Policies: []string{NoPermit}, Reason: `the principal name "stdio" is reserved for the transport without authentication; a token principal of that name is denied everything`},
		},
		{
			"an OAuth subject local",
			Request{Principal{Name: "local", Auth: AuthOAuth, Issuer: "i"}, ActionList, hello, nil},
			Decision{Policies: []string{NoPermit}, Reason: `the principal name "local" is reserved for the transport without authentication; a oauth principal of that name is denied everything`},
		},
		{
			"arguments not an object",
			Request{carol, ActionCall, fetch, []any{"x"}},
			Decision{Policies: []string{NoPermit}, Reason: "the arguments cannot be given to the policy: the arguments are an array, not an object"},
		},
		{
			"an unknown action",
			Request{alice, Action("delete"), hello, nil},
			Decision{Policies: []string{NoPermit}, Reason: `unknown action "delete"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, e.Decide(tc.req)); diff != "" {
				t.Errorf("Decide(%+v) (-want +got):\n%s", tc.req, diff)
			}
		})
	}
}

// TestDecideOrder: a denial names every forbid that matched, in file
// order; an allowed request every permit.
func TestDecideOrder(t *testing.T) {
	e, err := Parse("p.cedar", []byte(`
@id("z") permit (principal, action, resource);
@id("a") permit (principal, action == Action::"list", resource);
@id("f2") forbid (principal == Principal::"bob", action, resource);
@id("f1") forbid (principal, action, resource == Tool::"sbx");
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Decide(Request{alice, ActionList, hello, nil}); !got.Allow || !slices.Equal(got.Policies, []string{"z", "a"}) {
		t.Errorf("alice lists hello = %v, want allow by z, a", got)
	}
	if got := e.Decide(Request{bob, ActionCall, sbx, nil}); got.Allow || !slices.Equal(got.Policies, []string{"f2", "f1"}) {
		t.Errorf("bob calls sbx = %v, want deny by f2, f1", got)
	}
	if got, want := e.Decide(Request{bob, ActionCall, sbx, nil}).String(), "deny (by f2, f1)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := (Decision{Policies: []string{NoPermit}}).String(), "deny (no permit)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := e.IDs(); !slices.Equal(got, []string{"z", "a", "f2", "f1"}) {
		t.Errorf("IDs() = %v", got)
	}
}

// TestParseRefuses: a file that does not parse is refused at its line,
// one that does not validate against the schema (an unknown attribute, an
// unknown entity type or action, an unguarded optional attribute or tag)
// at the policy's line with its id, and ids must be unique and usable.
func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      string // the whole error
	}{
		{
			"malformed", "@id(\"a\")\npermit (principal, action, resource);\n\npermit (principal, actio, resource);\n",
			`p.cedar:4:25: does not parse: ",": exact got actio want action`,
		},
		{
			"malformed condition", "permit (principal, action, resource)\nwhen { 1 + };\n",
			`p.cedar:2:13: does not parse: ";": invalid primary`,
		},
		{
			"unknown attribute", "@id(\"owners\")\npermit (principal, action, resource)\n  when { resource.owner == principal };\n",
			"p.cedar:1:1: policy \"owners\": does not validate against toolgate's schema: attribute `owner` on entity type `Tool` not found",
		},
		{
			"unknown principal attribute", "permit (principal, action, resource) when { principal.role == \"admin\" };",
			"p.cedar:1:1: policy \"policy0\": does not validate against toolgate's schema: attribute `role` on entity type `Principal` not found",
		},
		{
			"unknown entity type", "permit (principal == User::\"alice\", action, resource);",
			"p.cedar:1:1: policy \"policy0\": does not validate against toolgate's schema: unrecognized entity type `User`",
		},
		{
			"unknown action", "permit (principal, action == Action::\"delete\", resource);",
			"p.cedar:1:1: policy \"policy0\": does not validate against toolgate's schema: unrecognized action `Action::\"delete\"`",
		},
		{
			"optional attribute unguarded", "permit (principal, action, resource) when { principal.issuer == \"x\" };",
			"p.cedar:1:1: policy \"policy0\": does not validate against toolgate's schema: unable to guarantee safety of access to optional attribute `issuer`",
		},
		{
			"tag unguarded", "permit (principal, action, resource) when { context.arguments.getTag(\"path\").text == \"x\" };",
			"p.cedar:1:1: policy \"policy0\": does not validate against toolgate's schema: unable to guarantee safety of access to tag",
		},
		{
			"wrong type", "permit (principal, action, resource) when { resource.network == \"yes\" };",
			"p.cedar:1:1: policy \"policy0\": does not validate against toolgate's schema: ",
		},
		{
			"duplicate id", "@id(\"a\") permit (principal, action, resource);\n@id(\"a\") forbid (principal, action, resource);\n",
			`p.cedar:2:1: policy "a": duplicate id: the policy at line 1 has it too`,
		},
		{
			"an id the default names", "permit (principal, action, resource);\n@id(\"policy0\") forbid (principal, action, resource);\n",
			`p.cedar:2:1: policy "policy0": duplicate id: the policy at line 1 has it too`,
		},
		{"empty id", "@id(\"\") permit (principal, action, resource);", `p.cedar:1:1: @id is empty`},
		{"reserved id", "@id(\"no permit\") permit (principal, action, resource);", `p.cedar:1:1: @id "no permit" is what a denial no policy decided names`},
		{"tool-scope's id", "@id(\"tool-scope x\") permit (principal, action, resource);", `p.cedar:1:1: @id "tool-scope x": ids starting "tool-scope " are --tool-scope's`},
		{"id that does not print", "@id(\"a\\nb\") permit (principal, action, resource);", `p.cedar:1:1: @id "a\nb" holds a character that does not print`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Parse("p.cedar", []byte(tc.src))
			if e != nil || err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, %v; want the refusal %q", e, err, tc.want)
			}
			var pe *Error
			if !errors.As(err, &pe) || pe.File != "p.cedar" || pe.Line == 0 {
				t.Errorf("Parse error %#v: want a *Error with its file and line", err)
			}
		})
	}
}

// TestParseCollectsEveryProblem: every refused policy is reported, so
// that an operator fixes them in one pass; and the whole file is refused.
func TestParseCollectsEveryProblem(t *testing.T) {
	_, err := Parse("p.cedar", []byte("permit (principal, action, resource) when { resource.a };\npermit (principal, action, resource);\npermit (principal, action, resource) when { principal.b };\n"))
	var lines []int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		if pe, ok := errors.AsType[*Error](e); ok {
			lines = append(lines, pe.Line)
		}
	}
	if !slices.Equal(lines, []int{1, 3}) {
		t.Errorf("refused lines %v (%v), want [1 3]", lines, err)
	}
}

// TestParseAccepts: an empty file (deny everything but
// checkpoint_status), comments, and every attribute of the schema used as
// it types.
func TestParseAccepts(t *testing.T) {
	for _, src := range []string{
		"",
		"// nothing is permitted\n",
		`permit (principal, action in [Action::"list", Action::"call"], resource is Tool)
when {
  (principal.auth == "token" || principal.auth == "oauth" || principal.auth == "none") &&
  principal.scopes.containsAny(["a", "b"]) &&
  (principal has issuer && principal.issuer == "https://i.test") &&
  (principal has client && principal.client like "agent-*") &&
  resource.kind == "downstream" && resource.class == "" && resource.server == "web" && !resource.network &&
  (context.arguments.hasTag("n") && context.arguments.getTag("n") has long && context.arguments.getTag("n").long <= 10)
};`,
	} {
		e, err := Parse("p.cedar", []byte(src))
		if err != nil {
			t.Errorf("Parse(%q) = %v, want accepted", src, err)
			continue
		}
		if d := e.Decide(Request{alice, ActionCall, hello, nil}); d.Allow {
			t.Errorf("Parse(%q): alice calls hello = %v, want deny", src, d)
		}
	}
}

// TestLoadTrusted: a policy file is read under tools.conf's rules; one
// others could write is refused.
func TestLoadTrusted(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.cedar")
	if err := os.WriteFile(p, []byte("permit (principal, action, resource);\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Fatalf("Load(ours, 0644) = %v, want loaded", err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	var ce *conf.Error
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "group- or world-writable (mode 0666): anyone who can write the policy file decides what toolgate runs") {
		t.Errorf("Load(0666) = %v, want refused as world-writable", err)
	}
	if _, err := Load(filepath.Join(dir, "absent.cedar")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Load(absent) = %v, want refused", err)
	}
	big := filepath.Join(dir, "big.cedar")
	if err := os.WriteFile(big, []byte(strings.Repeat("//\n", MaxFileSize/3+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "over 1048576 bytes") {
		t.Errorf("Load(big) = %v, want refused as over the size", err)
	}
}

// TestFromScopes: --tool-scope compiled to the engine decides as the
// scope mapping always has: a principal lists and calls exactly the
// tools of the scopes it holds (* every tool), checkpoint_status
// included only when a scope names it.
func TestFromScopes(t *testing.T) {
	e, err := FromScopes(map[string][]string{"tools.read": {"hello", StatusTool}, "tools.test": {"sbx"}, "admin": {AllTools}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		scopes []string
		tool   Tool
		want   []string // the deciding policies; allowed unless NoPermit
	}{
		{[]string{"tools.read"}, hello, []string{"tool-scope tools.read"}},
		{[]string{"tools.read"}, statusT, []string{"tool-scope tools.read"}},
		{[]string{"tools.read"}, sbx, []string{NoPermit}},
		{[]string{"tools.test"}, statusT, []string{NoPermit}},
		{[]string{"tools.read", "tools.test"}, sbx, []string{"tool-scope tools.test"}},
		{[]string{"openid"}, hello, []string{NoPermit}},
		{nil, hello, []string{NoPermit}},
		{[]string{"admin"}, other, []string{"tool-scope admin"}},
		{[]string{"admin", "tools.read"}, hello, []string{"tool-scope admin", "tool-scope tools.read"}},
	} {
		for _, a := range []Action{ActionList, ActionCall} {
			p := Principal{Name: "p", Auth: AuthOAuth, Issuer: "i", Scopes: tc.scopes}
			d := e.Decide(Request{p, a, tc.tool, nil})
			if want := tc.want[0] != NoPermit; d.Allow != want || !slices.Equal(d.Policies, tc.want) {
				t.Errorf("scopes %v, %s %s = %v, want allow=%v by %v", tc.scopes, a, tc.tool.Name, d, want, tc.want)
			}
		}
	}
	// --tool-scope names no principal: a token named stdio is a token.
	if d := e.Decide(Request{Principal{Name: StdioPrincipal, Auth: AuthToken, Scopes: []string{"tools.read"}}, ActionCall, hello, nil}); !d.Allow {
		t.Errorf("a token named stdio with tools.read calls hello = %v, want allow", d)
	}
	if e, err := FromScopes(nil); e != nil || err != nil {
		t.Errorf("FromScopes(nil) = %v, %v; want no engine", e, err)
	}
}

// TestArguments: a call's arguments as Argument tags, and the bounds of
// the conversion.
func TestArguments(t *testing.T) {
	decode := func(s string) any {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	got, err := arguments(decode(`{"s":"a<b>","i":42,"neg":-7,"f":1.5,"big":1e20,"t":true,"n":null,"a":[1,"x"],"o":{"b":1,"a":[true]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"s":   `{"text":"a<b>","type":"string"}`,
		"i":   `{"long":42,"text":"42","type":"integer"}`,
		"neg": `{"long":-7,"text":"-7","type":"integer"}`,
		"f":   `{"text":"1.5","type":"number"}`,
		"big": `{"text":"100000000000000000000","type":"number"}`,
		"t":   `{"text":"true","type":"boolean"}`,
		"n":   `{"text":"null","type":"null"}`,
		"a":   `{"text":"[1,\"x\"]","type":"array"}`,
		"o":   `{"text":"{\"a\":[true],\"b\":1}","type":"object"}`,
	}
	gotJSON := map[string]string{}
	for k, v := range got.All() {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var plain any
		if err := json.Unmarshal(b, &plain); err != nil {
			t.Fatal(err)
		}
		text, err := canonical(plain)
		if err != nil {
			t.Fatal(err)
		}
		gotJSON[string(k)] = text
	}
	if diff := cmp.Diff(want, gotJSON); diff != "" {
		t.Errorf("arguments (-want +got):\n%s", diff)
	}
	if n, _ := arguments(map[string]any{"n": json.Number("9007199254740993")}); n.Len() != 1 {
		t.Fatal("json.Number")
	} else if v, _ := n.Get("n"); !strings.Contains(v.String(), "9007199254740993") {
		t.Errorf("json.Number 2^53+1 = %v, want exact", v)
	}
	if got, err := arguments(nil); err != nil || got.Len() != 0 {
		t.Errorf("arguments(nil) = %v, %v; want no tags", got, err)
	}

	deep := strings.Repeat(`{"a":`, MaxArgumentDepth) + "1" + strings.Repeat("}", MaxArgumentDepth)
	if _, err := arguments(decode(deep)); err != nil {
		t.Errorf("arguments nested %d deep = %v, want accepted", MaxArgumentDepth, err)
	}
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"too deep", decode(strings.Repeat(`{"a":`, MaxArgumentDepth+1) + "1" + strings.Repeat("}", MaxArgumentDepth+1)), "nested deeper than 32"},
		{"too many values", map[string]any{"a": make([]any, MaxArgumentValues)}, "over 10000 values"},
		{"too many bytes", map[string]any{"a": strings.Repeat("x", MaxArgumentBytes/2), "b": strings.Repeat("y", MaxArgumentBytes/2+1)}, "over 1048576 bytes"},
		{"a string", "x", "the arguments are a string, not an object"},
		{"not JSON", map[string]any{"c": make(chan int)}, `argument "c": a chan int is not a JSON value`},
	} {
		if _, err := arguments(tc.v); err == nil || err.Error() != tc.want {
			t.Errorf("arguments(%s) = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestSchemaInDocs: docs/policy.md shows the schema the code embeds,
// verbatim.
func TestSchemaInDocs(t *testing.T) {
	doc, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```cedarschema\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/policy.md has no ```cedarschema block")
	}
	if diff := cmp.Diff(Schema, string(m[1])); diff != "" {
		t.Errorf("docs/policy.md's schema differs from policy/toolgate.cedarschema (-code +docs):\n%s", diff)
	}
}

// TestEvaluationErrorDenies: Cedar skips a policy whose evaluation fails,
// so a forbid that overflows would forbid nothing; toolgate denies
// instead, naming the policy that erred. Arguments under the bound
// evaluate as before.
func TestEvaluationErrorDenies(t *testing.T) {
	e, err := Parse("p.cedar", []byte(`@id("all")
permit (principal, action, resource);
@id("area")
forbid (principal, action, resource)
when {
  context.arguments.hasTag("w") && context.arguments.getTag("w") has long &&
  context.arguments.hasTag("h") && context.arguments.getTag("h") has long &&
  context.arguments.getTag("w").long * context.arguments.getTag("h").long > 1000
};
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  map[string]any
		allow bool
		ids   []string
	}{
		{map[string]any{"w": float64(10), "h": float64(10)}, true, []string{"all"}},
		{map[string]any{"w": float64(100), "h": float64(100)}, false, []string{"area"}},
		{map[string]any{"w": float64(1 << 32), "h": float64(1 << 32)}, false, []string{"area"}}, // overflows: an error
	} {
		d := e.Decide(Request{alice, ActionCall, hello, tc.args})
		if d.Allow != tc.allow || !slices.Equal(d.Policies, tc.ids) {
			t.Errorf("w×h of %v: %+v, want allow %v by %v", tc.args, d, tc.allow, tc.ids)
		}
	}
}

// TestArgumentsOf: raw arguments that decoders read alike are decoded;
// a key twice or two keys equal but for case, at any depth, are refused.
func TestArgumentsOf(t *testing.T) {
	for _, raw := range []string{``, `{}`, `{"path":"a","Path2":"b","list":[{"k":1},{"k":2}]}`} {
		if _, err := ArgumentsOf(json.RawMessage(raw)); err != nil {
			t.Errorf("ArgumentsOf(%s) = %v, want decoded", raw, err)
		}
	}
	v, err := ArgumentsOf(json.RawMessage(`{"n":3}`))
	if m, ok := v.(map[string]any); err != nil || !ok || m["n"] != float64(3) {
		t.Errorf(`ArgumentsOf({"n":3}) = %#v, %v`, v, err)
	}
	for _, raw := range []string{
		`{"path":"ok","path":"secret/x"}`,
		`{"path":"ok","PATH":"secret/x"}`,
		`{"a":{"x":1,"X":2}}`,
		`{"a":[{"k":1,"k":2}]}`,
		"{\"k\":1,\"\u212a\":2}", // the Kelvin sign folds to k
		`{"a":`,
	} {
		if _, err := ArgumentsOf(json.RawMessage(raw)); err == nil {
			t.Errorf("ArgumentsOf(%s) decoded, want refused", raw)
		}
	}
}
