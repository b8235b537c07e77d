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

// collisions applies registry.Collisions to the names this server serves
// already (a registry loaded without registry.Options.Taken, as in tests,
// is held to the same rule).
func (s *Server) collisions(r *registry.Registry) []error {
	s.mu.RLock()
	taken := registry.TakenNames(nil, s.opts.Conf)
	for name := range s.order {
		if _, ok := taken[name]; !ok {
			taken[name] = "the built-in tool"
		}
	}
	s.mu.RUnlock()
	return registry.Collisions(r.Servers, taken)
}

// downstreamSet is the Server's part for downstream servers. servers and
// status are written by ConnectDownstream under Server.mu.
type downstreamSet struct {
	servers []*gateway.Server
	status  *status.Registry
}

// downstreamDeps are the Server's parts the downstream server at index
// i of the registry uses.
func (s *Server) downstreamDeps(opts gateway.Options, i int) gateway.Deps {
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
		Update:      s.updateDownstream,
		SetStatus: func(ds status.Downstream) {
			s.updateStatus(func(st *status.Registry) { st.Servers[i] = ds })
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
	downs := make([]*gateway.Server, 0, len(r.Servers))
	for i, srv := range r.Servers {
		downs = append(downs, gateway.New(srv, s.downstreamDeps(opts, i), s.opts.Sandbox.Name()))
	}
	var wg sync.WaitGroup
	for _, d := range downs {
		wg.Go(func() { d.Discover(ctx) })
	}
	wg.Wait()
	for i, d := range downs {
		s.reserve(r.Servers[i])
		s.updateStatus(func(st *status.Registry) {
			s.down.servers = append(s.down.servers, d)
			st.Servers = append(st.Servers, status.Downstream{})
		})
		d.Register()
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
		wg.Go(d.Shutdown)
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

// updateDownstream changes what is served of the downstream tools: put are
// served (added, or replacing the definition served under the same name),
// drop withdrawn. mcp-go sends every session
// notifications/tools/list_changed (New declares listChanged).
func (s *Server) updateDownstream(put []gateway.Entry, drop []string) {
	if len(put) == 0 && len(drop) == 0 {
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
