package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/policy"
	rt "github.com/toolgate/toolgate/runtime"
)

// teamPolicy permits alice two tools (hello, sbx) and bob one read-class
// tool (hello), forbids bob sbx by name, and gives stdio other.
const teamPolicy = `@id("alice-two-tools")
permit (principal == Principal::"alice", action, resource)
when { [Tool::"hello", Tool::"sbx"].contains(resource) };

@id("bob-read")
permit (principal == Principal::"bob", action, resource == Tool::"hello")
when { resource.class == "read" };

@id("no-sbx-for-bob")
forbid (principal == Principal::"bob", action == Action::"call", resource == Tool::"sbx");

@id("stdio-other")
permit (principal == Principal::"stdio", action, resource == Tool::"other")
when { principal.auth == "none" };
`

func teamEngine(t *testing.T) *policy.Engine {
	t.Helper()
	e, err := policy.Parse("team.cedar", []byte(teamPolicy))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func withPolicy(e *policy.Engine) fixtureOpt { return func(o *Options) { o.Policy = e } }

// TestHTTPPolicy: over HTTP, in both eras and with two tokens at once,
// each principal lists exactly what the policy permits it
// (checkpoint_status always), calls what it permits, and every other
// call is refused isError before anything runs, audited with the
// policies that decided.
func TestHTTPPolicy(t *testing.T) {
	f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken, "bob "+bobToken+" tools.read"))}, withPolicy(teamEngine(t)))
	for _, legacy := range []bool{true, false} {
		alice, bob := mcpClient(t, f.url, aliceToken, legacy), mcpClient(t, f.url, bobToken, legacy)
		if got := listNames(t, alice); !slices.Equal(got, []string{"checkpoint_status", "hello", "sbx"}) {
			t.Errorf("legacy=%v: alice's tools/list = %v, want [checkpoint_status hello sbx]", legacy, got)
		}
		if got := listNames(t, bob); !slices.Equal(got, []string{"checkpoint_status", "hello"}) {
			t.Errorf("legacy=%v: bob's tools/list = %v, want [checkpoint_status hello]", legacy, got)
		}
		for _, tc := range []struct {
			c          *client.Client
			who, tool  string
			refusedWhy string // "" for allowed
		}{
			{alice, "alice", "hello", ""},
			{alice, "alice", "sbx", ""},
			{alice, "alice", "checkpoint_status", ""},
			{alice, "alice", "other", "deny (no permit)"},
			{bob, "bob", "hello", ""},
			{bob, "bob", "checkpoint_status", ""},
			{bob, "bob", "sbx", "deny (by no-sbx-for-bob)"},
			{bob, "bob", "other", "deny (no permit)"},
		} {
			before := f.ran()
			res, err := callTool(t, tc.c, tc.tool, nil)
			if err != nil {
				t.Fatalf("legacy=%v: %s calls %s: %v", legacy, tc.who, tc.tool, err)
			}
			if tc.refusedWhy == "" {
				if res.IsError {
					t.Errorf("legacy=%v: %s calls %s = isError %q, want it run", legacy, tc.who, tc.tool, resultText(res))
				}
				continue
			}
			want := "toolgate: " + tc.tool + ": not permitted by the policy: " + tc.refusedWhy
			if !res.IsError || resultText(res) != want {
				t.Errorf("legacy=%v: %s calls %s = %v %q, want isError %q", legacy, tc.who, tc.tool, res.IsError, resultText(res), want)
			}
			if n := f.ran(); n != before {
				t.Errorf("legacy=%v: %s's refused call of %s ran %d tools", legacy, tc.who, tc.tool, n-before)
			}
		}
	}
	// Each refused call is audited, with the policies that decided; each
	// tool a list hid too (with the principal; never the arguments).
	listed := func(who, tool string) string {
		return `{"action":"list","auth":"token","kind":"policy","level":"info","msg":"policy denied","policies":["no permit"],"principal":"` + who + `","time":"*","tool":"` + tool + `"}`
	}
	called := func(who, tool, backend, policies, id string) string {
		return `{"auth":"token","backend":"` + backend + `","is_error":true,"kind":"external","level":"info","msg":"call","policies":` + policies + `,"principal":"` + who + `","refused":"policy","request_id":"` + id + `","time":"*","tool":"` + tool + `"}`
	}
	var other, sbx []string
	for range 2 { // the two eras
		other = append(other, listed("alice", "other"), listed("bob", "other"), called("alice", "other", "direct", `["no permit"]`, "6"), called("bob", "other", "direct", `["no permit"]`, "6"))
		sbx = append(sbx, listed("bob", "sbx"), called("bob", "sbx", "bwrap", `["no-sbx-for-bob"]`, "5"))
	}
	checkAudit(t, policyLines(t, f.audit, "other"), other...)
	checkAudit(t, policyLines(t, f.audit, "sbx"), sbx...)
}

// policyLines are the audit lines of tool that a policy decided.
func policyLines(t *testing.T, buf fmt.Stringer, tool string) []string {
	t.Helper()
	return slices.DeleteFunc(auditLines(t, buf, tool), func(l string) bool { return !strings.Contains(l, `"policies":`) })
}

// stdioClient is mcp-go's client speaking to s.ServeStdio over pipes: the
// real stdio transport, its dispatcher included.
func stdioClient(t *testing.T, s *Server) *client.Client {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- s.ServeStdio(context.Background(), inR, outW)
		outW.Close()
	}()
	c := client.NewClient(transport.NewIO(outR, inW, io.NopCloser(strings.NewReader(""))))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = "2025-06-18"
	if _, err := c.Initialize(ctx, req); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		inW.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("ServeStdio did not return after stdin closed")
		}
	})
	return c
}

// TestStdioPolicy: over stdio the one principal is Principal::"stdio"
// (auth "none"): it lists and calls what the policy gives it, and a
// refused call is audited with the policy's verdict.
func TestStdioPolicy(t *testing.T) {
	alog, buf := jsonAudit()
	direct := &fakeRunner{res: rt.Result{Output: []byte("hi\n")}}
	s := New(Options{Conf: loadConf(t, httpConf), Direct: direct, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{}), Audit: alog, Policy: teamEngine(t)})
	c := stdioClient(t, s)
	if got := listNames(t, c); !slices.Equal(got, []string{"checkpoint_status", "other"}) {
		t.Errorf("stdio's tools/list = %v, want [checkpoint_status other]", got)
	}
	for _, tc := range []struct{ tool, refused string }{{"other", ""}, {"checkpoint_status", ""}, {"hello", "deny (no permit)"}, {"sbx", "deny (no permit)"}} {
		res, err := callTool(t, c, tc.tool, map[string]any{})
		if err != nil {
			t.Fatalf("call %s: %v", tc.tool, err)
		}
		if want := "toolgate: " + tc.tool + ": not permitted by the policy: " + tc.refused; tc.refused != "" && (!res.IsError || resultText(res) != want) {
			t.Errorf("call %s = %v %q, want isError %q", tc.tool, res.IsError, resultText(res), want)
		}
		if tc.refused == "" && res.IsError {
			t.Errorf("call %s = isError %q, want it run", tc.tool, resultText(res))
		}
	}
	if got := len(direct.invocations()); got != 1 {
		t.Errorf("%d tools ran, want 1 (other)", got)
	}
	checkAudit(t, auditLines(t, buf, "hello"),
		`{"action":"list","kind":"policy","level":"info","msg":"policy denied","policies":["no permit"],"principal":"stdio","time":"*","tool":"hello"}`,
		`{"backend":"direct","is_error":true,"kind":"external","level":"info","msg":"call","policies":["no permit"],"refused":"policy","request_id":"5","time":"*","tool":"hello"}`)
}

// TestDownstreamPolicyArguments: a downstream tool is a Tool of kind
// downstream with its server's id, and a policy can permit its call for
// some argument values only (context.arguments).
func TestDownstreamPolicyArguments(t *testing.T) {
	e, err := policy.Parse("p.cedar", []byte(`@id("echo-hello")
permit (principal == Principal::"stdio", action, resource == Tool::"fake__echo")
when {
  resource.kind == "downstream" && resource.server == "fake" && resource.network &&
  (action == Action::"list" ||
   (context.arguments.hasTag("text") && context.arguments.getTag("text").type == "string" &&
    context.arguments.getTag("text").text like "hello*"))
};
`))
	if err != nil {
		t.Fatal(err)
	}
	alog, buf := jsonAudit()
	r := loadRegistry(t, map[string]string{"10-fake.toml": fakeRegistry})
	h := newHarness(t, Options{Conf: loadConf(t, twoTools), Audit: alog, Policy: e}, gateway.Options{Registry: r, Eager: true, MaxBytes: 8192},
		map[string]string{"TOOLGATE_FAKE_SECRET": "x"})
	if got := slices.Sorted(maps.Keys(h.tools(t))); !slices.Equal(got, []string{"checkpoint_status", "fake__echo"}) {
		t.Errorf("tools/list = %v, want [checkpoint_status fake__echo]", got)
	}
	if res := h.call(t, "fake__echo", map[string]any{"text": "hello world"}); res.IsError || resultText(res) != "echo: hello world" {
		t.Errorf("echo hello world = %v %q, want it passed on", res.IsError, resultText(res))
	}
	for _, args := range []any{map[string]any{"text": "goodbye"}, map[string]any{"text": []any{"hello"}}, map[string]any{}, nil} {
		res := h.call(t, "fake__echo", args)
		if want := "toolgate: fake__echo: not permitted by the policy: deny (no permit)"; !res.IsError || resultText(res) != want {
			t.Errorf("echo %v = %v %q, want isError %q", args, res.IsError, resultText(res), want)
		}
	}
	// Arguments that decoders read differently (a key twice, the last
	// one what the policy would judge; a key equal but for case, which
	// Go's encoding/json matches to the field) are never judged: refused.
	for _, raw := range []string{`{"text":"goodbye","text":"hello"}`, `{"text":"hello","TEXT":"goodbye"}`, `{"text":"hello","o":{"a":1,"A":2}}`} {
		res := h.call(t, "fake__echo", json.RawMessage(raw))
		if !res.IsError || !strings.Contains(resultText(res), "are the same to some decoders") {
			t.Errorf("echo %s = %v %q, want refused as ambiguous", raw, res.IsError, resultText(res))
		}
	}
	if n := len(policyLines(t, buf, "fake__echo")); n != 7 {
		t.Errorf("%d policy records of fake__echo, want the 7 refused calls:\n%s", n, buf.String())
	}
}
