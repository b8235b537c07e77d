package server

// A reload of the tool-MCP registry (its fragments or its pins): each
// downstream server is kept, replaced or removed as the new registry says,
// without a restart and without touching the others.

import (
	"context"
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

// reloadRegistry serves the registry load reads (given the names it may
// not take) from now on. A server whose entry and pins are
// unchanged keeps running, untouched; a new or changed one is listed
// first (each within its startup_timeout_sec, while the old one still
// serves) and then takes its tools' names at once; a server removed or
// replaced is retired: its tools leave tools/list (unless its successor
// serves them), the calls in it finish, and it is stopped. A refused
// registry (or one whose served names collide with the built-ins' and
// externals' served now) disables every downstream server, as at
// start-up: it fails closed, loudly.
func (s *Server) reloadRegistry(load func(taken map[string]string) *registry.Registry, rec *status.Reload) {
	s.waitListed(context.Background())
	taken := s.registryTaken()
	r := load(taken)
	s.mu.RLock()
	ds := s.down
	s.mu.RUnlock()
	if ds == nil {
		return // no registry served (a test's server): nothing to reload
	}
	opts := ds.opts
	opts.Registry = r
	errs := r.Errors
	if r.State == conf.StateLoaded {
		errs = registry.Collisions(r.Servers, taken)
	}
	var next []registry.ToolServer
	if len(errs) == 0 && r.State == conf.StateLoaded {
		next = r.Servers
	}
	kept, fresh, retired := s.sortServers(ds, r, next)
	s.discover(context.Background(), fresh)

	before := s.downstreamServed(ds.servers)
	s.downMu.Lock()
	for _, h := range retired {
		h.retired = true
	}
	s.downMu.Unlock()
	servers := make([]*downstream, 0, len(next))
	for _, srv := range next {
		if h, ok := kept[srv.ID]; ok {
			servers = append(servers, h)
			continue
		}
		i := slices.IndexFunc(fresh, func(h *downstream) bool { return h.srv.ID == srv.ID })
		servers = append(servers, fresh[i])
	}
	s.mu.Lock()
	ds.opts, ds.servers = opts, servers
	*ds.status = status.Registry{Dir: r.Dir, State: string(r.State), Reason: r.Reason, RequirePins: opts.RequirePins}
	if r.Pins != nil {
		ds.status.Pins = r.Pins.Path
	}
	s.mu.Unlock()
	for _, h := range fresh {
		s.reserve(h.srv)
		h.d.Register()
	}
	s.dropOrphans(retired, servers)
	s.noteRegistryReload(r, errs, before, s.downstreamServed(servers), retired, rec)
	for _, h := range retired {
		s.retiring.Go(h.d.Retire)
	}
}

// registryTaken are the names a reloaded registry may not serve: those
// of the built-ins and of the tools.conf served now, but the names the
// downstream servers hold (a reload of tools.conf withheld the externals
// of those names: the server serving a name keeps it).
func (s *Server) registryTaken() map[string]string {
	taken := registry.TakenNames(builtin.Names(), s.conf.Load())
	s.mu.RLock()
	defer s.mu.RUnlock()
	for name := range s.order {
		if !slices.Contains(s.reloads.base, name) {
			delete(taken, name)
		}
	}
	return taken
}

// sortServers sorts the servers of ds against next, the servers of r to
// serve: kept (by id) are unchanged, fresh the new and changed ones, made
// here and not listed yet, retired those removed or changed.
func (s *Server) sortServers(ds *downstreamSet, r *registry.Registry, next []registry.ToolServer) (kept map[string]*downstream, fresh, retired []*downstream) {
	kept = map[string]*downstream{}
	for _, h := range ds.servers {
		i := slices.IndexFunc(next, func(srv registry.ToolServer) bool { return srv.ID == h.srv.ID })
		if i >= 0 && sameServer(h.srv, next[i]) && samePins(ds.opts.Registry, r, h.srv.ID) {
			kept[h.srv.ID] = h
			continue
		}
		retired = append(retired, h)
	}
	opts := ds.opts
	opts.Registry = r
	for _, srv := range next {
		if _, ok := kept[srv.ID]; !ok {
			fresh = append(fresh, s.newDownstream(opts, srv))
		}
	}
	return kept, fresh, retired
}

// sameServer reports whether a and b run and serve alike: only where
// their entries are written may differ.
func sameServer(a, b registry.ToolServer) bool {
	a.Fragment, a.Line = "", 0
	b.Fragment, b.Line = "", 0
	return reflect.DeepEqual(a, b)
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

// noteRegistryReload adds to rec what the reload of r changed of the
// downstream tools served (before and after it), and its refusal; and
// logs it.
func (s *Server) noteRegistryReload(r *registry.Registry, errs []error, before, after map[string]bool, retired []*downstream, rec *status.Reload) {
	replaced := map[string]bool{}
	for _, h := range retired {
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
	e := s.log.WithFields(logrus.Fields{"registry": r.Dir, "state": r.State, "retired": len(retired)})
	if len(errs) == 0 {
		e.Info("tool-mcp registry reloaded")
		return
	}
	ref := status.Refusal{File: "registry", Path: r.Dir, Reason: errs[0].Error(), Effect: refusedRegistryEffect}
	rec.Refused = append(rec.Refused, ref)
	s.updateStatus(func(st *status.Registry) {
		st.State = string(conf.StateRefused)
		for _, err := range errs {
			st.Errors = append(st.Errors, err.Error())
		}
	})
	for _, err := range errs {
		e.WithField("reason", err.Error()).Error("tool-mcp registry refused on reload")
	}
	e.Error("tool-mcp registry refused on reload: " + refusedRegistryEffect)
}
