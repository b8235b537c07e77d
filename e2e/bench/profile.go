package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/direct"
	"github.com/toolgate/toolgate/server"
)

// runProfile serves the bench conf in this process (the real backends and
// server, over in-memory stdio pipes, driven by mcp-go's client) under a
// CPU profile: where the server's own time goes per call.
func runProfile(args []string, stderr io.Writer) int {
	var c common
	var out, tool string
	var calls, conc int
	fs := flag.NewFlagSet("profile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	fs.StringVar(&out, "cpuprofile", "cpu.pprof", "CPU profile to write")
	fs.StringVar(&tool, "tool", "rd", "tool to call: rd (direct) or ts (bwrap)")
	fs.IntVar(&calls, "calls", 2000, "calls")
	fs.IntVar(&conc, "concurrency", 1, "calls in flight")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := c.setup(); err != nil {
		fmt.Fprintf(stderr, "bench profile: %v\n", err)
		return 2
	}
	b := &bench{common: c}
	path, err := c.writeConf("bench.conf", b.benchConf())
	if err != nil {
		fmt.Fprintf(stderr, "bench profile: %v\n", err)
		return 2
	}
	cg := cgroup.Setup()
	defer cg.Close()
	cfg := conf.Load(path, conf.Options{Builtins: builtin.Names()})
	if cfg.State != conf.StateLoaded {
		fmt.Fprintf(stderr, "bench profile: conf %s: %s %v\n", path, cfg.State, cfg.Errors)
		return 2
	}
	sb, err := bwrap.New(context.Background(), bwrap.Config{Shim: c.shim, Cgroups: cg, Limits: rt.DefaultSandboxLimits()})
	if err != nil {
		fmt.Fprintf(stderr, "bench profile: %v\n", err)
		return 2
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	audit := logrus.New()
	audit.SetFormatter(&logrus.JSONFormatter{})
	audit.SetOutput(io.Discard)
	srv := server.New(server.Options{
		Version: "bench", Conf: cfg, Direct: &direct.Runner{Cgroups: cg, Shim: c.shim},
		Sandbox: rt.ReadySandbox("bwrap", sb), Log: log, Audit: audit,
	})
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.ServeStdio(ctx, sr, sw) }()
	t := transport.NewIO(cr, cw, io.NopCloser(strings.NewReader("")))
	if err := t.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "bench profile: %v\n", err)
		return 1
	}
	cl := client.NewClient(t)
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	if _, err := cl.Initialize(ctx, req); err != nil {
		fmt.Fprintf(stderr, "bench profile: initialize: %v\n", err)
		return 1
	}
	s := &session{c: cl}
	f, err := os.Create(out)
	if err != nil {
		fmt.Fprintf(stderr, "bench profile: %v\n", err)
		return 1
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(stderr, "bench profile: %v\n", err)
		return 1
	}
	t0 := time.Now()
	d, el, err := concurrentCalls(s, tool, conc, calls)
	pprof.StopCPUProfile()
	if err != nil {
		fmt.Fprintf(stderr, "bench profile: %v\n", err)
		return 1
	}
	logf(stderr, "profile %s: %d calls in %s (%.0f/s), median %s ms, p99 %s ms; wrote %s", tool, len(d), el.Round(time.Millisecond),
		float64(len(d))/time.Since(t0).Seconds(), fmtMS(ms(d.median())), fmtMS(ms(d.p99())), out)
	return 0
}
