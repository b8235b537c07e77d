package gateway

// Which backend runs a downstream server: an HTTP server runs elsewhere; a
// stdio server runs under the sandbox backend when that can run services,
// directly only when its entry says sandbox = false, and never falls back
// from one to the other.

import (
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/conf/registry"
	rt "github.com/toolgate/toolgate/runtime"
)

// ErrNeedsBwrap is the reason a sandboxed stdio server cannot run with a
// sandbox backend that does not run services (the OCI backend).
var ErrNeedsBwrap = errors.New("downstream servers need the bwrap backend")

// New is the server srv of the registry, run by the backend its
// entry and deps.Options choose (sandbox names the sandbox backend).
func New(srv registry.ToolServer, deps Deps, sandbox string) *Server {
	d := &Server{deps: deps, srv: srv, backend: "http", starting: make(chan struct{}, 1), tools: map[string]*toolState{}}
	for _, tool := range srv.EnabledTools {
		d.tools[tool] = &toolState{}
	}
	opts := deps.Options
	if !srv.SupportsParallelToolCalls {
		d.slot = make(chan struct{}, 1)
	}
	if srv.Transport == registry.TransportStdio {
		switch {
		case !srv.Sandbox:
			d.backend, d.starter = string(rt.BackendDirect), opts.DirectServices
			if d.starter == nil {
				d.unavailable = errors.New("no direct service runner configured")
			}
		case opts.Services != nil:
			d.backend, d.starter = sandbox, opts.Services
		default:
			d.backend = sandbox
			d.unavailable = opts.ServicesErr
			if d.unavailable == nil {
				d.unavailable = fmt.Errorf("%w; the %s backend cannot run them", ErrNeedsBwrap, sandbox)
			}
		}
	}
	d.log = deps.Log.WithFields(logrus.Fields{"server": srv.ID, "transport": srv.Transport, "backend": d.backend})
	return d
}

// sandboxState says how the server runs, for status and descriptions.
func (d *Server) sandboxState() string { return d.srv.SandboxState() }
