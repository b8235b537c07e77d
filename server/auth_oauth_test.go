package server

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/auth/authtest"
)

// TestHTTPOAuthSubjectsAreExact: two subjects that differ only past the
// 256th byte, or only in a byte that does not print (or in one shown as
// an escape), are two principals: neither can use or end the other's
// session, and the audit shows each under a name of its own.
func TestHTTPOAuthSubjectsAreExact(t *testing.T) {
	is := authtest.NewIssuer(t)
	f, resource := startOAuth(t, is, nil)
	long := strings.Repeat("a", 256)
	digest := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	for _, tc := range []struct {
		name         string
		a, b         string
		showA, showB string // the audit's principal
	}{
		{"a control byte", "a\x01", "a\x02", "a%01", "a%02"},
		{"a control byte and the old replacement", "a?", "a\x01", "a?", "a%01"},
		{"the escape itself", "a%01", "a\x01", "a%2501", "a%01"},
		{
			"past 256 bytes", long + "x", long + "y",
			long[:183] + "%~sha256:" + digest(long+"x"), long[:183] + "%~sha256:" + digest(long+"y"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token := func(sub string) string {
				c := is.Claims(resource)
				c["sub"] = sub
				return is.Sign(t, "rsa1", c)
			}
			ta, tb := token(tc.a), token(tc.b)
			init := f.post(t, rpcReq{token: ta, body: initBody})
			sid := init.header.Get("Mcp-Session-Id")
			if init.status != 200 || sid == "" {
				t.Fatalf("initialize as a (%.40q): %d, session %q", tc.a, init.status, sid)
			}
			h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
			before := f.ran()
			if got := f.post(t, rpcReq{token: tb, body: callBody("hello"), headers: h}); got.status != 404 {
				t.Errorf("b (%.40q) calling in a's session: %d, want 404", tc.b, got.status)
			}
			if got := f.post(t, rpcReq{token: tb, method: http.MethodDelete, headers: h}); got.status != 404 {
				t.Errorf("b (%.40q) ending a's session: %d, want 404", tc.b, got.status)
			}
			if n := f.ran() - before; n != 0 {
				t.Fatalf("%d runs in another principal's session, want 0", n)
			}
			if got := f.post(t, rpcReq{token: ta, body: callBody("hello"), headers: h}); got.status != 200 {
				t.Fatalf("a (%.40q) in its own session: %d %s", tc.a, got.status, got.body)
			}
			initB := f.post(t, rpcReq{token: tb, body: initBody})
			hb := map[string]string{"Mcp-Session-Id": initB.header.Get("Mcp-Session-Id"), "Mcp-Protocol-Version": "2025-11-25"}
			if got := f.post(t, rpcReq{token: tb, body: callBody("hello"), headers: hb}); got.status != 200 {
				t.Fatalf("b (%.40q) in its own session: %d %s", tc.b, got.status, got.body)
			}
			recs := f.auditRecords(t)
			if len(recs) < 2 {
				t.Fatalf("%d audit records, want the two calls'", len(recs))
			}
			gotA, gotB := recs[len(recs)-2]["principal"], recs[len(recs)-1]["principal"]
			if gotA != tc.showA || gotB != tc.showB {
				t.Errorf("audit principals %q and %q, want %q and %q", gotA, gotB, tc.showA, tc.showB)
			}
		})
	}
}

// TestHTTPOAuthSubjectsQueueApart: the per-principal queue is keyed on
// the exact subject too: a\x02 is not held up behind a\x01's call.
func TestHTTPOAuthSubjectsQueueApart(t *testing.T) {
	is := authtest.NewIssuer(t)
	const resource = "https://toolgate.test/mcp"
	o, err := auth.NewOAuth(auth.OAuthOptions{Issuer: is.URL(), Resource: resource})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	f := startHTTP(t, HTTPOptions{Auth: o, OAuth: o, Resource: resource, MaxPerPrincipal: 1})
	f.direct.block = make(chan struct{})
	token := func(sub string) string {
		c := is.Claims(resource)
		c["sub"] = sub
		return is.Sign(t, "rsa1", c)
	}
	a, b := mcpClient(t, f.url, token("a\x01"), false), mcpClient(t, f.url, token("a\x02"), false)
	done := make(chan error, 2)
	go func() {
		_, err := callTool(t, a, "hello", nil)
		done <- err
	}()
	waitFor(t, func() bool { return len(f.direct.invocations()) == 1 })
	go func() {
		res, err := callTool(t, b, "hello", nil)
		if err == nil && res.IsError {
			err = errors.New(resultText(res))
		}
		done <- err
	}()
	waitFor(t, func() bool { return len(f.direct.invocations()) == 2 })
	close(f.direct.block)
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("a call: %v", err)
		}
	}
}
