package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/egress/allowlist"
)

func TestApprovalAnnotations(t *testing.T) {
	yes, no := new(true), new(false)
	for _, tc := range []struct {
		mode           registry.ApprovalMode
		own            mcp.ToolAnnotation
		ro, destr, idm any
	}{
		{registry.ApprovalAuto, mcp.ToolAnnotation{ReadOnlyHint: no, DestructiveHint: yes}, true, false, nil},
		{registry.ApprovalWrites, mcp.ToolAnnotation{ReadOnlyHint: yes}, true, false, nil},
		{registry.ApprovalWrites, mcp.ToolAnnotation{}, false, true, nil},
		{registry.ApprovalWrites, mcp.ToolAnnotation{ReadOnlyHint: no}, false, true, nil},
		{registry.ApprovalPrompt, mcp.ToolAnnotation{ReadOnlyHint: yes, IdempotentHint: yes}, false, true, true},
		{registry.ApprovalApprove, mcp.ToolAnnotation{ReadOnlyHint: yes, IdempotentHint: yes}, false, true, false},
	} {
		a := approvalAnnotations(tc.mode, tc.own)
		if deref(a.ReadOnlyHint) != tc.ro || deref(a.DestructiveHint) != tc.destr || deref(a.IdempotentHint) != tc.idm {
			t.Errorf("approvalAnnotations(%s, ro=%v) = ro %v destructive %v idempotent %v, want %v %v %v", tc.mode, deref(tc.own.ReadOnlyHint),
				deref(a.ReadOnlyHint), deref(a.DestructiveHint), deref(a.IdempotentHint), tc.ro, tc.destr, tc.idm)
		}
	}
}

// TestDownstreamAnnotationsTruth: toolgate states what it knows over what
// a server claims: a stdio server that can reach a network (network =
// true, allowed_hosts, sandbox = false) serves openWorldHint true whatever
// it says; a sandboxed one without a network, and an HTTP one, keep the
// server's. A server's readOnlyHint and destructiveHint are named in the
// description as its claims, not checked by toolgate.
func TestDownstreamAnnotationsTruth(t *testing.T) {
	yes, no := new(true), new(false)
	hosts, err := allowlist.ParseList([]string{"api.example.com:443"})
	if err != nil {
		t.Fatal(err)
	}
	stdio := registry.ToolServer{ID: "s", Transport: registry.TransportStdio, Sandbox: true, EnabledTools: []string{"t"}, DefaultApproval: registry.ApprovalAuto}
	for _, tc := range []struct {
		name      string
		srv       func(s *registry.ToolServer)
		own       *bool
		openWorld any
	}{
		{"sandboxed, no network, claims closed", func(*registry.ToolServer) {}, no, false},
		{"sandboxed, no network, no claim", func(*registry.ToolServer) {}, nil, nil},
		{"network = true, claims closed", func(s *registry.ToolServer) { s.Network = true }, no, true},
		{"allowed_hosts, no claim", func(s *registry.ToolServer) { s.AllowedHosts = hosts }, nil, true},
		{"sandbox = false, claims closed", func(s *registry.ToolServer) { s.Sandbox = false }, no, true},
		{"http, claims closed", func(s *registry.ToolServer) { s.Transport, s.Sandbox = registry.TransportStreamableHTTP, false }, no, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := stdio
			tc.srv(&srv)
			d := New(srv, Deps{Log: logrus.New()}, "bwrap")
			tool, err := d.servedTool(remoteTool{Name: "t", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: mcp.ToolAnnotation{OpenWorldHint: tc.own}}, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := deref(tool.Annotations.OpenWorldHint); got != tc.openWorld {
				t.Errorf("openWorldHint = %v, want %v", got, tc.openWorld)
			}
		})
	}

	for _, tc := range []struct {
		name string
		mode registry.ApprovalMode
		own  mcp.ToolAnnotation
		want string // the description's last line; "" none
	}{
		{"no claim", registry.ApprovalAuto, mcp.ToolAnnotation{OpenWorldHint: no}, ""},
		{
			"read-only claim, mode writes", registry.ApprovalWrites,
			mcp.ToolAnnotation{ReadOnlyHint: yes},
			"(readOnlyHint true is the server's claim, not checked by toolgate; approval mode writes serves the tool as read-only because of it.)",
		},
		{
			"both claims, mode auto", registry.ApprovalAuto,
			mcp.ToolAnnotation{ReadOnlyHint: no, DestructiveHint: yes},
			"(readOnlyHint false and destructiveHint true are the server's claims, not checked by toolgate; the annotations toolgate serves follow approval mode auto.)",
		},
		{
			"destructive claim, mode prompt", registry.ApprovalPrompt,
			mcp.ToolAnnotation{DestructiveHint: no},
			"(destructiveHint false is the server's claim, not checked by toolgate; the annotations toolgate serves follow approval mode prompt.)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := stdio
			srv.DefaultApproval = tc.mode
			d := New(srv, Deps{Log: logrus.New()}, "bwrap")
			tool, err := d.servedTool(remoteTool{Name: "t", Description: "Own.", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: tc.own}, "")
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(tool.Description, "\n")
			last := lines[len(lines)-1]
			switch {
			case tc.want == "" && strings.Contains(tool.Description, "claim"):
				t.Errorf("description = %q, want no claim line", tool.Description)
			case tc.want != "" && last != tc.want:
				t.Errorf("description's last line = %q\nwant %q", last, tc.want)
			}
			if !strings.HasPrefix(tool.Description, "Own.\n\nDownstream tool \"t\"") {
				t.Errorf("description = %q", tool.Description)
			}
		})
	}
}

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}
