package gateway

// Listing downstream servers without serving them: what `toolgate
// registry pin` pins and `toolgate registry validate --live` compares.
// Each server is started (sandboxed) or connected to exactly as serve
// does, listed, judged as serve would judge its start-up listing, and
// stopped.

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/status"
)

// LiveOptions configure ListLive.
type LiveOptions struct {
	// Downstream are serve's options of the registry: its servers, what
	// runs them, --require-pins.
	Downstream Options
	// Sandbox names the sandbox backend (for descriptions and logs).
	Sandbox string
	// Version is toolgate's, sent in the MCP handshake.
	Version string
	// Log receives the servers' messages (their stderr, starts, ends).
	Log *logrus.Logger
	// Audit receives the egress records of servers with allowed_hosts;
	// nil means Log.
	Audit *logrus.Logger
}

// LiveServer is what ListLive found of one server.
type LiveServer struct {
	Server registry.ToolServer
	// Backend runs it: bwrap, direct, http, ...
	Backend string
	// Err is why it could not be listed (it cannot run here, it did not
	// start or answer, its tools/list failed); Tools is then empty.
	Err error
	// Offered is the number of tools it listed, enabled or not.
	Offered int
	// Tools are its enabled tools, in enabled_tools order.
	Tools []LiveTool
}

// LiveTool is one enabled tool of a listed server.
type LiveTool struct {
	// Name is the downstream name; Served the name serve serves it under.
	Name, Served string
	// Offered: the server listed it.
	Offered bool
	// Definition is the listed definition in canonical JSON (what a pin
	// approves), SHA256 its digest; nil when not offered, or when it
	// could not be read.
	Definition []byte
	SHA256     string
	// Refused is why serve would not serve it whatever its pin (not
	// offered, over the size cap, listed twice, text a reviewer cannot
	// see, a schema that is not an object, its served name); such a
	// definition is not pinned.
	Refused string
	// Pin is how the definition compares with its pin (State "" when it
	// was not compared: refused).
	Pin registry.PinCheck
	// Serve says whether serve would serve it at start-up, and Reason why
	// not (or the warning of a tool served without a pin).
	Serve  bool
	Reason string
}

// ListLive starts (stdio, under the backend serve would use) or connects
// to (HTTP) each server of opts.Downstream.Registry that ids names (every
// server when ids is empty), in parallel, each within its
// startup_timeout_sec; lists its tools; judges each enabled tool as serve
// would at start-up; and stops the server. Nothing is served. An id the
// registry does not have is an error.
func ListLive(ctx context.Context, opts LiveOptions, ids []string) ([]LiveServer, error) {
	r := opts.Downstream.Registry
	if r == nil || r.State != conf.StateLoaded {
		return nil, fmt.Errorf("the registry is not loaded")
	}
	var servers []registry.ToolServer
	for _, id := range ids {
		s, ok := r.Server(id)
		if !ok {
			return nil, fmt.Errorf("no server %q in %s", id, r.Dir)
		}
		if !slices.ContainsFunc(servers, func(t registry.ToolServer) bool { return t.ID == id }) {
			servers = append(servers, s)
		}
	}
	if len(ids) == 0 {
		servers = r.Servers
	}
	if opts.Audit == nil {
		opts.Audit = opts.Log
	}
	deps := Deps{
		Options:     opts.Downstream,
		Version:     opts.Version,
		Log:         opts.Log,
		Audit:       func(*audit.Call, string) {},
		CallID:      func() string { return "" },
		KeepEscapes: func(string) bool { return false },
		Stopping:    func() bool { return false },
		Egress:      func(rec *audit.Call) func(egress.Record) { return audit.EgressRecorder(opts.Audit, rec) },
		Pin:         func(audit.Pin) {},
		Update:      func([]Entry, []string) {},
		SetStatus:   func(status.Downstream) {},
	}
	out := make([]LiveServer, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() {
			out[i] = listLive(ctx, New(srv, deps, opts.Sandbox))
		})
	}
	wg.Wait()
	return out, nil
}

// listLive lists one server and judges its enabled tools.
func listLive(ctx context.Context, d *Server) LiveServer {
	ls := LiveServer{Server: d.srv, Backend: d.backend}
	if d.unavailable != nil {
		ls.Err = fmt.Errorf("it cannot run here: %w", d.unavailable)
		return ls
	}
	c, err := d.connect(ctx)
	if err != nil {
		ls.Err = err
		return ls
	}
	lctx, cancel := context.WithTimeout(ctx, d.srv.StartupTimeout)
	l, err := listTools(lctx, c.client, d.srv.Enabled)
	cancel()
	d.close(c, "listed", closeGrace)
	if err != nil {
		ls.Err = fmt.Errorf("tools/list: %s", d.redact(err.Error()))
		return ls
	}
	ls.Offered = l.offered
	for _, tool := range d.srv.EnabledTools {
		lt := LiveTool{Name: tool, Served: d.srv.ServedName(tool)}
		rt, _, refused, reason := d.examine(tool, l)
		lt.Offered = refused != refusedNotOffered
		lt.Definition, lt.SHA256 = rt.canonical, rt.digest
		if problem, bad := registry.ClientNameIssue(lt.Served); bad {
			refused, reason = refusedTool, problem
		}
		if refused != "" {
			lt.Refused, lt.Reason = reason, reason
			ls.Tools = append(ls.Tools, lt)
			continue
		}
		v := d.judge(&toolState{}, tool, l)
		lt.Pin = d.pins().Check(d.srv.ID, tool, rt.canonical, rt.digest)
		lt.Serve, lt.Reason = v.serve, v.reason
		lt.Pin.Diff = v.diff
		ls.Tools = append(ls.Tools, lt)
	}
	return ls
}
