package server

// Which backend runs a downstream server: an HTTP server runs elsewhere; a
// stdio server runs under the sandbox backend when that can run services,
// directly only when its entry says sandbox = false, and never falls back
// from one to the other.

import (
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/conf"
	rt "github.com/toolgate/toolgate/runtime"
)

// ErrNeedsBwrap is the reason a sandboxed stdio server cannot run with a
// sandbox backend that does not run services (the OCI backend).
var ErrNeedsBwrap = errors.New("downstream servers need the bwrap backend")

func (s *Server) newDownstream(srv conf.ToolServer) *downstream {
	d := &downstream{s: s, srv: srv, backend: "http", starting: make(chan struct{}, 1)}
	if !srv.SupportsParallelToolCalls {
		d.slot = make(chan struct{}, 1)
	}
	if srv.Transport == conf.TransportStdio {
		switch {
		case !srv.Sandbox:
			d.backend, d.starter = string(rt.BackendDirect), s.down.opts.DirectServices
			if d.starter == nil {
				d.unavailable = errors.New("no direct service runner configured")
			}
		case s.down.opts.Services != nil:
			d.backend, d.starter = s.opts.Sandbox.Name(), s.down.opts.Services
		default:
			d.backend = s.opts.Sandbox.Name()
			d.unavailable = s.down.opts.ServicesErr
			if d.unavailable == nil {
				d.unavailable = fmt.Errorf("%w; the %s backend cannot run them", ErrNeedsBwrap, s.opts.Sandbox.Name())
			}
		}
	}
	d.log = s.log.WithFields(logrus.Fields{"server": srv.ID, "transport": srv.Transport, "backend": d.backend})
	return d
}

// sandboxState says how the server runs, for status and descriptions.
func (d *downstream) sandboxState() string {
	switch {
	case d.srv.Transport != conf.TransportStdio:
		return "-"
	case !d.srv.Sandbox:
		return "off"
	case d.srv.Network:
		return "on, network"
	}
	return "on, no network"
}
