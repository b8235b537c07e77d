package server

import (
	"context"
	"regexp"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sirupsen/logrus"
)

// traceparentRe is a W3C Trace Context traceparent: version, trace id,
// parent id, flags, in lowercase hex; the all-zero ids are invalid.
var traceparentRe = regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

func validTraceparent(tp string) bool {
	return traceparentRe.MatchString(tp) && tp[:2] != "ff" &&
		tp[3:35] != "00000000000000000000000000000000" && tp[36:52] != "0000000000000000"
}

// annotate adds to a call's audit record who made it (over HTTP: the
// principal's name, how it authenticated, its OAuth client) and the
// traceparent the client sent in the request's _meta, when it is a valid
// one (one that is not is noted, never copied).
func (s *Server) annotate(ctx context.Context, req mcp.CallToolRequest, rec logrus.Fields) {
	if p, ok := PrincipalFrom(ctx); ok {
		addPrincipal(rec, p)
	}
	if req.Params.Meta == nil {
		return
	}
	v, ok := req.Params.Meta.AdditionalFields["traceparent"]
	if !ok {
		return
	}
	if tp, _ := v.(string); validTraceparent(tp) {
		rec["traceparent"] = tp
	} else {
		rec["traceparent_invalid"] = true
	}
}

func addPrincipal(rec logrus.Fields, p Principal) {
	rec["principal"] = p.Name
	rec["auth"] = p.Method
	if p.Client != "" {
		rec["client"] = p.Client
	}
}
