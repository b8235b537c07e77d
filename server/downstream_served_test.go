package server

import (
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolgate/toolgate/conf"
)

func TestApprovalAnnotations(t *testing.T) {
	yes, no := mcp.ToBoolPtr(true), mcp.ToBoolPtr(false)
	for _, tc := range []struct {
		mode           conf.ApprovalMode
		own            mcp.ToolAnnotation
		ro, destr, idm any
	}{
		{conf.ApprovalAuto, mcp.ToolAnnotation{ReadOnlyHint: no, DestructiveHint: yes}, true, false, nil},
		{conf.ApprovalWrites, mcp.ToolAnnotation{ReadOnlyHint: yes}, true, false, nil},
		{conf.ApprovalWrites, mcp.ToolAnnotation{}, false, true, nil},
		{conf.ApprovalWrites, mcp.ToolAnnotation{ReadOnlyHint: no}, false, true, nil},
		{conf.ApprovalPrompt, mcp.ToolAnnotation{ReadOnlyHint: yes, IdempotentHint: yes}, false, true, true},
		{conf.ApprovalApprove, mcp.ToolAnnotation{ReadOnlyHint: yes, IdempotentHint: yes}, false, true, false},
	} {
		a := approvalAnnotations(tc.mode, tc.own)
		if deref(a.ReadOnlyHint) != tc.ro || deref(a.DestructiveHint) != tc.destr || deref(a.IdempotentHint) != tc.idm {
			t.Errorf("approvalAnnotations(%s, ro=%v) = ro %v destructive %v idempotent %v, want %v %v %v", tc.mode, deref(tc.own.ReadOnlyHint),
				deref(a.ReadOnlyHint), deref(a.DestructiveHint), deref(a.IdempotentHint), tc.ro, tc.destr, tc.idm)
		}
	}
}
