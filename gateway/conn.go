package gateway

// A downstream server's connection: started (stdio) or connected (HTTP)
// on demand within startup_timeout_sec, ended on a broken session, a call
// past its budget, or Close. Its stdio writes are bounded in
// stdio.go, what it sends in cap.go.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/internal/jsonrpc"
	"github.com/toolgate/toolgate/internal/toolcall"
	rt "github.com/toolgate/toolgate/runtime"
)

// Protocol is the MCP protocol version toolgate asks downstream
// servers for; a server may answer with an older one it supports.
const Protocol = mcp.ProtocolVersion20250618

// closeGrace is how long a stdio server gets to exit after its
// stdin is closed before it is killed.
const closeGrace = time.Second

// dconn is one live connection: a started process or an HTTP session.
type dconn struct {
	client *client.Client
	proc   *rt.Process // nil for HTTP
	n      int         // start number, for logs

	// changed is signalled by the server's
	// notifications/tools/list_changed: watch lists it again.
	changed chan struct{}

	mu     sync.Mutex
	reason string // why it ended; "" while alive
	dead   chan struct{}
	// discarded are the reasons toolgate answered in place of oversized
	// responses (see cap.go), until the call each answers
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

// get returns the live connection, starting or connecting when there is
// none (bounded by startup_timeout_sec), and lists the tools when the
// start-up listing failed. A call that finds another starting the server
// waits for it within its own context (and startup_timeout_sec), never
// holding the lock that shutdown and the other calls take.
func (d *Server) get(ctx context.Context) (*dconn, error) {
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
	if d.deps.Stopping() {
		return nil, errStopping
	}
	c, err := d.connect(ctx)
	if err != nil {
		return nil, err
	}
	// Every start is listed again: what it serves is judged against the
	// pins (and the definitions first served) before any call reaches it.
	// This listing covers a list_changed the server sent while starting.
	c.drainChanged()
	lctx, cancel := context.WithTimeout(ctx, d.srv.StartupTimeout)
	l, err := listTools(lctx, c.client, d.srv.Enabled)
	cancel()
	if err != nil {
		d.close(c, "listing failed", 0)
		return nil, fmt.Errorf("tools/list: %s", d.redact(err.Error()))
	}
	d.relisted(l, c.n)
	d.mu.Lock()
	if d.deps.Stopping() { // Close ran while it started: shutdown saw no connection
		d.mu.Unlock()
		d.close(c, "toolgate is stopping", 0)
		return nil, errStopping
	}
	d.conn = c
	d.mu.Unlock()
	go d.watch(c)
	return c, nil
}

// watch re-lists the server on each notifications/tools/list_changed it
// sends while c is its connection (one at a time; those that come during
// a listing make one more).
func (d *Server) watch(c *dconn) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-c.dead
		cancel()
	}()
	for {
		select {
		case <-c.dead:
			return
		case <-c.changed:
		}
		lctx, lcancel := context.WithTimeout(ctx, d.srv.StartupTimeout)
		l, err := listTools(lctx, c.client, d.srv.Enabled)
		lcancel()
		if err != nil {
			if _, ended := c.ended(); !ended {
				d.log.WithFields(logrus.Fields{"start": c.n, "reason": d.redact(err.Error())}).Warn("downstream server said its tools changed, and could not be listed: what is served of it stays as it was")
			}
			continue
		}
		d.log.WithFields(logrus.Fields{"start": c.n, "offered": l.offered}).Info("downstream server listed again: it said its tools changed")
		d.relisted(l, c.n)
		// At most one listing a second, however often a server says so.
		select {
		case <-c.dead:
			return
		case <-time.After(relistInterval):
		}
	}
}

// relistInterval is the least time between two listings a server asks
// for.
const relistInterval = time.Second

// drainChanged forgets a list_changed the server sent before a listing
// that covers it.
func (c *dconn) drainChanged() {
	select {
	case <-c.changed:
	default:
	}
}

// live returns the current connection if it has not ended.
func (d *Server) live() *dconn {
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
func (d *Server) connect(ctx context.Context) (*dconn, error) {
	if d.deps.Stopping() {
		return nil, errStopping
	}
	if err := d.checkVars(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.srv.StartupTimeout)
	defer cancel()
	d.starts++
	c := &dconn{n: d.starts, dead: make(chan struct{}), changed: make(chan struct{}, 1)}
	start := time.Now()
	var err error
	if d.srv.Transport == registry.TransportStdio {
		err = d.startStdio(ctx, c)
	} else {
		err = d.startHTTP(ctx, c)
	}
	if err != nil {
		return nil, err
	}
	c.client.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == string(mcp.MethodNotificationToolsListChanged) {
			select {
			case c.changed <- struct{}{}:
			default: // a listing is due already
			}
		}
	})
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = Protocol
	req.Params.ClientInfo = mcp.Implementation{Name: "toolgate", Version: d.deps.Version}
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
func (d *Server) startStdio(ctx context.Context, c *dconn) error {
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
	if len(d.srv.AllowedHosts) > 0 {
		svc.Egress = d.srv.AllowedHosts
		svc.EgressRecord = d.deps.Egress(&audit.Call{Tool: d.srv.ID, Server: d.srv.ID, Call: svc.ID})
		svc.Inject = toolcall.Injections(d.srv.Credentials)
	}
	p, err := d.starter.StartService(ctx, svc)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	c.proc = p
	limit := messageMax(d.maxBytes())
	answer := d.oversized(c, limit)
	stdout := jsonrpc.NewLineCap(p.Stdout(), limit, func(o jsonrpc.Oversize) ([]byte, error) {
		if b := answer(o); b != nil || o.Method {
			return b, nil
		}
		// No id to answer: the waiting call cannot be told apart. End
		// the connection (every call in flight answers with this reason)
		// and start the server again on the next call.
		reason := fmt.Sprintf("it wrote a message of %d bytes, over toolgate's cap of %d bytes for one message, with no id toolgate could read; it was stopped", o.Size, limit)
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
	c.client = client.NewClient(bounded, client.WithProtocolVersion(Protocol))
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
func (d *Server) oversized(c *dconn, limit int) func(jsonrpc.Oversize) []byte {
	return func(o jsonrpc.Oversize) []byte {
		e := d.log.WithFields(logrus.Fields{"start": c.n, "bytes": o.Size, "cap": limit})
		switch {
		case o.Method:
			e.Warn("downstream server sent a request or notification over the message cap: discarded")
			return nil
		case o.ID == nil:
			e.Warn("downstream server sent a message over the message cap with no readable id: discarded")
			return nil
		}
		reason := fmt.Sprintf("a response of %d bytes, over toolgate's cap of %d bytes for one downstream message (--downstream-max-bytes, at least 1 MiB, plus 64 KiB for the envelope); it was discarded as it was read",
			o.Size, limit)
		c.noteDiscarded(reason)
		e.Warn("downstream response over the message cap: discarded, its call answers isError")
		return jsonrpc.ErrorLine(o.ID, oversizeCode, reason)
	}
}

// startHTTP connects an MCP client to the URL. The headers (the bearer
// token and env_http_headers read from the environment at each request)
// are set by the HTTP client's transport, so that every request carries
// them, mcp-go's session DELETE included; redirects are not followed, and
// the headers go to the configured origin only.
func (d *Server) startHTTP(ctx context.Context, c *dconn) error {
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
// is closed (waiting at most closeGrace for the server).
func (d *Server) close(c *dconn, reason string, grace time.Duration) {
	c.end(reason)
	if c.proc == nil {
		done := make(chan struct{})
		go func() {
			_ = c.client.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(closeGrace):
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
func (d *Server) drop(c *dconn, reason string) {
	d.mu.Lock()
	if d.conn == c {
		d.conn = nil
	}
	d.mu.Unlock()
	d.log.WithFields(logrus.Fields{"start": c.n, "reason": reason}).Warn("downstream server stopped")
	d.close(c, reason, 0)
}

// Shutdown ends the live connection, if any (server.Close); a later call
// starts the server again unless Deps.Stopping says Close has begun.
func (d *Server) Shutdown() {
	d.mu.Lock()
	c := d.conn
	d.conn = nil
	d.mu.Unlock()
	if c != nil {
		d.close(c, "toolgate is stopping", closeGrace)
	}
}

// Retire ends the server for good, a reload having replaced or removed
// it: no call enters it from now on (each answers isError: call again,
// and the call reaches the server that replaced it). Drain then stops
// it.
func (d *Server) Retire() {
	d.mu.Lock()
	d.retired = true
	d.mu.Unlock()
}

// Drain waits, once Retire has run, for the calls already in the server
// to finish, within their own tool_timeout_sec, and then ends its
// connection as Shutdown does. The server never starts again.
func (d *Server) Drain() {
	d.calls.Wait()
	d.Shutdown()
}

// enter counts a call into the server; false once Retire has begun.
func (d *Server) enter() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.retired {
		return false
	}
	d.calls.Add(1)
	return true
}

// ID is the server's id in the registry.
func (d *Server) ID() string { return d.srv.ID }

// errStopping refuses to start a downstream server once Close has begun.
var errStopping = errors.New("toolgate is stopping")
