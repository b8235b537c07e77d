// Package gateway serves the tools of the registry's downstream tool-MCP
// servers (registry.Load): the allowed tools of each, served as
// ID__TOOL after the externals by package server, which holds the
// *Server of each and hands it what it needs of the MCP server (Deps).
//
// Listing. A server's tools and schemas are known only by asking it. At
// start-up each is therefore started (stdio) or connected to (HTTP) once,
// in parallel, each within its startup_timeout_sec (Discover), its tools
// listed, and the enabled ones it offers registered with their own
// schemas (Register). Without --eager the server is then stopped again
// and started lazily on the first call; with --eager the connection is
// kept. A server that cannot be listed at start-up is not dropped: its
// enabled tools are served as pinned (or with an open schema, without a
// pin) and each call tries to start it again. Every later start lists the
// server again, and so does a notifications/tools/list_changed it sends;
// each listing is judged against the pins (pins.go), and a tool whose
// verdict changes joins or leaves toolgate's tools/list at once
// (listChanged).
//
// Gating. Only names registered here have a handler, and each handler is
// bound to one (server, enabled tool) pair: a tool the allowlist omits, or
// any tool of a server of a refused registry, has no handler and cannot be
// reached whatever name is guessed. Each handler checks the allowlist again.
//
// Files. This one holds a server and its start-up listing; served.go
// decides what is served and under which name; pins.go judges each
// listing (text, pins) and what changes; backend.go which backend runs a
// server; conn.go owns a connection's life (with stdio.go bounding its
// writes and cap.go what it reads); creds.go the variables, headers and
// redaction; listing.go reads tools/list; live.go lists servers without
// serving them (ListLive); call.go answers a call; result.go neutralises
// and caps its result.
package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/egress"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/status"
)

// Options configure the downstream servers (server.ConnectDownstream,
// ListLive).
type Options struct {
	// Registry is the tool-MCP registry (any state).
	Registry *registry.Registry
	// Services runs sandboxed stdio servers: the sandbox backend when it
	// can run services, else nil with ServicesErr saying why. A sandboxed
	// server never falls back to DirectServices.
	Services    rt.ServiceStarter
	ServicesErr error
	// DirectServices runs the stdio servers whose entry says
	// sandbox = false.
	DirectServices rt.ServiceStarter
	// Eager keeps every server running (or connected) from start-up on;
	// otherwise each is stopped after listing and started again on its
	// first call.
	Eager bool
	// LookupEnv reads the variables the registry names, when a server is
	// started and at each HTTP request; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// MaxBytes caps the JSON size of one downstream result; 0 means
	// DefaultMaxBytes.
	MaxBytes int
	// RequirePins (serve --require-pins) serves a downstream tool only
	// when it has a pin, as pinned = true does for one server.
	RequirePins bool
}

// Deps is what a downstream server needs of the MCP server that serves
// it, handed to it explicitly: a downstream server holds no *server.Server.
type Deps struct {
	Options Options
	Version string // toolgate's, sent in the MCP handshake
	Log     *logrus.Logger
	// Audit writes a call's audit record (and counts it); CallID numbers
	// the calls.
	Audit  func(rec *audit.Call, msg string)
	CallID func() string
	// KeepEscapes reports a tool whose results keep their terminal
	// control sequences (--keep-escapes).
	KeepEscapes func(tool string) bool
	// Stopping reports that Close has begun: no server starts after it.
	Stopping func() bool
	// Egress returns what audits each egress connection of a server with
	// allowed_hosts (rec names the server).
	Egress func(rec *audit.Call) func(egress.Record)
	// Pin writes the audit record of a pin check (kind pin).
	Pin func(audit.Pin)
	// Update changes what is served of the server's tools, and SetStatus
	// its part of checkpoint_status; both are called only once the
	// server is registered.
	Update    func(put []Entry, drop []string)
	SetStatus func(status.Downstream)
}

// Entry is one tool served of a downstream server: its definition,
// handler and status line.
type Entry struct {
	Tool    mcp.Tool
	Handler mcpserver.ToolHandlerFunc
	Status  status.Tool
}

// Server is one downstream server of the registry: its connection,
// started or connected on demand, and what it offered when listed.
type Server struct {
	deps    Deps
	srv     registry.ToolServer
	starter rt.ServiceStarter // stdio: the backend that runs it
	backend string            // bwrap, oci, direct or http, for status and logs
	log     *logrus.Entry

	// unavailable, when set, is why the server never runs here: every
	// call answers isError with it.
	unavailable error

	mu      sync.Mutex
	conn    *dconn
	starts  int
	listed  bool                  // listed at least once
	first   *listing              // the start-up listing, until registered
	tools   map[string]*toolState // every enabled tool: its last verdict
	listErr error                 // why the start-up listing failed

	// listMu orders the listings' changes of what is served.
	listMu sync.Mutex

	// slot serialises calls unless supports_parallel_tool_calls.
	slot chan struct{}
	// starting is held by the one call that starts the server (get).
	starting chan struct{}

	// calls counts the calls in the server (under mu when added);
	// retired, set by Retire, turns every later call away.
	calls   sync.WaitGroup
	retired bool
}

// Discover connects, lists and, without --eager, disconnects again: the
// start-up listing Register serves. A server that cannot run here is not
// started.
func (d *Server) Discover(ctx context.Context) {
	if d.unavailable != nil {
		return
	}
	start := time.Now()
	c, err := d.connect(ctx)
	if err != nil {
		d.listErr = err
		d.log.WithError(err).Error("downstream server not listed at start-up: its enabled tools are served with an open schema and each call tries to start it again")
		return
	}
	c.drainChanged() // this listing covers it
	lctx, cancel := context.WithTimeout(ctx, d.srv.StartupTimeout)
	l, err := listTools(lctx, c.client, d.srv.Enabled)
	cancel()
	if err != nil {
		d.close(c, "listing failed", 0)
		d.listErr = fmt.Errorf("tools/list: %s", d.redact(err.Error()))
		d.log.WithError(d.listErr).Error("downstream server not listed at start-up: its enabled tools are served with an open schema and each call tries to start it again")
		return
	}
	d.first = l
	d.log.WithFields(logrus.Fields{"offered": l.offered, "ms": time.Since(start).Milliseconds()}).Info("downstream server listed")
	if d.deps.Options.Eager {
		d.mu.Lock()
		d.conn = c
		d.mu.Unlock()
		return
	}
	d.close(c, "listed at start-up; started again on first use", closeGrace)
}
