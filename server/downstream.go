package server

// Downstream tools: the allowed tools of the tool-MCP servers of the
// registry (conf.LoadRegistry), served as ID__TOOL after the externals.
//
// Listing. The tool set is fixed at start-up (listChanged is false), yet a
// server's tools and schemas are known only by asking it. ConnectDownstream
// therefore starts (stdio) or connects to (HTTP) every server once, in
// parallel, each within its startup_timeout_sec, lists its tools, and
// registers the enabled ones it offers with their own schemas. Without
// --eager the server is then stopped again and started lazily on the first
// call; with --eager the connection is kept. A server that cannot be listed
// at start-up is not dropped: its enabled tools are served with an open
// schema and each call tries to start it again.
//
// Gating. Only names registered here have a handler, and each handler is
// bound to one (server, enabled tool) pair: a tool the allowlist omits, or
// any tool of a server of a refused registry, has no handler and cannot be
// reached whatever name is guessed. Each handler checks the allowlist again.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf"
	rt "github.com/toolgate/toolgate/runtime"
)

// DefaultDownstreamMaxBytes caps the JSON size of one downstream result
// (1 MiB). A larger result is cut (see capResult) and marked isError; a
// message over messageMax of the cap is discarded while it is read
// (downstream_cap.go).
const DefaultDownstreamMaxBytes = 1 << 20

// DownstreamProtocol is the MCP protocol version toolgate asks downstream
// servers for; a server may answer with an older one it supports.
const DownstreamProtocol = mcp.ProtocolVersion20250618

// downstreamCloseGrace is how long a stdio server gets to exit after its
// stdin is closed before it is killed.
const downstreamCloseGrace = time.Second

// ErrNeedsBwrap is the reason a sandboxed stdio server cannot run with a
// sandbox backend that does not run services (the OCI backend).
var ErrNeedsBwrap = errors.New("downstream servers need the bwrap backend")

// openSchema is the input schema of a tool whose server could not be
// listed: the downstream server validates the arguments itself.
var openSchema = json.RawMessage(`{"type":"object"}`)

// States of a downstream server in checkpoint_status.
const (
	downstreamListed      = "listed"
	downstreamFailed      = "failed"
	downstreamUnavailable = "unavailable"
)

// downstream is one server of the registry: its connection, started or
// connected on demand, and what it offered when listed.
type downstream struct {
	s       *Server
	srv     conf.ToolServer
	starter rt.ServiceStarter // stdio: the backend that runs it
	backend string            // bwrap, oci, direct or http, for status and logs
	log     *logrus.Entry

	// unavailable, when set, is why the server never runs here: every
	// call answers isError with it.
	unavailable error

	mu      sync.Mutex
	conn    *dconn
	starts  int
	offered map[string]remoteTool // the enabled tools it listed; nil until listed
	refused map[string]string     // enabled tools it listed that are not served, and why
	listErr error                 // why the start-up listing failed

	// slot serialises calls unless supports_parallel_tool_calls.
	slot chan struct{}
	// starting is held by the one call that starts the server (get).
	starting chan struct{}
}

// dconn is one live connection: a started process or an HTTP session.
type dconn struct {
	client *client.Client
	proc   *rt.Process // nil for HTTP
	n      int         // start number, for logs

	mu     sync.Mutex
	reason string // why it ended; "" while alive
	dead   chan struct{}
	// discarded are the reasons toolgate answered in place of oversized
	// responses (see downstream_cap.go), until the call each answers
	// takes it.
	discarded []string
}

// noteDiscarded records the reason given in place of an oversized
// response.
func (c *dconn) noteDiscarded(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.discarded) >= 64 { // answers no call took: keep the newest
		c.discarded = c.discarded[1:]
	}
	c.discarded = append(c.discarded, reason)
}

// takeDiscarded returns the recorded reason err carries, if any: the call
// failed because its response was oversized, not because the server said
// so.
func (c *dconn) takeDiscarded(err error) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	msg := err.Error()
	for i, r := range c.discarded {
		if strings.Contains(msg, r) {
			c.discarded = slices.Delete(c.discarded, i, i+1)
			return r, true
		}
	}
	return "", false
}

func (c *dconn) end(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reason == "" {
		c.reason = reason
		close(c.dead)
	}
}

func (c *dconn) ended() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason, c.reason != ""
}

// remoteTool is one tool as the downstream server listed it, its schemas
// kept byte for byte.
type remoteTool struct {
	Name         string             `json:"name"`
	Title        string             `json:"title,omitempty"`
	Description  string             `json:"description,omitempty"`
	InputSchema  json.RawMessage    `json:"inputSchema,omitempty"`
	OutputSchema json.RawMessage    `json:"outputSchema,omitempty"`
	Annotations  mcp.ToolAnnotation `json:"annotations"`
}

// DownstreamOptions configure ConnectDownstream.
type DownstreamOptions struct {
	// Registry is the tool-MCP registry (any state).
	Registry *conf.Registry
	// Services runs sandboxed stdio servers: the sandbox backend when it
	// can run services, else nil with ServicesErr saying why. A sandboxed
	// server never falls back to DirectServices.
	Services    rt.ServiceStarter
	ServicesErr error
	// DirectServices runs the stdio servers whose entry says
	// sandbox = false.
	DirectServices rt.ServiceStarter
	// Eager keeps every server running (or connected) from start-up on;
	// otherwise each is stopped after listing and started again on its
	// first call.
	Eager bool
	// LookupEnv reads the variables the registry names, when a server is
	// started and at each HTTP request; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// MaxBytes caps the JSON size of one downstream result; 0 means
	// DefaultDownstreamMaxBytes.
	MaxBytes int
}

// downstreamSet is the Server's part for downstream servers. servers and
// status are written by ConnectDownstream under Server.mu.
type downstreamSet struct {
	opts    DownstreamOptions
	servers []*downstream
	status  *builtin.RegistryStatus
}

// registryStatus is a copy of the registry section of checkpoint_status;
// nil when there is no registry.
func (s *Server) registryStatus() *builtin.RegistryStatus {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.down == nil {
		return nil
	}
	st := *s.down.status
	st.Errors = slices.Clone(st.Errors)
	st.Servers = slices.Clone(st.Servers)
	return &st
}

// updateStatus changes the registry status under the lock.
func (s *Server) updateStatus(f func(st *builtin.RegistryStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.down.status)
}

// StartDownstream is ConnectDownstream beside serving: it returns at once,
// and tools/list (and a call of a name not served yet) waits until every
// server of the registry is listed, each within its startup_timeout_sec.
// Close cancels a discovery still under way. Call it once, after New and
// before serving.
func (s *Server) StartDownstream(ctx context.Context, opts DownstreamOptions) {
	if opts.Registry == nil || opts.Registry.State != conf.StateLoaded || len(opts.Registry.Servers) == 0 {
		s.ConnectDownstream(ctx, opts)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	s.listed = make(chan struct{})
	s.stopDiscovery = cancel
	go func() {
		defer close(s.listed)
		s.ConnectDownstream(ctx, opts)
	}()
}

// waitListed waits, within ctx, for the discovery StartDownstream began.
func (s *Server) waitListed(ctx context.Context) {
	if s.listed == nil {
		return
	}
	select {
	case <-s.listed:
	case <-ctx.Done():
	}
}

// ConnectDownstream starts or connects to every server of the registry,
// lists its tools and registers the enabled ones it offers, after the
// externals. Call it once, after New and before serving. A refused
// registry, or a collision of a served name with a tools.conf or built-in
// name, disables every downstream server and nothing else.
func (s *Server) ConnectDownstream(ctx context.Context, opts DownstreamOptions) {
	r := opts.Registry
	if r == nil || s.down != nil {
		return
	}
	st := &builtin.RegistryStatus{Dir: r.Dir, State: string(r.State), Reason: r.Reason}
	if r.State == conf.StateLoaded && len(r.Servers) > 0 {
		st.Listing = true
	}
	s.mu.Lock()
	s.down = &downstreamSet{opts: opts, status: st}
	s.mu.Unlock()
	e := s.log.WithFields(logrus.Fields{"registry": r.Dir, "state": r.State})
	switch r.State {
	case conf.StateAbsent:
		e.WithField("reason", r.Reason).Info("tool-mcp registry absent: no downstream servers")
		return
	case conf.StateRefused:
		s.refuseRegistry(st, r.Errors)
		return
	}
	if errs := s.collisions(r); len(errs) > 0 {
		s.refuseRegistry(st, errs)
		return
	}
	downs := make([]*downstream, 0, len(r.Servers))
	for _, srv := range r.Servers {
		downs = append(downs, s.newDownstream(srv))
	}
	var wg sync.WaitGroup
	for _, d := range downs {
		if d.unavailable != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.discover(ctx)
		}()
	}
	wg.Wait()
	for _, d := range downs {
		ds := d.register()
		s.updateStatus(func(st *builtin.RegistryStatus) {
			s.down.servers = append(s.down.servers, d)
			st.Servers = append(st.Servers, ds)
		})
	}
	s.updateStatus(func(st *builtin.RegistryStatus) { st.Listing = false })
	// The pages read are garbage now; give their memory back to the
	// system rather than keep the listing's peak for the server's life.
	debug.FreeOSMemory()
	e.WithField("servers", len(downs)).Info("tool-mcp registry loaded")
}

// refuseRegistry records a refused registry: every downstream server is
// disabled. The reasons name keys and variables, never values.
func (s *Server) refuseRegistry(st *builtin.RegistryStatus, errs []error) {
	e := s.log.WithFields(logrus.Fields{"registry": st.Dir, "state": conf.StateRefused})
	s.updateStatus(func(st *builtin.RegistryStatus) {
		st.State, st.Listing = string(conf.StateRefused), false
		for _, err := range errs {
			st.Errors = append(st.Errors, err.Error())
		}
	})
	for _, err := range errs {
		e.WithField("reason", err.Error()).Error("tool-mcp registry refused")
	}
	e.Error("tool-mcp registry refused: every downstream server is disabled; built-in and tools.conf tools are unaffected")
}

// collisions applies conf.Collisions to the names this server serves
// already (a registry loaded without RegistryOptions.Taken, as in tests,
// is held to the same rule).
func (s *Server) collisions(r *conf.Registry) []error {
	s.mu.RLock()
	taken := conf.TakenNames(nil, s.opts.Conf)
	for name := range s.order {
		if _, ok := taken[name]; !ok {
			taken[name] = "the built-in tool"
		}
	}
	s.mu.RUnlock()
	return conf.Collisions(r.Servers, taken)
}

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

// discover connects, lists and, without --eager, disconnects again.
func (d *downstream) discover(ctx context.Context) {
	start := time.Now()
	c, err := d.connect(ctx)
	if err != nil {
		d.listErr = err
		d.log.WithError(err).Error("downstream server not listed at start-up: its enabled tools are served with an open schema and each call tries to start it again")
		return
	}
	lctx, cancel := context.WithTimeout(ctx, d.srv.StartupTimeout)
	l, err := listTools(lctx, c.client, d.srv.Enabled)
	cancel()
	if err != nil {
		d.close(c, "listing failed", 0)
		d.listErr = fmt.Errorf("tools/list: %s", d.redact(err.Error()))
		d.log.WithError(d.listErr).Error("downstream server not listed at start-up: its enabled tools are served with an open schema and each call tries to start it again")
		return
	}
	d.offered, d.refused = l.tools, l.refused
	d.log.WithFields(logrus.Fields{"offered": l.offered, "ms": time.Since(start).Milliseconds()}).Info("downstream server listed")
	if d.s.down.opts.Eager {
		d.mu.Lock()
		d.conn = c
		d.mu.Unlock()
		return
	}
	d.close(c, "listed at start-up; started again on first use", downstreamCloseGrace)
}

// register adds the server's tools to the MCP server and returns its
// status.
func (d *downstream) register() builtin.DownstreamStatus {
	st := builtin.DownstreamStatus{ID: d.srv.ID, Transport: string(d.srv.Transport), Sandbox: d.sandboxState(), State: downstreamListed, Served: []string{}}
	switch {
	case d.unavailable != nil:
		st.State, st.Reason = downstreamUnavailable, d.unavailable.Error()
		d.log.WithError(d.unavailable).Error("downstream server unavailable: its tools answer isError; it never runs unsandboxed")
	case d.offered == nil:
		st.State, st.Reason = downstreamFailed, d.listErr.Error()
	}
	for _, tool := range d.srv.EnabledTools {
		name := d.srv.ServedName(tool)
		if problem, refused := conf.ClientNameIssue(name); refused {
			st.NotServed = append(st.NotServed, tool)
			d.log.WithField("tool", tool).Error(problem)
			continue
		} else if problem != "" {
			d.log.WithField("tool", tool).Warn(problem)
		}
		var t mcp.Tool
		if d.offered == nil {
			t = mcp.NewToolWithRawSchema(name, d.describe(tool, ""), openSchema)
			t.Annotations = approvalAnnotations(d.srv.Approval(tool), mcp.ToolAnnotation{})
		} else {
			if why, ok := d.refused[tool]; ok {
				st.NotServed = append(st.NotServed, tool)
				st.Refused = append(st.Refused, builtin.ToolRefusal{Tool: tool, Reason: why})
				d.log.WithFields(logrus.Fields{"tool": tool, "reason": why}).Error("downstream tool not served")
				continue
			}
			rtool, ok := d.offered[tool]
			if !ok {
				st.NotServed = append(st.NotServed, tool)
				d.log.WithField("tool", tool).Warn("enabled tool not offered by the downstream server: not served")
				continue
			}
			var err error
			if t, err = d.servedTool(rtool); err != nil {
				st.NotServed = append(st.NotServed, tool)
				d.log.WithField("tool", tool).WithError(err).Error("downstream tool not served")
				continue
			}
		}
		d.s.add(entry{t, d.handler(tool), builtin.ToolStatus{Name: name, Kind: "downstream", Backend: d.backend}})
		st.Served = append(st.Served, name)
	}
	return st
}

// servedTool is how toolgate serves a listed downstream tool: the served
// name, the downstream schemas unchanged, the description with its origin,
// and the annotations of the operator's approval mode.
func (d *downstream) servedTool(r remoteTool) (mcp.Tool, error) {
	in := r.InputSchema
	if len(in) == 0 || string(in) == "null" {
		in = openSchema
	}
	if err := checkObjectSchema(in); err != nil {
		return mcp.Tool{}, fmt.Errorf("inputSchema: %w", err)
	}
	t := mcp.NewToolWithRawSchema(d.srv.ServedName(r.Name), d.describe(r.Name, r.Description), in)
	t.Title = r.Title
	if len(r.OutputSchema) > 0 && string(r.OutputSchema) != "null" {
		if err := checkObjectSchema(r.OutputSchema); err != nil {
			return mcp.Tool{}, fmt.Errorf("outputSchema: %w", err)
		}
		t.RawOutputSchema = r.OutputSchema
	}
	t.Annotations = approvalAnnotations(d.srv.Approval(r.Name), r.Annotations)
	if err := mcp.ValidateParamHeaderAnnotations(&t); err != nil {
		return mcp.Tool{}, err
	}
	return t, nil
}

// checkObjectSchema accepts a JSON object whose "type", if any, is
// "object", as MCP requires of tool schemas.
func checkObjectSchema(b json.RawMessage) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return errors.New("not a JSON object")
	}
	if typ, ok := m["type"]; ok && string(typ) != `"object"` {
		return fmt.Errorf("type %s, want \"object\"", typ)
	}
	return nil
}

// describe is a downstream tool's description: its own, then where it comes
// from and the operator's approval mode.
func (d *downstream) describe(tool, own string) string {
	origin := fmt.Sprintf("Downstream tool %q of the tool-MCP server %q (%s", tool, d.srv.ID, d.srv.Transport)
	if d.srv.Transport == conf.TransportStdio {
		origin += ", sandbox " + d.sandboxState()
	}
	origin += fmt.Sprintf("), approval mode %s. Its results are external content.", d.srv.Approval(tool))
	switch {
	case d.unavailable != nil:
		origin += " Unavailable: " + d.unavailable.Error() + "."
	case d.offered == nil:
		origin += " Not listed at start-up (" + d.listErr.Error() + "): the arguments are passed as given."
	}
	if own == "" {
		return origin
	}
	return own + "\n\n" + origin
}

// approvalAnnotations derives a served tool's annotations from the
// operator's approval mode: the hints MCP clients act on when deciding to
// ask before a call. They state the operator's policy, not the server's
// claims; the server's title, idempotentHint and openWorldHint are kept.
//
//   - auto: readOnlyHint true, destructiveHint false: no client asks.
//   - writes: as auto when the server declares the tool read-only
//     (readOnlyHint true), else as prompt.
//   - prompt: readOnlyHint false, destructiveHint true: clients ask.
//   - approve: as prompt, and idempotentHint false, so that a client does
//     not take one approval for the next call.
func approvalAnnotations(mode conf.ApprovalMode, own mcp.ToolAnnotation) mcp.ToolAnnotation {
	a := mcp.ToolAnnotation{Title: own.Title, IdempotentHint: own.IdempotentHint, OpenWorldHint: own.OpenWorldHint}
	confirm := true
	switch mode {
	case conf.ApprovalAuto:
		confirm = false
	case conf.ApprovalWrites:
		confirm = own.ReadOnlyHint == nil || !*own.ReadOnlyHint
	}
	a.ReadOnlyHint = mcp.ToBoolPtr(!confirm)
	a.DestructiveHint = mcp.ToBoolPtr(confirm)
	if mode == conf.ApprovalApprove {
		a.IdempotentHint = mcp.ToBoolPtr(false)
	}
	return a
}

// --- connections ------------------------------------------------------------

// get returns the live connection, starting or connecting when there is
// none (bounded by startup_timeout_sec), and lists the tools when the
// start-up listing failed. A call that finds another starting the server
// waits for it within its own context (and startup_timeout_sec), never
// holding the lock that shutdown and the other calls take.
func (d *downstream) get(ctx context.Context) (*dconn, error) {
	if c := d.live(); c != nil {
		return c, nil
	}
	wait := time.NewTimer(d.srv.StartupTimeout)
	select {
	case d.starting <- struct{}{}:
		wait.Stop()
	case <-ctx.Done():
		wait.Stop()
		return nil, fmt.Errorf("while another call was starting it: %w", ctx.Err())
	case <-wait.C:
		return nil, fmt.Errorf("another call was still starting it after startup_timeout_sec (%s)", d.srv.StartupTimeout)
	}
	defer func() { <-d.starting }()
	if c := d.live(); c != nil {
		return c, nil
	}
	if d.s.stopping.Load() {
		return nil, errStopping
	}
	c, err := d.connect(ctx)
	if err != nil {
		return nil, err
	}
	if d.offered == nil { // written only here and at start-up, under starting
		lctx, cancel := context.WithTimeout(ctx, d.srv.StartupTimeout)
		l, err := listTools(lctx, c.client, d.srv.Enabled)
		cancel()
		if err != nil {
			d.close(c, "listing failed", 0)
			return nil, fmt.Errorf("tools/list: %s", d.redact(err.Error()))
		}
		d.mu.Lock()
		d.offered, d.refused = l.tools, l.refused
		d.mu.Unlock()
		for tool, why := range l.refused {
			d.log.WithFields(logrus.Fields{"tool": tool, "reason": why}).Error("downstream tool not served")
		}
	}
	d.mu.Lock()
	if d.s.stopping.Load() { // Close ran while it started: shutdown saw no connection
		d.mu.Unlock()
		d.close(c, "toolgate is stopping", 0)
		return nil, errStopping
	}
	d.conn = c
	d.mu.Unlock()
	return c, nil
}

// live returns the current connection if it has not ended.
func (d *downstream) live() *dconn {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.conn; c != nil {
		if _, ended := c.ended(); !ended {
			return c
		}
		d.conn = nil
	}
	return nil
}

// connect starts (stdio) or connects to (HTTP) the server and completes
// the MCP handshake, within startup_timeout_sec.
func (d *downstream) connect(ctx context.Context) (*dconn, error) {
	if err := d.checkVars(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.srv.StartupTimeout)
	defer cancel()
	d.starts++
	c := &dconn{n: d.starts, dead: make(chan struct{})}
	start := time.Now()
	var err error
	if d.srv.Transport == conf.TransportStdio {
		err = d.startStdio(ctx, c)
	} else {
		err = d.startHTTP(ctx, c)
	}
	if err != nil {
		return nil, err
	}
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = DownstreamProtocol
	req.Params.ClientInfo = mcp.Implementation{Name: "toolgate", Version: d.s.opts.Version}
	if _, err := c.client.Initialize(ctx, req); err != nil {
		msg := d.redact(err.Error())
		switch {
		case ctx.Err() != nil:
			msg = fmt.Sprintf("no MCP handshake within startup_timeout_sec (%s)", d.srv.StartupTimeout)
		case c.proc != nil:
			// Say why the process ended, when it did.
			select {
			case <-c.dead:
			case <-time.After(2 * rt.DrainGrace):
			}
			if r, ended := c.ended(); ended {
				msg += " (" + r + ")"
			}
		}
		d.close(c, "initialize failed", 0)
		return nil, fmt.Errorf("initialize: %s", msg)
	}
	d.log.WithFields(logrus.Fields{"start": c.n, "ms": time.Since(start).Milliseconds()}).Info("downstream server ready")
	return c, nil
}

// startStdio starts the process and an MCP client over its pipes.
func (d *downstream) startStdio(ctx context.Context, c *dconn) error {
	env, err := d.env()
	if err != nil {
		return err
	}
	svc := rt.Service{
		ID:       fmt.Sprintf("mcp-%s-%d", d.srv.ID, c.n),
		Name:     d.srv.ID,
		Path:     d.srv.Command,
		Argv:     append([]string{d.srv.Command}, d.srv.Args...),
		Dir:      d.srv.Cwd,
		Env:      env,
		Network:  d.srv.Network,
		ReadOnly: d.srv.ReadOnly,
		Stderr:   d.stderrLine,
	}
	p, err := d.starter.StartService(ctx, svc)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	c.proc = p
	limit := messageMax(d.maxBytes())
	answer := d.oversized(c, limit)
	stdout := newLineCap(p.Stdout(), limit, func(o oversize) ([]byte, error) {
		if b := answer(o); b != nil || o.method {
			return b, nil
		}
		// No id to answer: the waiting call cannot be told apart. End
		// the connection (every call in flight answers with this reason)
		// and start the server again on the next call.
		reason := fmt.Sprintf("it wrote a message of %d bytes, over toolgate's cap of %d bytes for one message, with no id toolgate could read; it was stopped", o.size, limit)
		c.end(reason)
		go p.Close()
		return nil, io.EOF // mcp-go ends the stream quietly; c says why
	})
	stdin := &stdinWriter{w: p.Stdin()}
	bounded := &boundedStdio{Stdio: transport.NewIO(stdout, stdin, nil), w: stdin, stuck: func(reason string) {
		if _, ended := c.ended(); !ended {
			d.drop(c, reason)
		}
	}}
	c.client = client.NewClient(bounded, client.WithProtocolVersion(DownstreamProtocol))
	// The client's context serves the server's requests to toolgate (ping)
	// for the life of the process, not the start-up's.
	if err := c.client.Start(context.WithoutCancel(ctx)); err != nil {
		p.Close()
		return fmt.Errorf("start the MCP client: %w", err)
	}
	go func() {
		<-p.Done()
		reason := fmt.Sprintf("the process exited with status %d", p.ExitCode())
		c.end(reason)
		_ = c.client.Close()
		d.log.WithFields(logrus.Fields{"start": c.n, "exit": p.ExitCode()}).Info("downstream server process ended")
	}()
	return nil
}

// oversized answers a response the server sent over the message cap
// (limit bytes), discarded as it was read: a JSON-RPC error for its id
// naming the size and the cap, which the waiting call turns into isError
// (takeDiscarded). A request or notification of the server over the cap
// is dropped; a message with no id gets no answer (nil).
func (d *downstream) oversized(c *dconn, limit int) func(oversize) []byte {
	return func(o oversize) []byte {
		e := d.log.WithFields(logrus.Fields{"start": c.n, "bytes": o.size, "cap": limit})
		switch {
		case o.method:
			e.Warn("downstream server sent a request or notification over the message cap: discarded")
			return nil
		case o.id == nil:
			e.Warn("downstream server sent a message over the message cap with no readable id: discarded")
			return nil
		}
		reason := fmt.Sprintf("a response of %d bytes, over toolgate's cap of %d bytes for one downstream message (--downstream-max-bytes, at least 1 MiB, plus 64 KiB for the envelope); it was discarded as it was read",
			o.size, limit)
		c.noteDiscarded(reason)
		e.Warn("downstream response over the message cap: discarded, its call answers isError")
		return errorLine(o.id, oversizeCode, reason)
	}
}

// startHTTP connects an MCP client to the URL. The headers (the bearer
// token and env_http_headers read from the environment at each request)
// are set by the HTTP client's transport, so that every request carries
// them, mcp-go's session DELETE included; redirects are not followed, and
// the headers go to the configured origin only.
func (d *downstream) startHTTP(ctx context.Context, c *dconn) error {
	origin, err := url.Parse(d.srv.URL)
	if err != nil {
		return fmt.Errorf("url: %w", err)
	}
	limit := messageMax(d.maxBytes())
	bounded := &boundedTransport{base: http.DefaultTransport, max: limit, over: d.oversized(c, limit)}
	hc := &http.Client{
		Transport: &headerTransport{d: d, scheme: origin.Scheme, host: origin.Host, base: bounded},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	cl, err := client.NewStreamableHttpClient(d.srv.URL,
		transport.WithHTTPBasicClient(hc),
		transport.WithHTTPLogger(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		return fmt.Errorf("connect %s: %w", d.srv.URL, err)
	}
	if err := cl.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("connect %s: %s", d.srv.URL, d.redact(err.Error()))
	}
	c.client = cl
	return nil
}

// close ends a connection: a stdio server gets its stdin closed and grace
// to exit, then it is killed with everything it started; an HTTP session
// is closed (waiting at most downstreamCloseGrace for the server).
func (d *downstream) close(c *dconn, reason string, grace time.Duration) {
	c.end(reason)
	if c.proc == nil {
		done := make(chan struct{})
		go func() {
			_ = c.client.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(downstreamCloseGrace):
		}
		return
	}
	_ = c.proc.Stdin().Close()
	if grace > 0 {
		select {
		case <-c.proc.Done():
		case <-time.After(grace):
		}
	}
	c.proc.Close()
	_ = c.client.Close()
}

// drop ends c, the current connection, at once (a server that ran past a
// call's budget, a broken HTTP session), so that the next call starts
// anew.
func (d *downstream) drop(c *dconn, reason string) {
	d.mu.Lock()
	if d.conn == c {
		d.conn = nil
	}
	d.mu.Unlock()
	d.log.WithFields(logrus.Fields{"start": c.n, "reason": reason}).Warn("downstream server stopped")
	d.close(c, reason, 0)
}

// shutdown ends the live connection, if any.
func (d *downstream) shutdown() {
	d.mu.Lock()
	c := d.conn
	d.conn = nil
	d.mu.Unlock()
	if c != nil {
		d.close(c, "toolgate is stopping", downstreamCloseGrace)
	}
}

// errStopping refuses to start a downstream server once Close has begun.
var errStopping = errors.New("toolgate is stopping")

// Close stops every downstream server (and everything each started) and
// closes the HTTP sessions; no server is started after it began. ServeStdio
// calls it as soon as its input ends, before it waits for the calls in
// flight; calling it again is harmless.
func (s *Server) Close() {
	s.stopping.Store(true)
	if s.stopDiscovery != nil {
		s.stopDiscovery()
		<-s.listed
	}
	s.mu.RLock()
	ds := s.down
	s.mu.RUnlock()
	if ds == nil {
		return
	}
	var wg sync.WaitGroup
	for _, d := range ds.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.shutdown()
		}()
	}
	wg.Wait()
}

// lookupEnv reads a variable of toolgate's environment.
func (d *downstream) lookupEnv(name string) (string, bool) {
	if f := d.s.down.opts.LookupEnv; f != nil {
		return f(name)
	}
	return os.LookupEnv(name)
}

// checkVars reports the referenced variables that are not set (or empty),
// by name.
func (d *downstream) checkVars() error {
	var missing []string
	for _, v := range d.srv.Vars() {
		if val, ok := d.lookupEnv(v.Name); !ok || val == "" {
			missing = append(missing, fmt.Sprintf("%s (%s)", v.Name, v.Use))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("variable not set in toolgate's environment: %s", strings.Join(missing, ", "))
	}
	return nil
}

// env is the server's own environment: the literal env, then the
// forwarded env_vars, read now.
func (d *downstream) env() ([]string, error) {
	var env []string
	for _, k := range slices.Sorted(maps.Keys(d.srv.Env)) {
		env = append(env, k+"="+d.srv.Env[k])
	}
	for _, name := range d.srv.EnvVars {
		v, ok := d.lookupEnv(name)
		if !ok || v == "" {
			return nil, fmt.Errorf("variable %s (env_vars) not set in toolgate's environment", name)
		}
		env = append(env, name+"="+v)
	}
	return env, nil
}

// headerTransport sets the server's headers on every request to its
// origin.
type headerTransport struct {
	d            *downstream
	scheme, host string
	base         http.RoundTripper
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != t.scheme || r.URL.Host != t.host {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for k, v := range t.d.httpHeaders() {
		r.Header.Set(k, v)
	}
	return t.base.RoundTrip(r)
}

// httpHeaders are the headers of each request: the literal http_headers,
// then the bearer token and env_http_headers read from the named variables
// now.
func (d *downstream) httpHeaders() map[string]string {
	h := maps.Clone(d.srv.Headers)
	if h == nil {
		h = map[string]string{}
	}
	if name := d.srv.BearerTokenEnvVar; name != "" {
		if v, ok := d.lookupEnv(name); ok && v != "" {
			h["Authorization"] = "Bearer " + v
		}
	}
	for header, name := range d.srv.EnvHeaders {
		if v, ok := d.lookupEnv(name); ok && v != "" {
			h[header] = v
		}
	}
	return h
}

// secrets are the values of the variables the server references, as now
// set: what redact removes.
func (d *downstream) secrets() []string {
	var out []string
	for _, v := range d.srv.Vars() {
		if val, ok := d.lookupEnv(v.Name); ok && len(val) >= 4 {
			out = append(out, val)
		}
	}
	return out
}

// redact replaces the values of the referenced variables in s: text that
// reaches the log (the server's stderr, error messages) never carries a
// credential even when the server prints one.
func (d *downstream) redact(s string) string {
	for _, v := range d.secrets() {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return s
}

// stderrLine logs one line of the server's stderr.
func (d *downstream) stderrLine(line string) {
	d.log.WithField("stderr", d.redact(line)).Info("downstream server stderr")
}

// --- calls ------------------------------------------------------------------

// handler answers calls of one enabled tool of the server. Each call is
// one audit record, marked as external content; a credential's value is
// never in it.
func (d *downstream) handler(tool string) mcpserver.ToolHandlerFunc {
	served := d.srv.ServedName(tool)
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		rec := &auditRecord{RequestID: requestID(req), Tool: served, Kind: "downstream", Server: d.srv.ID,
			Transport: string(d.srv.Transport), Backend: d.backend, Content: "external", Call: d.s.nextID()}
		rec.annotate(ctx, req)
		done := func(res *mcp.CallToolResult) (*mcp.CallToolResult, error) { //nolint:unparam // shaped to be the handler's return
			rec.IsError = res.IsError
			if ctx.Err() != nil {
				// notifications/cancelled (or shutdown): answer nothing.
				d.s.cancelled.add(requestID(req))
				rec.Cancelled = true
			}
			d.s.audit(rec, "call")
			return res, nil
		}
		refuse := func(what, format string, a ...any) (*mcp.CallToolResult, error) {
			rec.Refused = what
			return done(errorResult("toolgate: %s: "+format, append([]any{served}, a...)...))
		}
		if !d.srv.Enabled(tool) {
			return refuse("not enabled", "not in enabled_tools of %q", d.srv.ID)
		}
		if d.unavailable != nil {
			return refuse("unavailable", "the downstream server %q cannot run here: %v. It is never run unsandboxed; `toolgate doctor` says how to fix the backend.", d.srv.ID, d.unavailable)
		}
		if err := d.checkVars(); err != nil {
			return refuse("variables", "%v; not called", err)
		}
		queued := arrival(ctx)
		if d.slot != nil {
			if ctx.Err() != nil {
				return refuse("cancelled", "cancelled while queued")
			}
			t := time.NewTimer(time.Until(queued.Add(d.srv.ToolTimeout)))
			select {
			case d.slot <- struct{}{}:
				t.Stop()
				defer func() { <-d.slot }()
				if ctx.Err() != nil {
					return refuse("cancelled", "cancelled while queued")
				}
			case <-t.C:
				return refuse("queue", "queued for tool_timeout_sec (%s) behind another call of %q (supports_parallel_tool_calls is false); not called", d.srv.ToolTimeout, d.srv.ID)
			case <-ctx.Done():
				t.Stop()
				return refuse("cancelled", "cancelled while queued")
			}
		}
		c, err := d.get(ctx)
		if err != nil {
			rec.Error = some(err.Error())
			d.log.WithError(err).Warn("downstream server could not be started")
			return done(errorResult("toolgate: %s: the downstream server %q could not be started: %v", served, d.srv.ID, err))
		}
		if _, ok := d.offers(tool); !ok {
			if why, refused := d.refusal(tool); refused {
				return refuse("refused tool", "the downstream server %q lists %q, but toolgate does not serve it: %s", d.srv.ID, tool, why)
			}
			return refuse("not offered", "the downstream server %q does not offer %q", d.srv.ID, tool)
		}
		var creq mcp.CallToolRequest
		creq.Params.Name = tool
		if args := rawArgs(req); args != nil {
			creq.Params.Arguments = args
		}
		cctx, cancel := context.WithTimeout(ctx, d.srv.ToolTimeout)
		defer cancel()
		start := time.Now()
		res, err := c.client.CallTool(cctx, creq)
		rec.Start = c.n
		rec.ElapsedMS = some(time.Since(start).Milliseconds())
		rec.QueuedMS = some(start.Sub(queued).Milliseconds())
		if err != nil {
			return done(d.callFailed(ctx, cctx, c, rec, served, err))
		}
		if !d.s.keepEscapes[served] {
			res = neutralizeResult(res)
		}
		out, cut := capResult(res, d.maxBytes())
		rec.Truncated = some(cut)
		return done(out)
	}
}

// callFailed turns a failed call into isError, and stops a server that ran
// past the call's budget or whose HTTP session broke; a crashed process
// was already noted by its watcher.
func (d *downstream) callFailed(ctx, cctx context.Context, c *dconn, rec *auditRecord, served string, err error) *mcp.CallToolResult {
	msg := d.redact(err.Error())
	if reason, ok := c.takeDiscarded(err); ok && ctx.Err() == nil {
		rec.Truncated, rec.Error = some(true), some("oversized response")
		return errorResult("toolgate: %s: the downstream server %q sent %s. Ask for less, or raise --downstream-max-bytes.", served, d.srv.ID, reason)
	}
	switch {
	case ctx.Err() != nil:
		rec.Limit = some(string(rt.LimitCancelled))
		return errorResult("toolgate: %s: [cancelled] the caller cancelled the call", served)
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		rec.Limit, rec.TimedOut = some(string(rt.LimitTimeout)), some(true)
		if c.proc != nil {
			why := ""
			if reason, ended := c.ended(); ended {
				why = " (" + reason + ")" // it did not read its stdin
			} else {
				d.drop(c, fmt.Sprintf("a call of %s exceeded tool_timeout_sec (%s)", served, d.srv.ToolTimeout))
			}
			return errorResult("toolgate: %s: [timeout] no result within tool_timeout_sec (%s); the downstream server %q was stopped with everything it started%s and is started again on the next call",
				served, d.srv.ToolTimeout, d.srv.ID, why)
		}
		return errorResult("toolgate: %s: [timeout] no result within tool_timeout_sec (%s)", served, d.srv.ToolTimeout)
	case c.proc != nil && errors.Is(err, transport.ErrTransportClosed):
		select {
		case <-c.dead:
		case <-time.After(2 * rt.DrainGrace):
		}
		reason, _ := c.ended()
		if reason == "" {
			reason = "its stdout closed"
		}
		rec.Error = some("server ended: " + reason)
		d.log.WithFields(logrus.Fields{"start": c.n, "reason": reason}).Warn("downstream server ended during a call")
		return errorResult("toolgate: %s: the downstream server %q ended during the call (%s); it is started again on the next call", served, d.srv.ID, reason)
	case isRPCError(err):
		rec.RPCError = some(msg)
		return errorResult("toolgate: %s: the downstream server %q answered an error: %s", served, d.srv.ID, msg)
	}
	rec.Error = some(msg)
	if c.proc == nil {
		d.drop(c, "the HTTP session failed: "+msg)
	}
	return errorResult("toolgate: %s: the call to the downstream server %q failed: %s", served, d.srv.ID, msg)
}

// isRPCError reports a JSON-RPC error answer of the server: mcp-go wraps
// every failure to send or receive in *transport.Error, and returns an
// error answer as the error its code maps to.
func isRPCError(err error) bool {
	var te *transport.Error
	return !errors.As(err, &te)
}

// offers reports whether the server listed tool.
func (d *downstream) offers(tool string) (remoteTool, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.offered[tool]
	return t, ok
}

// refusal says why a tool the server listed is not served, if it is not.
func (d *downstream) refusal(tool string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	why, ok := d.refused[tool]
	return why, ok
}

func (d *downstream) maxBytes() int {
	if n := d.s.down.opts.MaxBytes; n > 0 {
		return n
	}
	return DefaultDownstreamMaxBytes
}

// MaxDownstreamTool bounds the definition of one downstream tool (its
// JSON in the server's tools/list: name, description, schemas,
// annotations): an enabled tool listed with a larger one is not served,
// and says why. It is served whole in toolgate's own tools/list, which
// every client reads, and kept for the life of the server.
const MaxDownstreamTool = 256 << 10

// listing is what a server's tools/list gave: only the enabled tools are
// kept.
type listing struct {
	tools   map[string]remoteTool // enabled, offered and accepted
	refused map[string]string     // enabled and offered, but not served: why
	offered int                   // tools listed, enabled or not
}

// listTools asks for tools/list page by page and keeps the JSON of each
// enabled tool, so that its schemas are served byte for byte; every other
// tool is dropped as its page is read, so a server that lists thousands
// costs toolgate one page at a time. An enabled tool whose definition is
// over MaxDownstreamTool, or that is listed twice (either definition could
// be meant), is refused. The request goes straight to the transport
// (mcp-go's ListTools decodes schemas into a struct that drops keywords).
func listTools(ctx context.Context, c *client.Client, enabled func(string) bool) (*listing, error) {
	l := &listing{tools: map[string]remoteTool{}, refused: map[string]string{}}
	seen := map[string]int{}
	cursor := ""
	for page := 1; ; page++ {
		if page > 100 {
			return nil, errors.New("more than 100 pages of tools")
		}
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		resp, err := c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{
			JSONRPC: mcp.JSONRPC_VERSION,
			ID:      mcp.NewRequestId(fmt.Sprintf("toolgate-tools-list-%d", page)),
			Method:  string(mcp.MethodToolsList),
			Params:  params,
		})
		if err != nil {
			return nil, err
		}
		if resp.Error != nil {
			return nil, resp.Error.AsError()
		}
		var res struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor string            `json:"nextCursor"`
		}
		err = json.Unmarshal(resp.Result, &res)
		resp = nil // let the page go
		if err != nil {
			return nil, fmt.Errorf("decode: %w", err)
		}
		for _, raw := range res.Tools {
			var head struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(raw, &head) != nil || head.Name == "" {
				continue
			}
			l.offered++
			if !enabled(head.Name) {
				continue
			}
			name := head.Name
			if seen[name]++; seen[name] > 1 {
				delete(l.tools, name)
				l.refused[name] = fmt.Sprintf("the server lists it %d times in one tools/list; a tool's name must be unique, and either definition could be meant", seen[name])
				continue
			}
			var t remoteTool
			if err := json.Unmarshal(raw, &t); err != nil {
				l.refused[name] = fmt.Sprintf("its definition does not decode: %v", err)
				continue
			}
			if len(raw) > MaxDownstreamTool {
				l.refused[name] = fmt.Sprintf("its definition is %d bytes (inputSchema %d, outputSchema %d, description %d), over toolgate's cap of %d bytes for one downstream tool",
					len(raw), len(t.InputSchema), len(t.OutputSchema), len(t.Description), MaxDownstreamTool)
				continue
			}
			l.tools[name] = t
		}
		if res.NextCursor == "" || res.NextCursor == cursor {
			return l, nil
		}
		cursor = res.NextCursor
	}
}

// neutralizeResult returns res with the terminal control sequences of its
// text neutralised: the text content items and the text of embedded
// resources, what a client prints. structuredContent is left as it is: it
// reaches a client as JSON, whose encoding escapes every control
// character.
func neutralizeResult(res *mcp.CallToolResult) *mcp.CallToolResult {
	var content []mcp.Content
	for i, c := range res.Content {
		var n mcp.Content
		switch c := c.(type) {
		case mcp.TextContent:
			if t := neutralize(c.Text); t != c.Text {
				c.Text = t
				n = c
			}
		case mcp.EmbeddedResource:
			if r, ok := c.Resource.(mcp.TextResourceContents); ok {
				if t := neutralize(r.Text); t != r.Text {
					r.Text = t
					c.Resource = r
					n = c
				}
			}
		}
		if n == nil {
			continue
		}
		if content == nil {
			content = slices.Clone(res.Content)
		}
		content[i] = n
	}
	if content == nil {
		return res
	}
	out := *res
	out.Content = content
	return &out
}

// capResult returns res unchanged when its JSON fits in max bytes.
// Otherwise it keeps the content items in order while they fit, cuts the
// first text item that does not at a character boundary, drops
// structuredContent and the rest, appends a marker saying what was
// dropped, and sets isError: the caller did not get the whole result.
func capResult(res *mcp.CallToolResult, max int) (*mcp.CallToolResult, bool) {
	b, err := json.Marshal(res)
	if err == nil && len(b) <= max {
		return res, false
	}
	total := len(b)
	out := &mcp.CallToolResult{Result: res.Result, IsError: true}
	budget := max - 512 // room for the marker and the envelope
	dropped, cut := 0, false
	for _, c := range res.Content {
		cb, err := json.Marshal(c)
		switch {
		case err == nil && len(cb) <= budget:
			out.Content = append(out.Content, c)
			budget -= len(cb)
		case !cut && budget > 64:
			if tc, ok := c.(mcp.TextContent); ok {
				tc.Text = cutJSONText(tc.Text, budget-64)
				out.Content = append(out.Content, tc)
				cut, budget = true, 0
				continue
			}
			dropped++
		default:
			dropped++
		}
	}
	what := []string{}
	if res.StructuredContent != nil {
		what = append(what, "structuredContent")
	}
	if cut {
		what = append(what, "the end of a text item")
	}
	if dropped > 0 {
		what = append(what, fmt.Sprintf("%d content items", dropped))
	}
	out.Content = append(out.Content, mcp.NewTextContent(fmt.Sprintf(
		"[toolgate: the downstream result was %d bytes, over the cap of %d bytes; dropped: %s]", total, max, strings.Join(what, ", "))))
	return out, true
}

// cutJSONText returns the longest prefix of s, cut at a character
// boundary, whose JSON encoding fits in n bytes.
func cutJSONText(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) > n {
		s = s[:n]
	}
	for {
		// Drop a rune cut in two (and any invalid byte at the end).
		for len(s) > 0 {
			if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size > 1 {
				break
			}
			s = s[:len(s)-1]
		}
		b, _ := json.Marshal(s)
		if len(b) <= n || s == "" {
			return s
		}
		s = s[:len(s)*n/len(b)] // len(b) > n: it shrinks
	}
}
