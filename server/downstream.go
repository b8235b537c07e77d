package server

// Downstream tools: the allowed tools of the tool-MCP servers of the
// registry (conf.LoadRegistry), served as ID__TOOL after the externals.
//
// Listing. A server's tools and schemas are known only by asking it.
// ConnectDownstream therefore starts (stdio) or connects to (HTTP) every
// server once, in parallel, each within its startup_timeout_sec, lists its
// tools, and registers the enabled ones it offers with their own schemas.
// Without --eager the server is then stopped again and started lazily on
// the first call; with --eager the connection is kept. A server that
// cannot be listed at start-up is not dropped: its enabled tools are
// served as pinned (or with an open schema, without a pin) and each call
// tries to start it again. Every later start lists the server again, and
// so does a notifications/tools/list_changed it sends; each listing is
// judged against the pins (downstream_pins.go), and a tool whose verdict
// changes joins or leaves toolgate's tools/list at once (listChanged).
//
// Gating. Only names registered here have a handler, and each handler is
// bound to one (server, enabled tool) pair: a tool the allowlist omits, or
// any tool of a server of a refused registry, has no handler and cannot be
// reached whatever name is guessed. Each handler checks the allowlist again.
//
// Files. This one starts the discovery and stops every server (Close).
// downstream_served.go decides what is served and under which name;
// downstream_pins.go judges each listing (text, pins) and what changes;
// downstream_backend.go which backend runs a server; downstream_conn.go
// owns a connection's life (with downstream_stdio.go bounding its writes
// and downstream_cap.go what it reads); downstream_creds.go the variables,
// headers and redaction; downstream_listing.go reads tools/list;
// downstream_call.go answers a call; downstream_result.go neutralises and
// caps its result.

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/egress"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/status"
)

// DownstreamOptions configure ConnectDownstream.
type DownstreamOptions struct {
	// Registry is the tool-MCP registry (any state).
	Registry *conf.Registry
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
	// DefaultDownstreamMaxBytes.
	MaxBytes int
	// RequirePins (serve --require-pins) serves a downstream tool only
	// when it has a pin, as pinned = true does for one server.
	RequirePins bool
}

// downstreamSet is the Server's part for downstream servers. servers and
// status are written by ConnectDownstream under Server.mu.
type downstreamSet struct {
	servers []*downstream
	status  *status.Registry
}

// downstreamDeps is what a downstream server needs of the Server that
// serves it, handed to it explicitly: a downstream holds no *Server.
type downstreamDeps struct {
	opts    DownstreamOptions
	version string // toolgate's, sent in the MCP handshake
	log     *logrus.Logger
	// audit writes a call's audit record (and counts it); callID numbers
	// the calls.
	audit  func(rec *audit.Call, msg string)
	callID func() string
	// cancelled notes a call whose answer is dropped: it was cancelled.
	cancelled func(requestID string)
	// keepEscapes reports a tool whose results keep their terminal
	// control sequences (--keep-escapes).
	keepEscapes func(tool string) bool
	// stopping reports that Close has begun: no server starts after it.
	stopping func() bool
	// egress returns what audits each egress connection of a server with
	// allowed_hosts (rec names the server).
	egress func(rec *audit.Call) func(egress.Record)
	// pinAudit writes the audit record of a pin check (kind pin).
	pinAudit func(audit.Pin)
	// update changes what is served of the server's tools, and
	// setStatus its part of checkpoint_status; both are no-ops before the
	// server is registered.
	update    func(put []entry, drop []string)
	setStatus func(d *downstream)
}

// downstreamDeps are the Server's parts its downstream servers use.
func (s *Server) downstreamDeps(opts DownstreamOptions) downstreamDeps {
	return downstreamDeps{
		opts:        opts,
		version:     s.opts.Version,
		log:         s.log,
		audit:       s.audit,
		callID:      s.nextID,
		egress:      func(rec *audit.Call) func(egress.Record) { return audit.EgressRecorder(s.auditLog, rec) },
		cancelled:   s.cancelled.add,
		keepEscapes: func(tool string) bool { return s.keepEscapes[tool] },
		stopping:    s.stopping.Load,
		pinAudit:    func(r audit.Pin) { r.Write(s.auditLog) },
		update:      s.updateDownstream,
		setStatus:   s.setDownstreamStatus,
	}
}

// downstream is one server of the registry: its connection, started or
// connected on demand, and what it offered when listed.
type downstream struct {
	deps    downstreamDeps
	srv     conf.ToolServer
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
	index   int                   // its place in the registry status

	// listMu orders the listings' changes of what is served.
	listMu sync.Mutex

	// slot serialises calls unless supports_parallel_tool_calls.
	slot chan struct{}
	// starting is held by the one call that starts the server (get).
	starting chan struct{}
}

// registryStatus is a copy of the registry section of checkpoint_status;
// nil when there is no registry.
func (s *Server) registryStatus() *status.Registry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.down == nil {
		return nil
	}
	st := *s.down.status
	st.Errors = slices.Clone(st.Errors)
	st.Servers = slices.Clone(st.Servers)
	return &st
}

// updateStatus changes the registry status under the lock.
func (s *Server) updateStatus(f func(st *status.Registry)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.down.status)
}

// StartDownstream is ConnectDownstream beside serving: it returns at once,
// and tools/list (and a call of a name not served yet) waits until every
// server of the registry is listed, each within its startup_timeout_sec.
// Close cancels a discovery still under way. Call it once, after New and
// before serving.
func (s *Server) StartDownstream(ctx context.Context, opts DownstreamOptions) {
	if opts.Registry == nil || opts.Registry.State != conf.StateLoaded || len(opts.Registry.Servers) == 0 {
		s.ConnectDownstream(ctx, opts)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	s.listed = make(chan struct{})
	s.stopDiscovery = cancel
	go func() {
		defer close(s.listed)
		s.ConnectDownstream(ctx, opts)
	}()
}

// waitListed waits, within ctx, for the discovery StartDownstream began.
func (s *Server) waitListed(ctx context.Context) {
	if s.listed == nil {
		return
	}
	select {
	case <-s.listed:
	case <-ctx.Done():
	}
}

// ConnectDownstream starts or connects to every server of the registry,
// lists its tools and registers the enabled ones it offers, after the
// externals. Call it once, after New and before serving. A refused
// registry, or a collision of a served name with a tools.conf or built-in
// name, disables every downstream server and nothing else.
func (s *Server) ConnectDownstream(ctx context.Context, opts DownstreamOptions) {
	r := opts.Registry
	if r == nil || s.down != nil {
		return
	}
	st := &status.Registry{Dir: r.Dir, State: string(r.State), Reason: r.Reason, RequirePins: opts.RequirePins}
	if r.Pins != nil {
		st.Pins = r.Pins.Path
	}
	if r.State == conf.StateLoaded && len(r.Servers) > 0 {
		st.Listing = true
	}
	s.mu.Lock()
	s.down = &downstreamSet{status: st}
	s.mu.Unlock()
	e := s.log.WithFields(logrus.Fields{"registry": r.Dir, "state": r.State})
	switch r.State {
	case conf.StateAbsent:
		e.WithField("reason", r.Reason).Info("tool-mcp registry absent: no downstream servers")
		return
	case conf.StateRefused:
		s.refuseRegistry(st, r.Errors)
		return
	}
	if errs := s.collisions(r); len(errs) > 0 {
		s.refuseRegistry(st, errs)
		return
	}
	deps := s.downstreamDeps(opts)
	downs := make([]*downstream, 0, len(r.Servers))
	for i, srv := range r.Servers {
		d := newDownstream(srv, deps, s.opts.Sandbox.Name())
		d.index = i
		downs = append(downs, d)
	}
	var wg sync.WaitGroup
	for _, d := range downs {
		if d.unavailable != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.discover(ctx)
		}()
	}
	wg.Wait()
	for _, d := range downs {
		s.reserve(d)
		s.updateStatus(func(st *status.Registry) {
			s.down.servers = append(s.down.servers, d)
			st.Servers = append(st.Servers, status.Downstream{})
		})
		d.register()
		if c := d.live(); c != nil { // --eager: the start-up connection
			go d.watch(c)
		}
	}
	s.updateStatus(func(st *status.Registry) { st.Listing = false })
	// The pages read are garbage now; give their memory back to the
	// system rather than keep the listing's peak for the server's life.
	debug.FreeOSMemory()
	e.WithField("servers", len(downs)).Info("tool-mcp registry loaded")
}

// refuseRegistry records a refused registry: every downstream server is
// disabled. The reasons name keys and variables, never values.
func (s *Server) refuseRegistry(st *status.Registry, errs []error) {
	e := s.log.WithFields(logrus.Fields{"registry": st.Dir, "state": conf.StateRefused})
	s.updateStatus(func(st *status.Registry) {
		st.State, st.Listing = string(conf.StateRefused), false
		for _, err := range errs {
			st.Errors = append(st.Errors, err.Error())
		}
	})
	for _, err := range errs {
		e.WithField("reason", err.Error()).Error("tool-mcp registry refused")
	}
	e.Error("tool-mcp registry refused: every downstream server is disabled; built-in and tools.conf tools are unaffected")
}

// discover connects, lists and, without --eager, disconnects again.
func (d *downstream) discover(ctx context.Context) {
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
	if d.deps.opts.Eager {
		d.mu.Lock()
		d.conn = c
		d.mu.Unlock()
		return
	}
	d.close(c, "listed at start-up; started again on first use", downstreamCloseGrace)
}

// Close stops every downstream server (and everything each started) and
// closes the HTTP sessions; no server is started after it began. ServeStdio
// calls it as soon as its input ends, before it waits for the calls in
// flight; calling it again is harmless.
func (s *Server) Close() {
	s.stopping.Store(true)
	if s.stopDiscovery != nil {
		s.stopDiscovery()
		<-s.listed
	}
	s.mu.RLock()
	ds := s.down
	s.mu.RUnlock()
	if ds == nil {
		return
	}
	var wg sync.WaitGroup
	for _, d := range ds.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.shutdown()
		}()
	}
	wg.Wait()
}
