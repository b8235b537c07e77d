package server

import (
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/auth"
	rt "github.com/toolgate/toolgate/runtime"
)

// TestNewHTTPLeavesTheServer: NewHTTP changes nothing of the Server it
// serves and keeps no state of its own about it: a second transport of
// the same Server is made as the first was, and a session that is not
// theirs (in process, no principal) still lists every tool and runs one
// that no scope of theirs opens, whatever scopes and per-principal
// limits they were given.
func TestNewHTTPLeavesTheServer(t *testing.T) {
	s := New(Options{Conf: loadConf(t, httpConf), Direct: &fakeRunner{res: rt.Result{Output: []byte("hi\n")}}})
	scopes := ToolScopes{}
	scopes.Add("tools.read", []string{"checkpoint_status"})
	toks := auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken))
	for i := range 2 {
		if _, err := NewHTTP(s, HTTPOptions{Auth: toks, Scopes: scopes, MaxPerPrincipal: 1}); err != nil {
			t.Fatalf("NewHTTP #%d: %v, want a transport", i+1, err)
		}
	}
	c := session(t, s)
	if got, want := listNames(t, c), s.ServedNames(); !slices.Equal(got, want) || !slices.Contains(got, "hello") {
		t.Errorf("tools/list in process = %v, want every tool served: %v", got, want)
	}
	res, err := callTool(t, c, "hello", nil)
	if err != nil || res.IsError || !strings.Contains(resultText(res), "hi") {
		t.Errorf("call hello in process = %v, %v (%q), want it run", res, err, resultText(res))
	}
}
