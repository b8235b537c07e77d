package server

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/internal/testbin"
	"github.com/toolgate/toolgate/policy"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/status"
)

// confIn parses text with EXE and DIR of dir (one directory for every
// conf of a test: a tool unchanged between two confs is the same tool).
func confIn(t *testing.T, dir, text string) *conf.Config {
	t.Helper()
	exe := filepath.Join(dir, "tool")
	if err := os.WriteFile(exe, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	text = strings.NewReplacer("EXE", exe, "DIR", dir).Replace(text)
	return conf.Parse("tools.conf", []byte(text), conf.Options{Builtins: builtin.Names()})
}

// kindLines are the audit records of kind, masked.
func kindLines(t *testing.T, buf fmt.Stringer, kind string) []string {
	t.Helper()
	var out []string
	for l := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		if strings.Contains(l, `"kind":"`+kind+`"`) {
			out = append(out, auditMask.ReplaceAllString(l, `"$1":"*"`))
		}
	}
	return out
}

func reloadStatus(t *testing.T, c *client.Client) status.Report {
	t.Helper()
	res, err := callTool(t, c, "checkpoint_status", nil)
	if err != nil || res.IsError {
		t.Fatalf("checkpoint_status: %v %v", err, res)
	}
	var st status.Report
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestReloadSwapsToolsKeepingCalls: a reload while three sessions are
// connected and a call is in flight loses neither: the call finishes
// under the tool it started with, every session is told
// (notifications/tools/list_changed) and its next tools/list is the new
// conf's; checkpoint_status and the audit log say what changed.
func TestReloadSwapsToolsKeepingCalls(t *testing.T) {
	dir := t.TempDir()
	old := confIn(t, dir, "tool keep EXE read 5 100 off DIR -- a\ntool gone EXE read 5 100 off DIR --\ntool slow EXE read 5 100 off DIR -- old\n")
	direct := &fakeRunner{res: rt.Result{Output: []byte("ran")}, block: make(chan struct{})}
	auditLog, buf := jsonAudit()
	s := New(Options{Conf: old, Builtins: []builtin.Tool{fakeBuiltin("repo_manifest")}, Direct: direct, Audit: auditLog})
	var sessions []*client.Client
	var watches []*listChanges
	for range 3 {
		c := session(t, s)
		sessions, watches = append(sessions, c), append(watches, watchList(t, c))
	}
	done := make(chan string, 1)
	go func() {
		res, err := callTool(t, sessions[0], "slow", nil)
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		done <- resultText(res)
	}()
	waitFor(t, func() bool { return len(direct.invocations()) == 1 })

	next := confIn(t, dir, "tool slow EXE read 5 100 off DIR -- new\ntool keep EXE read 5 100 off DIR -- a\ntool fresh EXE read 5 100 off DIR --\nexpose repo_manifest off\n")
	rec := s.Reload(Snapshot{Conf: next, Trigger: "watch", Changed: []string{"tools.conf"}})
	if rec.Generation != 1 {
		t.Errorf("generation = %d, want 1", rec.Generation)
	}
	if got := strings.Join(rec.Added, ","); got != "fresh" {
		t.Errorf("added = %s, want fresh", got)
	}
	if got := strings.Join(rec.Removed, ","); got != "repo_manifest,gone" {
		t.Errorf("removed = %s, want repo_manifest,gone", got)
	}
	if got := strings.Join(rec.Replaced, ","); got != "slow" {
		t.Errorf("replaced = %s, want slow", got)
	}
	const want = "checkpoint_status,slow,keep,fresh"
	for i, w := range watches {
		waitFor(t, func() bool { n, names := w.seen(); return n > 0 && strings.Join(names, ",") == want })
		if got := strings.Join(listNames(t, sessions[i]), ","); got != want {
			t.Errorf("session %d: tools/list = %s, want %s", i, got, want)
		}
	}
	close(direct.block)
	if got := <-done; !strings.Contains(got, "ran") {
		t.Errorf("the call in flight answered %q, want its result", got)
	}
	invs := direct.invocations()
	if got := invs[0].Argv; !slices.Equal(got[len(got)-1:], []string{"old"}) {
		t.Errorf("the call in flight ran %q, want the old argv", got)
	}
	if _, err := callTool(t, sessions[1], "slow", nil); err != nil {
		t.Fatal(err)
	}
	if got := direct.invocations()[1].Argv; got[len(got)-1] != "new" {
		t.Errorf("a call after the reload ran %q, want the new argv", got)
	}
	st := reloadStatus(t, sessions[2])
	if st.Reload == nil || st.Reload.Generation != 1 || st.Reload.Trigger != "watch" || strings.Join(st.Reload.Changed, ",") != "tools.conf" || st.Reload.At == "" {
		t.Errorf("checkpoint_status reload = %+v", st.Reload)
	}
	if !strings.Contains(auditMask.ReplaceAllString(buf.String(), `"$1":"*"`), `{"added":["fresh"],"changed":["tools.conf"],"generation":1,"kind":"reload","level":"info","msg":"reload","refused":[],"removed":["repo_manifest","gone"],"replaced":["slow"],"time":"*","trigger":"watch"}`) {
		t.Errorf("no reload audit record in:\n%s", buf)
	}
}

// TestReloadRefusedConfFailsClosed: a refused tools.conf at a reload
// withdraws every external, as at start, and checkpoint_status says the
// conf is refused.
func TestReloadRefusedConfFailsClosed(t *testing.T) {
	dir := t.TempDir()
	s := New(Options{Conf: confIn(t, dir, "tool a EXE read 5 100 off DIR --\n"), Direct: &fakeRunner{}})
	c := session(t, s)
	w := watchList(t, c)
	bad := confIn(t, dir, "tool a EXE read 5 100 off DIR --\ntool b /bin/bash read 1 1 off DIR --\n")
	if bad.State != conf.StateRefused {
		t.Fatalf("state %s", bad.State)
	}
	rec := s.Reload(Snapshot{
		Conf: bad, Trigger: "sighup", Changed: []string{"tools.conf"},
		Refused: []status.Refusal{{File: "tools.conf", Reason: "bash", Effect: conf.RefusedEffect}},
	})
	if strings.Join(rec.Removed, ",") != "a" || len(rec.Added) != 0 {
		t.Errorf("Reload = %+v", rec)
	}
	waitFor(t, func() bool { n, _ := w.seen(); return n > 0 })
	if got := strings.Join(listNames(t, c), ","); got != "checkpoint_status" {
		t.Errorf("tools/list = %s, want checkpoint_status alone", got)
	}
	if res, err := callTool(t, c, "a", nil); err == nil && !res.IsError {
		t.Errorf("a withdrawn tool answered %v", res)
	}
	st := reloadStatus(t, c)
	if st.Conf.State != "refused" || st.Reload == nil || len(st.Reload.Refused) != 1 || st.Reload.Refused[0].File != "tools.conf" {
		t.Errorf("status conf %+v, reload %+v", st.Conf, st.Reload)
	}
}

// TestReloadPolicy: a new policy decides the next listing and call, and
// every session is told its list may have changed.
func TestReloadPolicy(t *testing.T) {
	dir := t.TempDir()
	both, err := policy.Parse("p", []byte(`@id("all") permit (principal, action, resource);`))
	if err != nil {
		t.Fatal(err)
	}
	onlyA, err := policy.Parse("p", []byte(`@id("a") permit (principal, action, resource == Tool::"a");`))
	if err != nil {
		t.Fatal(err)
	}
	c0 := confIn(t, dir, "tool a EXE read 5 100 off DIR --\ntool b EXE read 5 100 off DIR --\n")
	s := New(Options{Conf: c0, Direct: &fakeRunner{}, Policy: both})
	c := session(t, s)
	w := watchList(t, c)
	if got := strings.Join(listNames(t, c), ","); got != "checkpoint_status,a,b" {
		t.Fatalf("tools/list = %s", got)
	}
	s.Reload(Snapshot{Conf: c0, Policy: onlyA, Trigger: "watch", Changed: []string{"policy"}})
	waitFor(t, func() bool { n, names := w.seen(); return n > 0 && strings.Join(names, ",") == "checkpoint_status,a" })
	res, err := callTool(t, c, "b", nil)
	if err != nil || !res.IsError {
		t.Errorf("b after the policy reload: %v %v, want isError", res, err)
	}
}

// TestHTTPReloadKeepsSessions: over HTTP (both eras), a reload of the
// conf, the policy, the tokens and the registry while three sessions are
// open and an external's and a downstream server's call are in flight:
// both calls answer, every session stays and lists the new tools, a
// token dropped by the reload is refused from its next request, and the
// policy's new decision holds for the next call.
func TestHTTPReloadKeepsSessions(t *testing.T) {
	dir := t.TempDir()
	all, err := policy.Parse("p", []byte(`@id("all") permit (principal, action, resource);`))
	if err != nil {
		t.Fatal(err)
	}
	notOther, err := policy.Parse("p", []byte(`@id("all-but-other") permit (principal, action, resource) unless { resource == Tool::"other" };`))
	if err != nil {
		t.Fatal(err)
	}
	tokens := auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken, "bob "+bobToken))
	f := startHTTP(t, HTTPOptions{Auth: tokens}, func(o *Options) {
		o.Conf, o.Policy = confIn(t, dir, "tool hello EXE read 5 100 off DIR --\ntool other EXE read 5 100 off DIR --\n"), all
	})
	reg := registryDir{t, t.TempDir()}
	reg.write(map[string]string{"10-fake.toml": fakeServer("fake", "sleep")}, nil)
	f.srv.ConnectDownstream(t.Context(), gateway.Options{
		Registry: registry.Load(reg.dir, registry.Options{}), DirectServices: &rt.DirectServices{Shim: testbin.Shim(t)},
	})
	t.Cleanup(f.srv.Close)
	f.direct.block = make(chan struct{})
	sessions := []*client.Client{mcpClient(t, f.url, aliceToken, false), mcpClient(t, f.url, aliceToken, true), mcpClient(t, f.url, bobToken, false)}
	done, slept := make(chan string, 1), make(chan string, 1)
	answer := func(ch chan<- string, c *client.Client, tool string, args any) {
		res, err := callTool(t, c, tool, args)
		if err != nil {
			ch <- "error: " + err.Error()
			return
		}
		ch <- resultText(res)
	}
	go answer(done, sessions[0], "hello", nil)
	go answer(slept, sessions[1], "fake__sleep", map[string]any{"seconds": 1.5})
	waitFor(t, func() bool { return len(f.direct.invocations()) == 1 })
	time.Sleep(500 * time.Millisecond) // the fake sleeps

	tokens.Replace(tokenFile(t, "alice "+aliceToken))
	reg.write(map[string]string{"10-fake.toml": fakeServer("fake", "sleep", "echo")}, nil)
	f.srv.Reload(Snapshot{
		Conf:    confIn(t, dir, "tool hello EXE read 5 100 off DIR --\ntool other EXE read 5 100 off DIR --\ntool fresh EXE read 5 100 off DIR --\n"),
		Policy:  notOther,
		Trigger: "watch", Changed: []string{"tools.conf", "tokens", "policy"},
	})
	if _, ok := f.srv.ReloadRegistry("watch", reg.load); !ok {
		t.Fatal("the registry's reload did nothing")
	}
	for i, c := range sessions[:2] {
		if got := strings.Join(listNames(t, c), ","); got != "checkpoint_status,hello,fresh,fake__sleep,fake__echo" {
			t.Errorf("session %d: tools/list after the reload = %s, want checkpoint_status,hello,fresh,fake__sleep,fake__echo", i, got)
		}
	}
	if got := <-slept; got != "woke" {
		t.Errorf("the downstream call in flight answered %q, want the old server's answer", got)
	}
	if res, err := callTool(t, sessions[1], "other", nil); err != nil || !res.IsError {
		t.Errorf("other after the policy reload: %v %v, want isError", res, err)
	}
	if _, err := sessions[2].ListTools(t.Context(), mcp.ListToolsRequest{}); err == nil {
		t.Errorf("bob's token, dropped by the reload, still lists")
	}
	close(f.direct.block)
	if got := <-done; !strings.Contains(got, "hi") {
		t.Errorf("the call in flight answered %q, want its result", got)
	}
}

// TestReloadNameOfDownstreamTool: a reloaded conf cannot take the name of
// a downstream tool (the registry refuses that at start): that external
// is not served, the refusal says why, and the downstream tool keeps it.
func TestReloadNameOfDownstreamTool(t *testing.T) {
	dir := t.TempDir()
	s := New(Options{Conf: confIn(t, dir, "tool a EXE read 5 100 off DIR --\n"), Direct: &fakeRunner{}})
	s.reserve(registry.ToolServer{ID: "web", EnabledTools: []string{"fetch"}})
	next := confIn(t, dir, "tool a EXE read 5 100 off DIR --\ntool web__fetch EXE read 5 100 off DIR --\ntool b EXE read 5 100 off DIR --\n")
	if next.State != conf.StateLoaded {
		t.Fatalf("conf %s: %v", next.State, next.Errors)
	}
	rec := s.Reload(Snapshot{Conf: next, Trigger: "watch", Changed: []string{"tools.conf"}})
	if strings.Join(rec.Added, ",") != "b" || len(rec.Refused) != 1 || rec.Refused[0].File != "tools.conf" ||
		rec.Refused[0].Reason != `tool "web__fetch": the name of a downstream server's tool` {
		t.Errorf("Reload = %+v", rec)
	}
	if got := strings.Join(listNames(t, session(t, s)), ","); got != "checkpoint_status,a,b" {
		t.Errorf("tools/list = %s, want checkpoint_status,a,b", got)
	}
	s.mu.RLock()
	p := s.resources["web__fetch"]
	s.mu.RUnlock()
	if p.Kind != status.KindDownstream {
		t.Errorf("web__fetch's resource = %+v, want the downstream tool's", p)
	}
}
