package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/gateway"
)

// readyz gets /readyz of f and decodes its body.
func readyz(t *testing.T, f *httpFixture) (int, map[string]any, string) {
	t.Helper()
	code, body := getStatus(t, f.base+"/readyz", "")
	var st map[string]any
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/readyz body %q: %v", body, err)
	}
	return code, st, body
}

// TestReadyzConfRefused: a refused tools.conf keeps the server serving
// (built-ins only) but never ready: /readyz answers 503 with the state and
// the first refusal, so that a rollout of a broken conf stops. An absent
// conf (built-ins only, a valid deployment) and a loaded one are ready.
func TestReadyzConfRefused(t *testing.T) {
	hopts := func() HTTPOptions {
		return HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken))}
	}
	refused := loadConf(t, "tool hello EXE read 20 4096 off DIR -- hi\nbogus line\ntool x EXE write 1 1 off DIR --\n")
	if refused.State != conf.StateRefused || len(refused.Errors) != 2 {
		t.Fatalf("the test's conf: %s %v, want refused twice", refused.State, refused.Errors)
	}
	f := startHTTP(t, hopts(), func(o *Options) { o.Conf = refused })
	code, st, body := readyz(t, f)
	want := "tools.conf tools.conf refused: " + refused.Errors[0].Error() +
		" (and 1 more: see the log or toolgate check); " + conf.RefusedEffect
	if code != 503 || st["ready"] != false || st["conf"] != "refused" || st["conf_reason"] != want {
		t.Errorf("/readyz with a refused conf = %d %s\nwant 503, ready false, conf refused, conf_reason %q", code, body, want)
	}
	if !strings.Contains(want, `unknown directive "bogus"`) {
		t.Errorf("the reason does not name the refusal: %q", want)
	}
	// Still serving: the built-ins answer.
	c := mcpClient(t, f.url, aliceToken, true)
	if _, err := callTool(t, c, "checkpoint_status", nil); err != nil {
		t.Errorf("checkpoint_status with a refused conf: %v", err)
	}

	for _, tc := range []struct {
		name string
		c    *conf.Config
		want string
	}{
		{"absent", &conf.Config{Path: "/etc/toolgate/tools.conf", State: conf.StateAbsent, Reason: "no such file"}, "absent"},
		{"loaded", loadConf(t, httpConf), "loaded"},
	} {
		f := startHTTP(t, hopts(), func(o *Options) { o.Conf = tc.c })
		code, st, body := readyz(t, f)
		if _, has := st["conf_reason"]; code != 200 || st["ready"] != true || st["conf"] != tc.want || has {
			t.Errorf("/readyz with the conf %s = %d %s, want 200 ready, conf %s, no reason", tc.name, code, body, tc.want)
		}
	}
}

// TestReadyzRegistryRefused: the same for the tool-MCP registry: refused
// is 503 with its first refusal; absent is ready; while StartDownstream has
// not yet recorded the registry's state (it may still refuse it) the
// server is not ready.
func TestReadyzRegistryRefused(t *testing.T) {
	hopts := HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken))}
	r := loadRegistry(t, map[string]string{"10-bad.toml": "schema_version = 8\nbogus = 1\n"})
	if r.State != conf.StateRefused || len(r.Errors) != 1 {
		t.Fatalf("the test's registry: %s %v, want refused once", r.State, r.Errors)
	}
	f := startHTTP(t, hopts)
	f.srv.ConnectDownstream(context.Background(), gateway.Options{Registry: r})
	code, st, body := readyz(t, f)
	want := "the tool-MCP registry " + r.Dir + " refused: " + r.Errors[0].Error() +
		"; every downstream server is disabled; built-in and tools.conf tools are unaffected"
	if code != 503 || st["ready"] != false || st["conf"] != "loaded" || st["registry"] != "refused" || st["registry_reason"] != want {
		t.Errorf("/readyz with a refused registry = %d %s\nwant 503, ready false, registry refused, registry_reason %q", code, body, want)
	}

	absent := &registry.Registry{Dir: "/etc/toolgate/tool-mcp.d", State: conf.StateAbsent, Reason: "no such directory"}
	f = startHTTP(t, hopts)
	f.srv.ConnectDownstream(context.Background(), gateway.Options{Registry: absent})
	if code, st, body := readyz(t, f); code != 200 || st["ready"] != true || st["registry"] != "absent" {
		t.Errorf("/readyz with an absent registry = %d %s, want 200 ready, registry absent", code, body)
	}

	f = startHTTP(t, hopts)
	f.srv.listed = make(chan struct{}) // StartDownstream's goroutine, before ConnectDownstream's first step
	if code, st, body := readyz(t, f); code != 503 || st["ready"] != false || st["registry"] != "pending" {
		t.Errorf("/readyz before the registry's state is known = %d %s, want 503, registry pending", code, body)
	}
}
