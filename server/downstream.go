package server

// The Server's side of the downstream servers (package gateway): the
// discovery of the registry's servers at start-up, the collisions that
// refuse the registry, their place in tools/list and checkpoint_status,
// the changes of what is served of them, and Close.

import (
	"context"
	"runtime/debug"
	"slices"
	"sync"

	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/sirupsen/logrus"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/status"
)

// downstreamSet is the Server's part for downstream servers, written
// under Server.mu by ConnectDownstream and by a reload of the registry.
type downstreamSet struct {
	// opts are the registry served now and what runs its servers.
	opts    gateway.Options
	servers []*downstream // in the registry's (id) order
	// status is checkpoint_status's registry section but its servers,
	// which are each downstream's own.
	status *status.Registry
}

// downstream is one server of the registry as the Server holds it.
type downstream struct {
	srv registry.ToolServer
	d   *gateway.Server
	// status is the server's part of checkpoint_status (under
	// Server.mu); served the names it serves now and retired whether
	// a reload replaced or removed it, after which its changes of what
	// is served are ignored (both under Server.downMu).
	status  status.Downstream
	served  map[string]bool
	retired bool
}

// newDownstream is the server srv of the registry opts holds, not yet
// listed.
func (s *Server) newDownstream(opts gateway.Options, srv registry.ToolServer) *downstream {
	h := &downstream{srv: srv, served: map[string]bool{}}
	h.d = gateway.New(srv, s.downstreamDeps(opts, h), s.opts.Sandbox.Name())
	return h
}

// downstreamDeps are the Server's parts the downstream server h uses.
func (s *Server) downstreamDeps(opts gateway.Options, h *downstream) gateway.Deps {
	return gateway.Deps{
		Options:     opts,
		Version:     s.opts.Version,
		Log:         s.log,
		Audit:       s.audit,
		CallID:      s.nextID,
		Egress:      func(rec *audit.Call) func(egress.Record) { return audit.EgressRecorder(s.auditLog, rec) },
		KeepEscapes: func(tool string) bool { return s.keepEscapes[tool] },
		Stopping:    s.stopping.Load,
		Pin:         func(r audit.Pin) { r.Write(s.auditLog) },
		Update:      func(put []gateway.Entry, drop []string) { s.updateDownstream(h, put, drop) },
		SetStatus: func(ds status.Downstream) {
			s.mu.Lock()
			defer s.mu.Unlock()
			h.status = ds
		},
	}
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
	st.Servers = make([]status.Downstream, 0, len(s.down.servers))
	for _, h := range s.down.servers {
		st.Servers = append(st.Servers, h.status)
	}
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
func (s *Server) StartDownstream(ctx context.Context, opts gateway.Options) {
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

// listing reports whether the discovery StartDownstream began is under
// way.
func (s *Server) listing() bool {
	if s.listed == nil {
		return false
	}
	select {
	case <-s.listed:
		return false
	default:
		return true
	}
}

// serves reports whether a tool of that name is served now (has its
// handler): a downstream tool's name is reserved before its server is
// listed, and served only after.
func (s *Server) serves(name string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.ContainsFunc(s.served, func(t status.Tool) bool { return t.Name == name })
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
func (s *Server) ConnectDownstream(ctx context.Context, opts gateway.Options) {
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
	s.down = &downstreamSet{opts: opts, status: st}
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
	// The names are the servers' from before they are listed: a reload
	// of tools.conf meanwhile cannot take one (Reload's dropTaken).
	s.reloads.mu.Lock()
	errs := registry.Collisions(r.Servers, s.registryTaken())
	if len(errs) == 0 {
		for _, srv := range r.Servers {
			s.reserve(srv)
		}
	}
	s.reloads.mu.Unlock()
	if len(errs) > 0 {
		s.refuseRegistry(st, errs)
		return
	}
	downs := make([]*downstream, 0, len(r.Servers))
	for _, srv := range r.Servers {
		downs = append(downs, s.newDownstream(opts, srv))
	}
	s.discover(ctx, downs)
	s.mu.Lock()
	s.down.servers = downs
	s.mu.Unlock()
	for _, h := range downs {
		h.d.Register()
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

// Close stops every downstream server (and everything each started) and
// closes the HTTP sessions; no server is started after it began. ServeStdio
// calls it as soon as its input ends, before it waits for the calls in
// flight; calling it again is harmless.
func (s *Server) Close() {
	s.closeMu.Lock()
	s.stopping.Store(true)
	s.closeMu.Unlock()
	s.endLife()
	if s.stopDiscovery != nil {
		s.stopDiscovery()
		<-s.listed
	}
	s.reloading.Wait() // a reload of the registry sees stopping and starts nothing
	s.mu.RLock()
	var servers []*downstream
	if s.down != nil {
		servers = slices.Clone(s.down.servers)
	}
	s.mu.RUnlock()
	var wg sync.WaitGroup
	for _, h := range servers {
		wg.Go(h.d.Shutdown)
	}
	wg.Wait()
	s.retiring.Wait()
}

// discover lists the servers downs, in parallel (gateway.Server.Discover).
func (s *Server) discover(ctx context.Context, downs []*downstream) {
	var wg sync.WaitGroup
	for _, h := range downs {
		wg.Go(func() { h.d.Discover(ctx) })
	}
	wg.Wait()
}

// reserve gives every tool the server may serve its place in tools/list
// (servers by id, tools in enabled_tools order), so that a tool withheld
// and served again comes back where it was, and its policy resource.
func (s *Server) reserve(srv registry.ToolServer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tool := range srv.EnabledTools {
		name := srv.ServedName(tool)
		if _, ok := s.order[name]; !ok {
			s.order[name] = len(s.order)
		}
		s.resources[name] = policy.Downstream(name, srv)
	}
}

// updateDownstream changes what is served of the downstream server h's
// tools: put are served (added, or replacing the definition served under
// the same name), drop withdrawn. mcp-go sends every session
// notifications/tools/list_changed (New declares listChanged). A retired
// server changes nothing: the server that replaced it owns its names.
func (s *Server) updateDownstream(h *downstream, put []gateway.Entry, drop []string) {
	if len(put) == 0 && len(drop) == 0 {
		return
	}
	s.downMu.Lock()
	defer s.downMu.Unlock()
	if h.retired {
		return
	}
	tools := make([]mcpserver.ServerTool, 0, len(put))
	s.mu.Lock()
	served := slices.DeleteFunc(s.served, func(t status.Tool) bool {
		return slices.Contains(drop, t.Name) || slices.ContainsFunc(put, func(e gateway.Entry) bool { return e.Tool.Name == t.Name })
	})
	for _, e := range put {
		if _, ok := s.order[e.Tool.Name]; !ok {
			s.order[e.Tool.Name] = len(s.order)
		}
		tools = append(tools, mcpserver.ServerTool{Tool: e.Tool, Handler: e.Handler})
		served = append(served, e.Status)
		h.served[e.Tool.Name] = true
	}
	for _, name := range drop {
		delete(h.served, name)
	}
	slices.SortStableFunc(served, func(a, b status.Tool) int { return s.order[a.Name] - s.order[b.Name] })
	s.served = served
	s.mu.Unlock()
	if len(drop) > 0 {
		s.mcp.DeleteTools(drop...)
	}
	if len(tools) > 0 {
		s.mcp.AddTools(tools...)
	}
}
