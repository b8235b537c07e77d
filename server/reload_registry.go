package server

// A reload of the tool-MCP registry (its fragments or its pins): each
// downstream server is kept, replaced or removed as the new registry says,
// without a restart and without touching the others. It is a reload of its
// own (ReloadRegistry), beside Reload: listing a new server takes up to its
// startup_timeout_sec, and no reload of tools.conf, the tokens or the
// policy waits for that.

import (
	"maps"
	"reflect"
	"slices"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/status"
)

// refusedRegistryEffect is what serves on after a refused registry: as at
// start-up, no downstream server.
const refusedRegistryEffect = "every downstream server is disabled, as at start-up; built-in and tools.conf tools are unaffected"

// RegistryLoader reads the registry as serve does, its served names kept
// from taken (registry.Options.Taken) beside the conf c served now.
type RegistryLoader func(taken map[string]string, c *conf.Config) *registry.Registry

// registryPlan is what a reload of the registry r does to the servers
// served before it.
type registryPlan struct {
	r    *registry.Registry
	errs []error               // why r is refused; then nothing is served of it
	next []registry.ToolServer // the servers to serve
	kept map[string]*downstream
	// fresh are the servers of next that are new or changed, made (and
	// listed) by the reload; retired those removed or changed.
	fresh, retired []*downstream
}

// ReloadRegistry reads the registry again with load and serves it from
// now on. A server whose entry and pins are unchanged keeps running,
// untouched; a new or changed one is listed first (each within its
// startup_timeout_sec, while the old one still serves) and then takes its
// tools' names at once; a server removed or replaced is retired: no call
// enters it from then on, its tools leave tools/list (unless its
// successor serves them), the calls in it finish, and it is stopped. A
// refused registry (or one whose served names collide with the built-ins'
// and externals' served now) disables every downstream server, as at
// start-up: it fails closed, loudly. Reloads of the registry are one at a
// time, each reading the directory as it is when its turn comes; it is
// its own generation of checkpoint_status's reload and its own audit
// record. ok is false, and nothing is done, when nothing changed or
// Close has begun.
func (s *Server) ReloadRegistry(trigger string, load RegistryLoader) (rec status.Reload, ok bool) {
	if !s.enterReload() {
		return rec, false
	}
	defer s.reloading.Done()
	s.regMu.Lock()
	defer s.regMu.Unlock()
	s.waitListed(s.life)
	s.mu.RLock()
	ds := s.down
	s.mu.RUnlock()
	if ds == nil {
		return rec, false // no registry served (a test's server): nothing to reload
	}
	s.reloads.mu.Lock()
	taken := s.registryTaken()
	c := s.conf.Load()
	s.reloads.mu.Unlock()
	p := s.planRegistry(ds, load(taken, c), taken)
	if s.unchanged(ds, p) {
		return rec, false
	}
	s.discover(s.life, p.fresh)

	s.reloads.mu.Lock()
	defer s.reloads.mu.Unlock()
	if s.stopping.Load() {
		for _, h := range p.fresh {
			h.d.Shutdown()
		}
		return rec, false
	}
	if errs := registry.Collisions(p.next, s.registryTaken()); len(errs) > 0 && len(p.errs) == 0 {
		// A reload of tools.conf took one of its names while it listed.
		for _, h := range p.fresh {
			h.d.Shutdown()
		}
		p = registryPlan{r: p.r, errs: errs, kept: map[string]*downstream{}, retired: ds.servers}
	}
	rec = status.Reload{Trigger: trigger, Changed: []string{"registry"}}
	s.applyRegistry(ds, p, &rec)
	s.record(&rec)
	return rec, true
}

// unchanged reports whether p serves what ds serves already: no server
// new, changed or gone, and the registry's state the same and not
// refused (a refusal is always reported).
func (s *Server) unchanged(ds *downstreamSet, p registryPlan) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(p.fresh) == 0 && len(p.retired) == 0 && len(p.errs) == 0 && ds.status.State == string(p.r.State)
}

// enterReload counts a reload of the registry in; false once Close has
// begun.
func (s *Server) enterReload() bool {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.stopping.Load() {
		return false
	}
	s.reloading.Add(1)
	return true
}

// registryTaken are the names the registry may not serve, at start and
// on a reload: those of the built-ins and of the tools.conf served now
// (and of every built-in and external served, so that a registry loaded
// without registry.Options.Taken, as in tests, is held to the same
// rule), but the names the downstream servers hold (a reload of
// tools.conf withheld the externals of those names: the server serving
// a name keeps it). s.reloads.mu is held.
func (s *Server) registryTaken() map[string]string {
	taken := registry.TakenNames(builtin.Names(), s.conf.Load())
	for _, name := range s.reloads.base {
		if _, ok := taken[name]; !ok {
			taken[name] = "the built-in tool"
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for name := range s.order {
		if !slices.Contains(s.reloads.base, name) {
			delete(taken, name)
		}
	}
	return taken
}

// planRegistry sorts the servers of ds against those r serves (none when
// r is refused or collides with taken).
func (s *Server) planRegistry(ds *downstreamSet, r *registry.Registry, taken map[string]string) registryPlan {
	p := registryPlan{r: r, errs: r.Errors, kept: map[string]*downstream{}}
	if r.State == conf.StateLoaded {
		p.errs = registry.Collisions(r.Servers, taken)
	}
	if len(p.errs) == 0 && r.State == conf.StateLoaded {
		p.next = r.Servers
	}
	for _, h := range ds.servers {
		i := slices.IndexFunc(p.next, func(srv registry.ToolServer) bool { return srv.ID == h.srv.ID })
		if i >= 0 && sameServer(h.srv, p.next[i]) && samePins(ds.opts.Registry, r, h.srv.ID) {
			p.kept[h.srv.ID] = h
			continue
		}
		p.retired = append(p.retired, h)
	}
	opts := ds.opts
	opts.Registry = r
	for _, srv := range p.next {
		if _, ok := p.kept[srv.ID]; !ok {
			p.fresh = append(p.fresh, s.newDownstream(opts, srv))
		}
	}
	return p
}

// applyRegistry serves p: the retired servers take no call from now on,
// the fresh ones serve in their place, what only the retired served
// leaves tools/list, and the retired drain their calls and stop beside
// serving. rec gets what changed. s.reloads.mu is held.
func (s *Server) applyRegistry(ds *downstreamSet, p registryPlan, rec *status.Reload) {
	before := s.downstreamServed(ds.servers)
	s.downMu.Lock()
	for _, h := range p.retired {
		h.retired = true
		h.d.Retire()
	}
	s.downMu.Unlock()
	servers := make([]*downstream, 0, len(p.next))
	for _, srv := range p.next {
		if h, ok := p.kept[srv.ID]; ok {
			servers = append(servers, h)
			continue
		}
		servers = append(servers, p.fresh[slices.IndexFunc(p.fresh, func(h *downstream) bool { return h.srv.ID == srv.ID })])
	}
	opts := ds.opts
	opts.Registry = p.r
	s.mu.Lock()
	ds.opts, ds.servers = opts, servers
	*ds.status = status.Registry{Dir: p.r.Dir, State: string(p.r.State), Reason: p.r.Reason, RequirePins: opts.RequirePins}
	if p.r.Pins != nil {
		ds.status.Pins = p.r.Pins.Path
	}
	s.mu.Unlock()
	for _, h := range p.fresh {
		s.reserve(h.srv)
		h.d.Register()
	}
	s.dropOrphans(p.retired, servers)
	s.noteRegistryReload(p, before, s.downstreamServed(servers), rec)
	for _, h := range p.retired {
		s.retiring.Go(h.d.Drain)
	}
}

// sameServer reports whether a and b run and serve alike: only where
// their entries are written (and which fragment an override replaces)
// may differ.
func sameServer(a, b registry.ToolServer) bool {
	unplaced := func(srv registry.ToolServer) registry.ToolServer {
		srv.Fragment, srv.Line, srv.Replaces = "", 0, nil
		srv.Credentials = slices.Clone(srv.Credentials)
		for i := range srv.Credentials {
			srv.Credentials[i].Line = 0
		}
		return srv
	}
	return reflect.DeepEqual(unplaced(a), unplaced(b))
}

// samePins reports whether the server id has the same pins in a and b.
func samePins(a, b *registry.Registry, id string) bool {
	pins := func(r *registry.Registry) map[string]registry.Pin {
		if r == nil || r.Pins == nil {
			return nil
		}
		return r.Pins.Servers[id]
	}
	pa, pb := pins(a), pins(b)
	return len(pa) == len(pb) && maps.EqualFunc(pa, pb, func(x, y registry.Pin) bool {
		return x.SHA256 == y.SHA256 && string(x.Definition) == string(y.Definition)
	})
}

// downstreamServed is the set of names the servers serve now.
func (s *Server) downstreamServed(servers []*downstream) map[string]bool {
	s.downMu.Lock()
	defer s.downMu.Unlock()
	out := map[string]bool{}
	for _, h := range servers {
		maps.Copy(out, h.served)
	}
	return out
}

// dropOrphans withdraws what the retired servers served that no server
// of servers serves now, and forgets the names none of them may serve.
func (s *Server) dropOrphans(retired, servers []*downstream) {
	s.downMu.Lock()
	defer s.downMu.Unlock()
	live, enabled := map[string]bool{}, map[string]bool{}
	for _, h := range servers {
		maps.Copy(live, h.served)
		for _, tool := range h.srv.EnabledTools {
			enabled[h.srv.ServedName(tool)] = true
		}
	}
	var drop []string
	s.mu.Lock()
	for _, h := range retired {
		for name := range h.served {
			if !live[name] {
				drop = append(drop, name)
			}
		}
		for _, tool := range h.srv.EnabledTools {
			if name := h.srv.ServedName(tool); !enabled[name] {
				delete(s.order, name)
				delete(s.resources, name)
			}
		}
	}
	s.served = slices.DeleteFunc(s.served, func(t status.Tool) bool { return slices.Contains(drop, t.Name) })
	s.mu.Unlock()
	if len(drop) > 0 {
		slices.Sort(drop)
		s.mcp.DeleteTools(drop...)
	}
}

// noteRegistryReload adds to rec what the reload p changed of the
// downstream tools served (before and after it), and its refusal; and
// logs it.
func (s *Server) noteRegistryReload(p registryPlan, before, after map[string]bool, rec *status.Reload) {
	replaced := map[string]bool{}
	for _, h := range p.retired {
		for _, tool := range h.srv.EnabledTools {
			replaced[h.srv.ServedName(tool)] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(after)) {
		switch {
		case !before[name]:
			rec.Added = append(rec.Added, name)
		case replaced[name]:
			rec.Replaced = append(rec.Replaced, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(before)) {
		if !after[name] {
			rec.Removed = append(rec.Removed, name)
		}
	}
	e := s.log.WithFields(logrus.Fields{"registry": p.r.Dir, "state": p.r.State, "retired": len(p.retired), "started": len(p.fresh)})
	if len(p.errs) == 0 {
		e.Info("tool-mcp registry reloaded")
		return
	}
	rec.Refused = append(rec.Refused, status.Refusal{File: "registry", Path: p.r.Dir, Reason: p.errs[0].Error(), Effect: refusedRegistryEffect})
	s.updateStatus(func(st *status.Registry) {
		st.State = string(conf.StateRefused)
		for _, err := range p.errs {
			st.Errors = append(st.Errors, err.Error())
		}
	})
	for _, err := range p.errs {
		e.WithField("reason", err.Error()).Error("tool-mcp registry refused on reload")
	}
	e.Error("tool-mcp registry refused on reload: " + refusedRegistryEffect)
}
