package server

import (
	"github.com/toolgate/toolgate/audit"
	rt "github.com/toolgate/toolgate/runtime"
)

// ran records what the runner said of an external call that ran.
func ran(r *audit.Call, res rt.Result) {
	r.ExitCode = audit.Some(res.ExitCode)
	r.ElapsedMS = audit.Some(res.Elapsed.Milliseconds())
	r.OutputBytes = audit.Some(res.OutputBytes)
	r.Truncated = audit.Some(res.Truncated)
	r.TimedOut = audit.Some(res.TimedOut)
	r.Limit = audit.Some(string(res.Limit))
	r.IsError = res.Failed()
}

// ranEgress records a call's use of its egress proxy.
func ranEgress(r *audit.Call, u rt.EgressUse) {
	r.EgressConns, r.EgressBytes, r.EgressLimit = audit.Some(u.Conns), audit.Some(u.Bytes), u.Limit
}

// audit writes one record per call and counts it in the metrics.
func (s *Server) audit(r *audit.Call, msg string) {
	r.Write(s.auditLog, msg)
	s.metrics.observe(r)
	spanOutcome(r)
}
