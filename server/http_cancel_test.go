package server

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/auth"
)

// cancelBody is a notifications/cancelled of request id, in the stateless
// 2026-07-28 revision (its _meta names the version) or not.
func cancelBody(id int, modern bool) string {
	meta := ""
	if modern {
		meta = `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	}
	return `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + strconv.Itoa(id) + meta + `}}`
}

// TestHTTPCancelStaysWithItsPrincipal: a principal's notifications/cancelled
// never reaches another principal's call, whatever it names: bob's
// stateless 2026-07-28 call runs to its end while alice cancels "its" id
// in every form (2026-07-28 with and without her own session's header,
// 2025-11-25 in her session, without a session). alice still cancels her
// own 2025-11-25 call by a notifications/cancelled in her session, and her
// own 2026-07-28 call by closing its request (TestHTTPProgressAndCancel);
// a 2026-07-28 notice, which that revision does not expect over HTTP (it
// names an id that only the request's own stream could scope), is ignored.
func TestHTTPCancelStaysWithItsPrincipal(t *testing.T) {
	f := startHTTP(t, HTTPOptions{Auth: auth.NewStaticTokens(tokenFile(t, "alice "+aliceToken, "bob "+bobToken))})
	f.direct.block = make(chan struct{})
	init := f.post(t, rpcReq{token: aliceToken, body: initBody})
	sid := init.header.Get("Mcp-Session-Id")
	if init.status != 200 || sid == "" {
		t.Fatalf("alice's initialize: %d, session %q", init.status, sid)
	}
	bob := mcpClient(t, f.url, bobToken, false) // 2026-07-28: no session
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	bobDone := make(chan answer, 1)
	go func() {
		res, err := callTool(t, bob, "hello", nil)
		bobDone <- answer{res, err}
	}()
	waitFor(t, func() bool { return f.h.InFlight() == 1 })

	modern := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "notifications/cancelled"}
	modernInSession := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "notifications/cancelled"}
	legacyInSession := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	for _, tc := range []struct {
		name    string
		headers map[string]string
		modern  bool
	}{
		{"2026-07-28, no session", modern, true},
		{"2026-07-28, naming alice's own session", modernInSession, true},
		{"2026-07-28 by its _meta only, in alice's session", legacyInSession, true},
		{"2025-11-25, in alice's session", legacyInSession, false},
		{"no session, no version", nil, false},
	} {
		for id := range 12 { // bob's call has one of these ids
			got := f.post(t, rpcReq{token: aliceToken, body: cancelBody(id, tc.modern), headers: tc.headers})
			if got.status != 202 && got.status != 400 {
				t.Errorf("%s: alice's cancel of id %d: %d %s, want 202 (or 400)", tc.name, id, got.status, got.body)
			}
		}
		time.Sleep(50 * time.Millisecond)
		if n := f.h.InFlight(); n != 1 {
			t.Fatalf("%s: %d calls in flight after alice's cancels, want bob's 1: alice cancelled bob's call", tc.name, n)
		}
	}
	close(f.direct.block)
	a := <-bobDone
	if a.err != nil || a.res.IsError || !strings.HasPrefix(resultText(a.res), "hi\n[exit=0") {
		t.Fatalf("bob's call answered %v %v, want its result", a.res, a.err)
	}

	// alice's own 2025-11-25 call, cancelled in her session.
	f.direct.block = make(chan struct{})
	defer close(f.direct.block)
	own := make(chan rpcResp, 1)
	go func() {
		own <- f.post(t, rpcReq{token: aliceToken, body: `{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"hello"}}`, headers: legacyInSession})
	}()
	waitFor(t, func() bool { return f.h.InFlight() == 1 })
	// Her 2026-07-28 notice of it is ignored, as that revision says.
	if got := f.post(t, rpcReq{token: aliceToken, body: cancelBody(31, true), headers: modern}); got.status != 202 {
		t.Errorf("alice's 2026-07-28 cancel of her call: %d %s, want 202", got.status, got.body)
	}
	time.Sleep(50 * time.Millisecond)
	if n := f.h.InFlight(); n != 1 {
		t.Fatalf("%d calls in flight after a 2026-07-28 notice, want 1 (ignored)", n)
	}
	if got := f.post(t, rpcReq{token: aliceToken, body: cancelBody(31, false), headers: legacyInSession}); got.status != 202 {
		t.Errorf("alice's cancel in her session: %d %s, want 202", got.status, got.body)
	}
	select {
	case r := <-own:
		if strings.Contains(r.body, `"hi`) {
			t.Errorf("alice's cancelled call answered %d %s, want no result", r.status, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("alice's cancel in her session did not end her call")
	}
	waitFor(t, func() bool { return f.h.InFlight() == 0 })
	var calls []map[string]any
	for _, r := range f.auditRecords(t) {
		if r["tool"] == "hello" {
			calls = append(calls, r)
		}
	}
	if len(calls) != 2 || calls[0]["principal"] != "bob" || calls[0]["cancelled"] != nil ||
		calls[1]["principal"] != "alice" || calls[1]["cancelled"] != true {
		t.Errorf("audit %v: want bob's call run to its end, then alice's cancelled", calls)
	}
}
