package main

import (
	"flag"
	"fmt"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/gateway"
	rt "github.com/toolgate/toolgate/runtime"
)

// minDownstreamMaxBytes is the smallest --downstream-max-bytes: room for
// the truncation marker and some content.
const minDownstreamMaxBytes = 4096

// downstreamFlags are serve's flags of the tool-MCP registry (the
// downstream MCP servers, docs/registry.md).
type downstreamFlags struct {
	dir         string
	eager       bool
	maxBytes    int
	requirePins bool
}

func (f *downstreamFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dir, "tool-mcp-dir", registry.DefaultDir, "directory of the tool-MCP registry's *.toml fragments: the downstream MCP servers to serve")
	fs.BoolVar(&f.eager, "eager", false, "keep every downstream server running from start-up on (default: stop each once its tools are listed, start it again on its first call)")
	fs.BoolVar(&f.requirePins, "require-pins", false, "serve a downstream tool only when it has a pin (toolgate registry pin), as pinned = true does for one server; a pinned tool is served only while its definition matches its pin, either way")
	fs.IntVar(&f.maxBytes, "downstream-max-bytes", gateway.DefaultMaxBytes, "cap on the JSON size of one downstream result; a larger one is cut and marked isError, and a message over max(N, 1 MiB) + 64 KiB is discarded as it is read")
}

// check reports a flag value serve cannot use.
func (f *downstreamFlags) check() error {
	if f.maxBytes < minDownstreamMaxBytes {
		return fmt.Errorf("--downstream-max-bytes %d: want at least %d", f.maxBytes, minDownstreamMaxBytes)
	}
	return nil
}

// options loads the registry and picks what runs its stdio servers: the
// sandbox backend when it can run services (bwrap), never the direct
// runner for a sandboxed server.
func (f *downstreamFlags) options(a *app, backend string) gateway.Options {
	opts := gateway.Options{
		Registry:    registry.Load(f.dir, registry.Options{Taken: registry.TakenNames(builtin.Names(), a.conf), Visible: sandboxVisible, Conf: a.conf}),
		Eager:       f.eager,
		MaxBytes:    f.maxBytes,
		RequirePins: f.requirePins,
	}
	shim, _ := rt.FindShim() // build already required it
	opts.DirectServices = &rt.DirectServices{Cgroups: a.cgroups, Shim: shim}
	state, err := a.opts.Sandbox.State()
	switch {
	case state == rt.SandboxUnavailable:
		opts.ServicesErr = fmt.Errorf("%w: the %s sandbox backend is unavailable: %w", gateway.ErrNeedsBwrap, backend, err)
	case !sandboxBackends[rt.Backend(backend)].services:
		opts.ServicesErr = fmt.Errorf("%w: --backend %s runs tools, not long-lived servers", gateway.ErrNeedsBwrap, backend)
	default:
		opts.Services = a.opts.Sandbox
	}
	return opts
}
