package server

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/status"
)

// Snapshot is what a reload hands the server: the configuration that new
// calls see from now on, and what the reload saw of its files.
type Snapshot struct {
	// Conf is the tools.conf to serve, in any state: a refused one
	// serves no external (as at start).
	Conf *conf.Config
	// Policy is the policy engine to decide with (the last good one when
	// a policy file was refused); nil serves every tool to everyone.
	Policy *policy.Engine
	// Trigger, Changed and Refused are reported as they are
	// (status.Reload).
	Trigger string
	Changed []string
	Refused []status.Refusal
}

// reloadState is what Reload keeps between reloads.
type reloadState struct {
	mu         sync.Mutex // serialises Reload
	generation int
	// base are the built-ins' and externals' names served, in order;
	// externals the externals' definitions.
	base      []string
	externals map[string]conf.Tool
	last      atomic.Pointer[status.Reload]
}

// setBase records the built-ins and externals entries serve of c.
func (r *reloadState) setBase(c *conf.Config, entries []entry) {
	r.base = r.base[:0]
	r.externals = map[string]conf.Tool{}
	for _, e := range entries {
		r.base = append(r.base, e.tool.Name)
	}
	if c == nil {
		return
	}
	for _, t := range c.Tools {
		if slices.Contains(r.base, t.Name) {
			r.externals[t.Name] = t
		}
	}
}

// Reload serves snap from now on: the externals (and the built-ins
// `expose` hides) of its conf replace the old ones, its policy decides
// the next listing and call. A call already running finishes under the
// tool and policy it started with. Every session gets
// notifications/tools/list_changed when what it may list can have
// changed. Each reload is an audit record and checkpoint_status's
// reload field.
func (s *Server) Reload(snap Snapshot) status.Reload {
	s.reloads.mu.Lock()
	defer s.reloads.mu.Unlock()
	oldBase, oldExternals := slices.Clone(s.reloads.base), s.reloads.externals
	rec := status.Reload{Trigger: snap.Trigger, Changed: snap.Changed, Refused: slices.Clone(snap.Refused)}
	entries, resources := s.baseEntries(snap.Conf)
	entries = s.dropTaken(snap.Conf, entries, resources, oldBase, &rec)
	s.reloads.setBase(snap.Conf, entries)
	var put []mcpserver.ServerTool
	for _, e := range entries {
		name := e.tool.Name
		old, wasExternal := oldExternals[name]
		switch {
		case !slices.Contains(oldBase, name):
			rec.Added = append(rec.Added, name)
		case e.status.Kind == status.KindExternal && (!wasExternal || !sameTool(old, s.reloads.externals[name])):
			rec.Replaced = append(rec.Replaced, name)
		default:
			continue
		}
		put = append(put, mcpserver.ServerTool{Tool: e.tool, Handler: e.handler})
	}
	for _, name := range oldBase {
		if !slices.Contains(s.reloads.base, name) {
			rec.Removed = append(rec.Removed, name)
		}
	}
	oldPolicy := s.swapBase(snap, oldBase, entries, resources)
	// Added before removed: a tool served by both confs is never absent.
	if len(put) > 0 {
		s.mcp.AddTools(put...)
	}
	if len(rec.Removed) > 0 {
		s.mcp.DeleteTools(rec.Removed...)
	}
	if len(put) == 0 && len(rec.Removed) == 0 && oldPolicy != snap.Policy {
		s.mcp.SendNotificationToAllClients(string(mcp.MethodNotificationToolsListChanged), nil)
	}
	s.record(&rec)
	return rec
}

// record numbers rec, the reload just applied, and makes it
// checkpoint_status's reload field and an audit record. s.reloads.mu is
// held.
func (s *Server) record(rec *status.Reload) {
	s.reloads.generation++
	rec.Generation = s.reloads.generation
	rec.At = time.Now().UTC().Format(time.RFC3339)
	s.reloads.last.Store(rec)
	audit.Reload{
		Generation: rec.Generation, Trigger: rec.Trigger, Changed: rec.Changed, Refused: rec.Refused,
		Added: rec.Added, Removed: rec.Removed, Replaced: rec.Replaced,
	}.Write(s.auditLog)
}

// dropTaken withholds the externals whose names a downstream server's
// tools hold (at start the registry refuses those; a reload cannot
// take a name from a server already serving it), each a refusal of rec.
func (s *Server) dropTaken(c *conf.Config, entries []entry, resources map[string]policy.Tool, oldBase []string, rec *status.Reload) []entry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.DeleteFunc(entries, func(e entry) bool {
		_, held := s.order[e.tool.Name]
		if !held || slices.Contains(oldBase, e.tool.Name) {
			return false
		}
		delete(resources, e.tool.Name)
		rec.Refused = append(rec.Refused, status.Refusal{
			File: "tools.conf", Path: c.Path, Reason: fmt.Sprintf("tool %q: the name of a downstream server's tool", e.tool.Name),
			Effect: "that tool is not served; the downstream tool keeps its name",
		})
		return true
	})
}

// sameTool reports whether a and b serve and run alike: only where
// their lines are in the file may differ.
func sameTool(a, b conf.Tool) bool {
	a.Line, a.EgressLine, a.EnvLine = 0, 0, 0
	b.Line, b.EgressLine, b.EnvLine = 0, 0, 0
	return reflect.DeepEqual(a, b)
}

// swapBase replaces the built-ins and externals of oldBase with entries
// in the tools/list order, status and policy resources, and the conf and
// the policy with snap's, in one critical section of s.mu (decide reads
// a resource and the policy in one); the downstream tools keep their
// places after them. It returns the policy replaced.
func (s *Server) swapBase(snap Snapshot, oldBase []string, entries []entry, resources map[string]policy.Tool) *policy.Engine {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conf.Store(snap.Conf)
	old := s.policy.Swap(snap.Policy)
	down := make([]string, 0, len(s.order))
	for name := range s.order {
		if !slices.Contains(oldBase, name) {
			down = append(down, name)
		}
	}
	slices.SortFunc(down, func(a, b string) int { return s.order[a] - s.order[b] })
	order := make(map[string]int, len(entries)+len(down))
	served := make([]status.Tool, 0, len(entries)+len(s.served))
	for _, e := range entries {
		order[e.tool.Name] = len(order)
		served = append(served, e.status)
	}
	for _, name := range down {
		order[name] = len(order)
	}
	for _, t := range s.served {
		if !slices.Contains(oldBase, t.Name) {
			served = append(served, t)
		}
	}
	for _, name := range oldBase {
		delete(s.resources, name)
	}
	maps.Copy(s.resources, resources)
	s.order, s.served = order, served
	return old
}
