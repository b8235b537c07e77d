package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/policy"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
)

func serve(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var s settings
	var f serveFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	s.register(fs)
	f.register(fs)
	if !parse(fs, args, stderr) {
		return 2
	}
	if err := f.check(); err != nil {
		fmt.Fprintf(stderr, "toolgate serve: %v\n", err)
		return 2
	}
	// SIGHUP reloads (reload.go), from before anything starts: it never
	// stops serve.
	hup, stopHup := hupSignals()
	defer stopHup()
	a, err := s.build(stderr, true)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate serve: %v\n", err)
		return 2
	}
	defer a.close()
	ctx, cancel := signalContext()
	defer cancel()
	life := ctx
	if f.hf.listen != "" {
		// Over HTTP a signal starts a drain (--shutdown-grace): what the
		// calls still running need lives on until it ends.
		var stop context.CancelFunc
		life, stop = context.WithCancel(context.WithoutCancel(ctx))
		defer stop()
	}
	rt.StartReaper(life)

	dopts := f.down.options(a, s.backend)
	if err := f.keep.check(a.conf, dopts.Registry, a.log); err != nil {
		fmt.Fprintf(stderr, "toolgate serve: %v\n", err)
		return 2
	}
	f.setOptions(a)
	if err := f.hf.loadTokens(a); err != nil {
		fmt.Fprintf(stderr, "toolgate serve: %v\n", err)
		return 2
	}
	stopTracing, err := f.tf.start(ctx, a)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate serve: %v\n", err)
		return 2
	}
	defer stopTracing()
	srv := server.New(a.opts)
	// Prepared sandboxes for every served test-class tool (and the
	// built-ins' fixed helper runs), once the backend is ready.
	a.opts.Sandbox.Keep(poolTemplates(a.conf, srv.Served(), a.helperTemplates))
	// Serving starts at once: the sandbox backend's self-test and the
	// downstream servers' listing run beside it (a sandboxed call waits
	// for the self-test, tools/list for the listing).
	srv.StartDownstream(life, dopts)
	defer srv.Close()
	go newReloader(a, srv, &s, &f).run(ctx, hup)
	if f.hf.listen != "" {
		return serveHTTP(ctx, a, srv, &f.hf, f.maxRequest, stderr)
	}
	killed := make(chan int, 1)
	stop := context.AfterFunc(ctx, func() { killed <- srv.InFlight() })
	a.log.WithField("tools", len(srv.Served())).Info("serving MCP on stdio")
	err = srv.ServeStdio(ctx, stdin, stdout)
	if err != nil && !errors.Is(err, context.Canceled) {
		a.log.WithError(err).Error("stdio")
		return 1
	}
	if stop() {
		a.log.Info("stdin closed: exiting")
	} else if n := <-killed; n > 0 {
		a.log.WithField("calls", n).Warn("signal: in-flight calls killed, exiting")
	} else {
		a.log.Info("signal: exiting")
	}
	return 0
}

// serveFlags are serve's flags beyond the settings every subcommand
// shares.
type serveFlags struct {
	down       downstreamFlags
	keep       keepEscapes
	hf         httpFlags
	rates      rateFlags
	pf         policyFlag
	tf         tracingFlags
	maxRequest int
	listTTL    time.Duration
}

// setOptions sets the server options the flags of serve alone give.
func (f *serveFlags) setOptions(a *app) {
	a.opts.MaxRequestBytes = f.maxRequest
	a.opts.ListTTL = f.listTTL
	a.opts.KeepEscapes = f.keep
	a.opts.Metrics = f.hf.listen != "" // served at /metrics
	a.opts.Policy = f.pf.use(a.log)
	a.opts.Rates = f.rates.rules
	f.rates.warn(a.log, f.hf.listen == "")
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	f.down.register(fs)
	f.keep.register(fs)
	f.hf.register(fs)
	f.rates.register(fs)
	fs.IntVar(&f.maxRequest, "max-request-bytes", server.DefaultMaxRequestBytes,
		"longest request line served; a longer one is discarded as it is read and answered -32600")
	fs.DurationVar(&f.listTTL, "list-ttl", server.DefaultListTTL,
		"how long a 2026-07-28 client may reuse a tools/list (and server/discover) result, its ttlMs (whole milliseconds): after a reload, a client without notifications lists the old tools for up to this long; 0 is immediately stale")
	f.pf.register(fs)
	f.tf.register(fs)
}

// check refuses, before anything starts, what the flags cannot serve; it
// also loads the policy file.
func (f *serveFlags) check() error {
	for _, check := range []func() error{f.hf.check, f.rates.check, f.down.check} {
		if err := check(); err != nil {
			return err
		}
	}
	if _, err := f.tf.config(os.Getenv); err != nil {
		return err
	}
	if f.maxRequest < server.MinMaxRequestBytes {
		return fmt.Errorf("--max-request-bytes %d: want at least %d", f.maxRequest, server.MinMaxRequestBytes)
	}
	if f.listTTL < 0 {
		return fmt.Errorf("--list-ttl %s: want 0 (immediately stale) or more", f.listTTL)
	}
	return f.pf.load(len(f.hf.toolScopes) > 0)
}

// policyFlag is serve's --policy: the file, and its engine once loaded.
type policyFlag struct {
	path   string
	engine *policy.Engine
}

func (f *policyFlag) register(fs *flag.FlagSet) {
	fs.StringVar(&f.path, "policy", "", "a Cedar policy file (docs/policy.md), trusted as tools.conf is: every principal, stdio's included, lists and calls only what it permits (checkpoint_status always); refused whole, and serve exits, when one policy does not parse or validate")
}

// load loads the policy file, if one is given; it is refused beside
// --tool-scope (a shorthand of the same engine: one of them decides).
func (f *policyFlag) load(toolScopes bool) error {
	if f.path == "" {
		return nil
	}
	if toolScopes {
		return errors.New("--tool-scope and --policy: give one; --tool-scope is a shorthand for policies (docs/policy.md), write its scopes in the policy file")
	}
	e, err := policy.Load(f.path)
	if err != nil {
		return fmt.Errorf("--policy refused:\n%w", err)
	}
	f.engine = e
	return nil
}

// use returns the engine loaded, saying so in log.
func (f *policyFlag) use(log *logrus.Logger) *policy.Engine {
	if f.engine != nil {
		log.WithFields(logrus.Fields{"policy": f.engine.Name(), "policies": len(f.engine.IDs())}).Info("policy loaded: what it does not permit is denied")
	}
	return f.engine
}
