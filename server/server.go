// Package server is toolgate's MCP surface: the tool registry (built-ins,
// tools.conf externals, downstream servers), gating, the result envelope and
// the log of calls. It knows nothing about namespaces: it hands invocations
// to a runtime.Runner.
package server

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/jsonrpc"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/policy"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/status"
	"github.com/toolgate/toolgate/tracing"
)

// Options configure a Server.
type Options struct {
	// Version is reported in initialize and checkpoint_status.
	Version string
	// Conf is the loaded tools.conf (any state).
	Conf *conf.Config
	// Builtins are the built-in tools to serve, in tools/list order,
	// already selected by capability flags; checkpoint_status is added by
	// the server and always first.
	Builtins []builtin.Tool
	// Direct runs read-class tools.
	Direct rt.Runner
	// Sandbox runs test-class tools, set up beside serving. While it is
	// unavailable test tools answer isError with the reason; they never
	// fall back to Direct. Nil means no sandbox backend at all.
	Sandbox *rt.Sandbox
	// MaxConcurrent bounds concurrent external calls; the excess queues.
	MaxConcurrent int
	// MaxRequestBytes bounds a request line of ServeStdio; 0 means
	// DefaultMaxRequestBytes.
	MaxRequestBytes int
	// Log receives the server's own messages. It must not write to stdout.
	Log *logrus.Logger
	// Audit receives one record per call (and per refused conf); nil means
	// Log.
	Audit *logrus.Logger
	// KeepEscapes names the external and downstream tools whose output
	// keeps its terminal control sequences (--keep-escapes); every other
	// tool's are neutralised (escapes.go).
	KeepEscapes []string
	// Metrics counts every call in Prometheus metrics (Server.Metrics),
	// served over HTTP at /metrics.
	Metrics bool
	// Policy decides what each principal lists and calls, over every
	// transport (serve --policy; policy.go); nil serves every tool to
	// everyone (but --tool-scope's, over HTTP).
	Policy *policy.Engine
	// Rates are the per-principal rate limits of tools/call (serve
	// --rate, rate.go); empty, none.
	Rates RateRules
	// Tracing, when set, makes every tools/call a span tree exported by
	// it (tracing.go, docs/tracing.md); nil is tracing off, at no cost.
	Tracing *tracing.Provider
	// TracePrincipal records an HTTP call's principal on its span
	// (enduser.id; serve --trace-principal).
	TracePrincipal bool
	// ListTTL is the ttlMs of a 2026-07-28 tools/list and server/discover
	// result (serve --list-ttl, DefaultListTTL; listing.go), in whole
	// milliseconds; 0 (or less) is immediately stale.
	ListTTL time.Duration
}

// Server is a configured toolgate MCP server.
type Server struct {
	opts     Options
	mcp      *mcpserver.MCPServer
	log      *logrus.Logger
	auditLog *logrus.Logger
	sem      chan struct{}
	// keepEscapes is Options.KeepEscapes as a set.
	keepEscapes map[string]bool
	callSeq     atomic.Uint64
	inFlight    atomic.Int64

	// mu guards what the downstream discovery adds while serving.
	mu     sync.RWMutex
	order  map[string]int
	served []status.Tool
	down   *downstreamSet // ConnectDownstream
	// resources are the served tools as policies see them, by name.
	resources map[string]policy.Tool

	// metrics, when Options.Metrics, count every call.
	metrics *Metrics
	// rates are the buckets of Options.Rates; nil without rules.
	rates *rateLimits

	// listed is closed when the downstream discovery started by
	// StartDownstream has finished; nil when none was started.
	listed        chan struct{}
	stopDiscovery context.CancelFunc
	// stopping is set by Close: no downstream server starts after it.
	stopping atomic.Bool
	// downMu orders the changes of what is served of the downstream
	// servers with their retirement by a reload (downstream.go);
	// retiring counts the retired servers still draining their calls.
	downMu   sync.Mutex
	retiring sync.WaitGroup
	// regMu makes reloads of the registry one at a time; reloading
	// counts them, and closeMu orders their start with Close's
	// (reload_registry.go).
	regMu     sync.Mutex
	reloading sync.WaitGroup
	closeMu   sync.Mutex
	// life ends when Close begins: what the server starts beside serving
	// (a reload's listing) stops with it.
	life    context.Context
	endLife context.CancelFunc

	// conf and policy are Options.Conf and Options.Policy until a
	// Reload replaces them (reload.go); a call reads each once.
	conf   atomic.Pointer[conf.Config]
	policy atomic.Pointer[policy.Engine]
	// reloads is the state of Reload.
	reloads reloadState
}

// New builds the server and its tool registry. The built-ins and
// tools.conf tools are set here and by Reload; the downstream
// tools join once listed and change when a listing does
// (downstream_pins.go), so listChanged is true: mcp-go tells every session
// when a tool is added or withdrawn.
func New(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = logrus.New()
		opts.Log.SetOutput(io.Discard)
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = runtime.NumCPU() * 4
	}
	if opts.Audit == nil {
		opts.Audit = opts.Log
	}
	if opts.Sandbox == nil {
		opts.Sandbox = rt.FailedSandbox("none", errors.New("no sandbox backend configured"))
	}
	s := &Server{
		opts:        opts,
		log:         opts.Log,
		auditLog:    opts.Audit,
		order:       map[string]int{},
		resources:   map[string]policy.Tool{},
		sem:         make(chan struct{}, opts.MaxConcurrent),
		keepEscapes: map[string]bool{},
		rates:       newRateLimits(opts.Rates),
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	s.conf.Store(opts.Conf)
	s.policy.Store(opts.Policy)
	for _, name := range opts.KeepEscapes {
		s.keepEscapes[name] = true
	}
	var traced []mcpserver.ServerOption
	if opts.Tracing != nil {
		// Outermost: the call's span covers everything the server does.
		traced = append(traced, mcpserver.WithToolHandlerMiddleware(s.traceCall))
	}
	s.mcp = mcpserver.NewMCPServer("toolgate", opts.Version, append(traced,
		mcpserver.WithToolCapabilities(true),
		mcpserver.WithRecovery(),
		// The first middleware is the outermost: a call over its rate
		// waits for no slot.
		mcpserver.WithToolHandlerMiddleware(s.limitRate),
		mcpserver.WithToolHandlerMiddleware(s.gateCall),
		mcpserver.WithToolFilter(s.sortTools),
		mcpserver.WithToolFilter(s.gateTools),
		mcpserver.WithHooks(s.hooks()),
		mcpserver.WithInstructions("toolgate serves operator-configured, fixed-argv tools. "+
			"External tools take no arguments: what the operator configured is what runs."),
	)...)
	s.register()
	if opts.Metrics {
		s.metrics = newMetrics(s)
	}
	return s
}

// Metrics are the server's metrics; nil unless Options.Metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// InFlight is the number of external calls running now.
func (s *Server) InFlight() int { return int(s.inFlight.Load()) }

// MCP returns the underlying MCP server (for in-process tests).
func (s *Server) MCP() *mcpserver.MCPServer { return s.mcp }

// Served lists the tools in tools/list order with the backend each uses.
func (s *Server) Served() []status.Tool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.served)
}

// sortTools orders tools/list: checkpoint_status, the other built-ins in
// their fixed order, externals in conf order, then downstream tools.
func (s *Server) sortTools(_ context.Context, tools []mcp.Tool) []mcp.Tool {
	out := append([]mcp.Tool(nil), tools...)
	s.mu.RLock()
	defer s.mu.RUnlock()
	slices.SortStableFunc(out, func(a, b mcp.Tool) int { return s.order[a.Name] - s.order[b.Name] })
	return out
}

// known reports whether a tool of that name is served.
func (s *Server) known(name string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.order[name]
	return ok
}

// entry is one served tool: its definition, handler and status line.
type entry struct {
	tool    mcp.Tool
	handler mcpserver.ToolHandlerFunc
	status  status.Tool
}

// add serves entries after those already served, with one AddTools: mcp-go
// does per-call work in AddTool that a 500-tool conf would pay 500 times.
func (s *Server) add(entries ...entry) {
	tools := make([]mcpserver.ServerTool, 0, len(entries))
	s.mu.Lock()
	for _, e := range entries {
		s.order[e.tool.Name] = len(s.order)
		tools = append(tools, mcpserver.ServerTool{Tool: e.tool, Handler: e.handler})
		s.served = append(s.served, e.status)
	}
	s.mu.Unlock()
	s.mcp.AddTools(tools...)
}

func (s *Server) register() {
	entries, resources := s.baseEntries(s.opts.Conf)
	s.setResources(resources)
	s.reloads.setBase(s.opts.Conf, entries)
	s.add(entries...)
}

// baseEntries are the built-ins and the externals c serves, in
// tools/list order, and their policy resources.
func (s *Server) baseEntries(c *conf.Config) ([]entry, map[string]policy.Tool) {
	var entries []entry
	resources := map[string]policy.Tool{}
	checkpoint := builtin.CheckpointStatus(s.report)
	for _, b := range append([]builtin.Tool{checkpoint}, s.opts.Builtins...) {
		if hidden(c, b.Name) {
			continue
		}
		entries = append(entries, entry{
			builtinTool(b), s.builtinHandler(b),
			status.Tool{Name: b.Name, Kind: status.KindBuiltin, Backend: s.builtinBackend(b)},
		})
		resources[b.Name] = policy.Builtin(b.Name)
	}
	if c != nil && c.State == conf.StateLoaded {
		for _, t := range c.Tools {
			if c.Hidden(t.Name) {
				continue
			}
			entries = append(entries, entry{
				externalTool(t), s.externalHandler(t),
				status.Tool{Name: t.Name, Kind: status.KindExternal, Class: string(t.Class), Backend: s.backendName(t), Egress: t.Egress.Strings()},
			})
			resources[t.Name] = policy.External(t)
		}
	}
	return entries, resources
}

// hidden applies c's `expose <name> off` to built-ins; checkpoint_* never
// hides (conf refuses such a line anyway).
func hidden(c *conf.Config, name string) bool {
	if strings.HasPrefix(name, conf.ProtectedPrefix) || c == nil {
		return false
	}
	return c.Hidden(name)
}

func (s *Server) backendName(t conf.Tool) string {
	if t.Class == conf.ClassRead {
		return string(rt.BackendDirect)
	}
	return s.opts.Sandbox.Name()
}

// builtinBackend is where a built-in runs: in the server, or (its helper)
// in the sandbox backend.
func (s *Server) builtinBackend(b builtin.Tool) string {
	if b.Sandboxed {
		return s.opts.Sandbox.Name()
	}
	return "builtin"
}

func builtinTool(b builtin.Tool) mcp.Tool {
	t := mcp.NewToolWithRawSchema(b.Name, b.Description, b.InputSchema)
	t.RawOutputSchema = b.OutputSchema
	t.Annotations = mcp.ToolAnnotation{
		ReadOnlyHint:    new(!b.Writes),
		DestructiveHint: new(false),
		OpenWorldHint:   new(false),
	}
	return t
}

func (s *Server) builtinHandler(b builtin.Tool) mcpserver.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		res, err := b.Handler(ctx, toolcall.Args(req))
		if err != nil {
			return nil, err
		}
		if res.IsError {
			res.Text = jsonrpc.BoundText(res.Text, jsonrpc.MaxErrorText) // it may quote the arguments
		}
		rec := &audit.Call{
			RequestID: jsonrpc.CallInfoFrom(ctx).ID, Tool: b.Name, Kind: status.KindBuiltin, Backend: s.builtinBackend(b),
			IsError: res.IsError, ElapsedMS: audit.Some(time.Since(start).Milliseconds()),
		}
		rec.Annotate(ctx, req)
		s.audit(rec, "call")
		return toolResult(res.Text, res.Structured, res.IsError), nil
	}
}

func toolResult(text string, structured any, isError bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Content:           []mcp.Content{mcp.NewTextContent(text)},
		StructuredContent: structured,
		IsError:           isError,
	}
}

// report is the checkpoint_status source.
func (s *Server) report(ctx context.Context) status.Report {
	c := s.conf.Load()
	state, err := s.opts.Sandbox.State()
	st := status.Report{
		Version:  s.opts.Version,
		Protocol: mcpserver.RequestProtocolVersion(ctx),
		Sandbox: status.Sandbox{
			Backend:   s.opts.Sandbox.Name(),
			State:     string(state),
			Available: state == rt.SandboxReady,
		},
		Tools:    s.Served(),
		Registry: s.registryStatus(),
		Reload:   s.reloads.last.Load(),
	}
	if err != nil {
		st.Sandbox.Reason = err.Error()
	}
	if ps, ok := s.opts.Sandbox.Pool(); ok {
		st.Sandbox.Pool = &ps
	}
	if c != nil {
		st.Conf = status.FromConf(c)
	}
	return st
}

func (s *Server) nextID() string {
	return "c" + strconv.FormatUint(s.callSeq.Add(1), 10)
}
