package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/propagation"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/jsonrpc"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/policy"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/status"
)

// MCPPath is the MCP endpoint of the HTTP transport.
const MCPPath = "/mcp"

// HTTP defaults.
const (
	// DefaultShutdownGrace is how long SIGTERM lets in-flight calls finish
	// before they are killed.
	DefaultShutdownGrace = 25 * time.Second
	// DefaultSessionIdle forgets a 2025-11-25 session unused that long.
	DefaultSessionIdle = 30 * time.Minute
	// maxSessionsPerPrincipal bounds one principal's live sessions.
	maxSessionsPerPrincipal = 256
	// maxHeaderBytes bounds a request's headers (a token included): a
	// larger request is answered 431 before anything reads it.
	maxHeaderBytes = 64 << 10
	// bodyTimeout bounds how long a request body may take to arrive.
	bodyTimeout = 60 * time.Second
	// builtinQueueTimeout bounds how long a call with no timeout of its
	// own (a built-in, a downstream tool) waits for a principal's slot.
	builtinQueueTimeout = time.Minute
)

// HTTPOptions configure the streamable HTTP transport.
type HTTPOptions struct {
	// Auth checks bearer tokens; nil serves without authentication, which
	// Serve accepts only on a unix socket (ListenUnix): every request is
	// then principal "local" (auth.MethodLocal).
	Auth auth.Authenticator
	// OAuth, when set, is also in Auth: its issuer is named in the
	// protected resource metadata, and /readyz waits for its keys.
	OAuth *auth.OAuth
	// Resource is this server's URL (--oauth-resource): the protected
	// resource metadata's resource, and the base of the metadata URL that
	// a 401 names.
	Resource string
	// Scopes maps scopes to tools; empty lets every principal use every
	// tool.
	Scopes ToolScopes
	// AllowOrigins are the Origin values accepted besides loopback ones
	// (scheme://host[:port]).
	AllowOrigins []string
	// AllowHosts are the host names a request's Host may name besides IP
	// literals and localhost (serve --allow-host, and the host names of
	// --listen and --metrics-listen); Resource's host is one too. A
	// request naming any other is refused 403 on every path of both
	// listeners (DNS rebinding); one over a unix socket is not checked.
	AllowHosts []string
	// MaxConns bounds the connections open at once on each listener, and
	// MaxConnsPerClient those of one client address (a unix socket's: of
	// one uid); 0 is no bound. A connection over either is closed as soon
	// as it is accepted.
	MaxConns, MaxConnsPerClient int
	// IdleTimeout closes a keep-alive connection idle that long
	// (DefaultIdleTimeout if 0).
	IdleTimeout time.Duration
	// MaxBodyBytes bounds a request body (DefaultMaxRequestBytes if 0).
	MaxBodyBytes int
	// MaxPerPrincipal bounds one principal's concurrent calls (0: no
	// bound but --max-concurrent's).
	MaxPerPrincipal int
	// ShutdownGrace bounds how long in-flight calls may finish after the
	// serving context ends (DefaultShutdownGrace if 0).
	ShutdownGrace time.Duration
	// TLSCert and TLSKey serve HTTPS when both are set.
	TLSCert, TLSKey string
}

// HTTP is toolgate's streamable HTTP transport: MCP at /mcp behind Origin
// validation, authentication, a body cap and scope checks, beside
// /healthz, /readyz, /metrics and the protected resource metadata.
type HTTP struct {
	s        *Server
	opts     HTTPOptions
	metrics  *Metrics // the Server's (Options.Metrics): served at /metrics, authenticated
	mcp      *mcpserver.StreamableHTTPServer
	sessions *sessions
	limits   *principalLimits
	scopes   *policy.Engine // Scopes compiled (policy.FromScopes); nil without --tool-scope
	prmPath  string
	prmURL   string
	mux      *http.ServeMux
	handler  http.Handler // mux behind the Host check
	hosts    map[string]bool
	inflight inflight
	draining atomic.Bool
	calls    sync.WaitGroup
	inFlight atomic.Int64
}

// NewHTTP returns the HTTP transport of s. It changes nothing of s: the
// requests it serves carry it in their context, and the tool filter and
// middleware New installed on every Server apply its scopes and
// per-principal limits to them (gateTools, gateCall); s's metrics
// (Options.Metrics) are served at /metrics.
func NewHTTP(s *Server, opts HTTPOptions) (*HTTP, error) {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxRequestBytes
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = DefaultShutdownGrace
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.MaxConns < 0 || opts.MaxConnsPerClient < 0 {
		return nil, errors.New("--max-connections and --max-connections-per-client: want 0 (no bound) or more")
	}
	hosts := map[string]bool{}
	for _, name := range opts.AllowHosts {
		n, err := normalHostName(name)
		if err != nil {
			return nil, fmt.Errorf("--allow-host %q: %w", name, err)
		}
		hosts[n] = true
	}
	for _, o := range opts.AllowOrigins {
		if _, err := normalOrigin(o); err != nil {
			return nil, fmt.Errorf("--allow-origin %q: %w", o, err)
		}
	}
	if len(opts.Scopes) > 0 && opts.Auth == nil {
		return nil, errors.New("--tool-scope needs authentication (--auth-tokens or --oauth-issuer): without it there are no scopes")
	}
	if len(opts.Scopes) > 0 && s.opts.Policy != nil {
		return nil, errors.New("--tool-scope and --policy: give one; --tool-scope is a shorthand for policies (docs/policy.md), write its scopes in the policy file")
	}
	scopes, err := policy.FromScopes(opts.Scopes)
	if err != nil {
		return nil, fmt.Errorf("--tool-scope: %w", err)
	}
	h := &HTTP{
		s:        s,
		opts:     opts,
		metrics:  s.metrics,
		sessions: newSessions(maxSessionsPerPrincipal, DefaultSessionIdle),
		limits:   newPrincipalLimits(opts.MaxPerPrincipal),
		scopes:   scopes,
		hosts:    hosts,
		inflight: inflight{m: map[inflightKey][]*inflightCall{}},
	}
	if opts.OAuth != nil {
		if opts.Resource == "" {
			return nil, errors.New("OAuth needs the resource URL (--oauth-resource)")
		}
		u, err := url.Parse(opts.Resource)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("--oauth-resource %q: not an absolute URL", opts.Resource)
		}
		h.prmPath = mcpserver.ProtectedResourceMetadataPath(opts.Resource)
		h.prmURL = u.Scheme + "://" + u.Host + h.prmPath
		h.hosts[strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")] = true
	}
	slogger := slog.New(slog.NewTextHandler(s.log.WriterLevel(logrus.DebugLevel), nil))
	h.mcp = mcpserver.NewStreamableHTTPServer(s.mcp,
		mcpserver.WithEndpointPath(MCPPath),
		mcpserver.WithSessionIdManagerResolver(h.sessions),
		mcpserver.WithSessionIdleTTL(DefaultSessionIdle),
		mcpserver.WithStreamableHTTPLogger(slogger),
		// One Host rule decides, for every path: checkHost's.
		mcpserver.WithDisableLocalhostProtection(true),
	)
	h.mux = http.NewServeMux()
	h.mux.HandleFunc(MCPPath, h.serveMCP)
	h.mux.HandleFunc("/healthz", h.healthz)
	h.mux.HandleFunc("/readyz", h.readyz)
	h.mux.HandleFunc("/metrics", h.authenticated(h.serveMetrics))
	if opts.OAuth != nil {
		prm := mcpserver.NewProtectedResourceMetadataHandler(mcpserver.ProtectedResourceMetadataConfig{
			Resource:               opts.Resource,
			AuthorizationServers:   []string{opts.OAuth.Issuer()},
			ScopesSupported:        opts.Scopes.Scopes(),
			BearerMethodsSupported: []string{"header"},
			ResourceName:           "toolgate",
		})
		h.mux.Handle(h.prmPath, prm)
		if h.prmPath != mcpserver.WellKnownProtectedResourcePath {
			h.mux.Handle(mcpserver.WellKnownProtectedResourcePath, prm)
		}
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not found: MCP is served at "+MCPPath, http.StatusNotFound)
	})
	h.handler = h.checkHost(h.mux)
	return h, nil
}

// InFlight is the number of tool calls being served over HTTP.
func (h *HTTP) InFlight() int { return int(h.inFlight.Load()) }

// CheckListen refuses to serve without authentication on anything but a
// unix socket: on a TCP address, loopback included, every local user (and
// every sandboxed server given network access) could connect and run every
// tool, while a unix socket's mode says who may (ListenUnix). addr is the
// address bound (a listener's).
func CheckListen(addr net.Addr, authenticated bool) error {
	if authenticated {
		return nil
	}
	if _, ok := addr.(*net.UnixAddr); ok {
		return nil
	}
	who := "anyone who can reach it"
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		who = "every local user, and every sandboxed server given network access,"
	}
	return fmt.Errorf("refusing to serve MCP over HTTP on %s without authentication: %s could run every tool; give --auth-tokens or --oauth-issuer, or serve local clients on a unix socket only your user may open (--listen unix:/run/toolgate/mcp.sock; --listen-group for a group)", addr, who)
}

// Serve serves on ln until ctx is done, then shuts down gracefully:
// /readyz answers 503, no new connection is accepted, in-flight requests
// get ShutdownGrace to finish, and then the calls still running are
// cancelled (killed and cleaned as over stdio) and their connections
// closed. It returns nil after a shutdown. metrics, when not nil, serves
// /metrics, /healthz and /readyz without authentication (for Prometheus
// and kubelet probes).
func (h *HTTP) Serve(ctx context.Context, ln, metrics net.Listener) error {
	if err := CheckListen(ln.Addr(), h.opts.Auth != nil); err != nil {
		return err
	}
	// Requests (and the calls they run) live on past ctx, until the grace
	// ends.
	base, kill := context.WithCancel(context.WithoutCancel(ctx))
	defer kill()
	errorLog := log.New(h.s.log.WriterLevel(logrus.DebugLevel), "http: ", 0)
	srv := &http.Server{
		Handler:           h.handler,
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnContext:       connContext,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       h.opts.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          errorLog,
	}
	ln = newLimitListener(ln, listenerMCP, h.opts.MaxConns, h.opts.MaxConnsPerClient, h.metrics)
	tlsOn := h.opts.TLSCert != "" || h.opts.TLSKey != ""
	if tlsOn {
		if h.opts.TLSCert == "" || h.opts.TLSKey == "" {
			return errors.New("--tls-cert and --tls-key go together")
		}
		cert, err := tls.LoadX509KeyPair(h.opts.TLSCert, h.opts.TLSKey)
		if err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	errc := make(chan error, 2)
	go func() {
		var err error
		if tlsOn {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		errc <- err
	}()
	var msrv *http.Server
	if metrics != nil {
		mmux := http.NewServeMux()
		mmux.HandleFunc("/healthz", h.healthz)
		mmux.HandleFunc("/readyz", h.readyz)
		mmux.HandleFunc("/metrics", h.serveMetrics)
		msrv = &http.Server{
			Handler: h.checkHost(mmux), ConnContext: connContext, ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout: h.opts.IdleTimeout, MaxHeaderBytes: maxHeaderBytes, ErrorLog: errorLog,
		}
		mln := newLimitListener(metrics, listenerMetrics, h.opts.MaxConns, h.opts.MaxConnsPerClient, h.metrics)
		go func() { errc <- msrv.Serve(mln) }()
	}
	select {
	case err := <-errc:
		kill()
		_ = srv.Close()
		if msrv != nil {
			_ = msrv.Close()
		}
		return err
	case <-ctx.Done():
	}
	h.draining.Store(true)
	n := h.InFlight()
	h.s.log.WithFields(logrus.Fields{"calls": n, "grace": h.opts.ShutdownGrace}).Info("shutting down: no new connections; in-flight calls may finish")
	// Listening GET streams never end by themselves: end them, so that
	// only requests running calls hold the shutdown.
	h.mcp.CloseSessions(context.Background())
	gctx, cancel := context.WithTimeout(context.Background(), h.opts.ShutdownGrace)
	err := srv.Shutdown(gctx)
	cancel()
	if err != nil {
		left := h.InFlight()
		h.s.log.WithField("calls", left).Warn("shutdown grace passed: killing the calls still running")
		kill()
		// A cancelled call kills its processes and returns; give them a
		// moment to answer before the connections go.
		done := make(chan struct{})
		go func() { h.calls.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		_ = srv.Close()
	}
	if msrv != nil {
		_ = msrv.Close()
	}
	return nil
}

// ready reports whether the server should get traffic: tools.conf and
// the registry not refused (absent is a valid deployment: built-ins
// only), the sandbox backend's self-test answered ready, the issuer's
// keys loaded, not shutting down; with the reason when not. A refused conf
// or registry serves on (built-ins only) but is never ready, so that a
// broken rollout stops instead of replacing the pods that work.
func (h *HTTP) ready() (bool, map[string]any) {
	st := map[string]any{}
	ok := true
	if c := h.s.conf.Load(); c != nil {
		st["conf"] = string(c.State)
		if c.State == conf.StateRefused {
			ok = false
			first := "refused"
			if len(c.Errors) > 0 {
				first = c.Errors[0].Error()
			}
			st["conf_reason"] = refusedReason("tools.conf "+c.Path, len(c.Errors), first, conf.RefusedEffect)
		}
	} else {
		st["conf"] = "none"
	}
	switch r := h.s.registryStatus(); {
	case r != nil:
		st["registry"] = r.State
		if r.State == string(conf.StateRefused) {
			ok = false
			first := r.Reason
			if len(r.Errors) > 0 {
				first = r.Errors[0]
			}
			st["registry_reason"] = refusedReason("the tool-MCP registry "+r.Dir, len(r.Errors), first, "every downstream server is disabled; built-in and tools.conf tools are unaffected")
		}
	case h.s.listed != nil:
		// StartDownstream began but has not recorded the registry's
		// state yet: it may still refuse it (a name collision).
		st["registry"] = "pending"
		ok = false
	}
	state, err := h.s.opts.Sandbox.State()
	st["sandbox"] = map[string]any{"backend": h.s.opts.Sandbox.Name(), "state": string(state)}
	if state != rt.SandboxReady {
		ok = false
		if err != nil {
			st["sandbox"].(map[string]any)["reason"] = err.Error()
		}
	}
	if h.opts.OAuth != nil {
		loaded, err := h.opts.OAuth.Ready()
		o := map[string]any{"keys_loaded": loaded}
		if err != nil {
			o["reason"] = err.Error()
		}
		st["oauth"] = o
		ok = ok && loaded
	}
	if h.draining.Load() {
		st["shutting_down"] = true
		ok = false
	}
	st["ready"] = ok
	return ok, st
}

// refusedReason says in one line why a refused conf or registry keeps the
// server unready: what, how many refusals, the first, and their effect.
// The full list is in the log, checkpoint_status and toolgate check.
func refusedReason(what string, n int, first, effect string) string {
	more := ""
	if n > 1 {
		more = fmt.Sprintf(" (and %d more: see the log or toolgate check)", n-1)
	}
	return fmt.Sprintf("%s refused: %s%s; %s", what, first, more, effect)
}

func (h *HTTP) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

func (h *HTTP) readyz(w http.ResponseWriter, _ *http.Request) {
	ok, st := h.ready()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(st)
}

func (h *HTTP) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if h.metrics == nil {
		http.Error(w, "metrics are off", http.StatusNotFound)
		return
	}
	h.metrics.Handler().ServeHTTP(w, r)
}

// envelope is what serveMCP reads of a request before mcp-go does.
type envelope struct {
	Method string          `json:"method"`
	ID     json.RawMessage `json:"id"`
	Params struct {
		Name      string          `json:"name"`
		RequestID json.RawMessage `json:"requestId"` // notifications/cancelled's
		Meta      map[string]any  `json:"_meta"`
	} `json:"params"`
}

// stateless reports whether a request is of the 2026-07-28 revision (or
// later), decided as mcp-go decides it (its detectRequestEra): by the
// MCP-Protocol-Version header or by the _meta protocol version, either.
// Such a request has no session, whatever header it carries.
func (e *envelope) stateless(r *http.Request) bool {
	v, _ := e.Params.Meta[mcp.MetaKeyProtocolVersion].(string)
	return mcp.IsModernProtocol(v) || mcp.IsModernProtocol(r.Header.Get(mcp.HeaderProtocolVersion))
}

// isRequest reports a message with a method and an id: a request, which
// a notifications/cancelled may name.
func (e *envelope) isRequest() bool {
	return e.Method != "" && len(e.ID) > 0 && string(e.ID) != "null"
}

// serveMCP is /mcp: Origin, token, session ownership, body cap, the scope
// of a tools/call, then mcp-go's streamable HTTP server with the
// principal in the request's context.
func (h *HTTP) serveMCP(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	w = rec
	defer func() { h.metrics.request(r.Method, rec.code) }()
	if !h.checkOrigin(w, r) {
		return
	}
	p, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	// The token has done its work and goes no further (mcp-go hands the
	// headers to every handler).
	r.Header.Del("Authorization")
	sid := r.Header.Get(mcpserver.HeaderKeySessionID)
	if sid != "" && !h.sessions.owns(p.Key(), sid) {
		http.Error(w, "session not found", http.StatusNotFound)
		return
	}
	if r.Method == http.MethodPost {
		// A body must arrive within bodyTimeout: a client that trickles it
		// holds no connection for long. (A server-wide ReadTimeout would
		// also cut the long responses of long calls.)
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(bodyTimeout))
		body, err := readBody(r, h.opts.MaxBodyBytes)
		_ = rc.SetReadDeadline(time.Time{})
		if err != nil {
			h.metrics.limit("request_body")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			_, _ = w.Write(jsonrpc.ErrorLine(json.RawMessage("null"), mcp.INVALID_REQUEST, "Invalid Request: "+err.Error()))
			return
		}
		var env envelope
		_ = json.Unmarshal(body, &env) // mcp-go answers what does not decode
		switch env.Method {
		case string(mcp.MethodToolsCall):
			if h.s.known(env.Params.Name) && !h.scopeAllows(p, env.Params.Name) {
				h.refuseScope(w, p, env)
				return
			}
		case string(mcp.MethodNotificationCancelled):
			// Never handed to mcp-go, whose in-flight map keys a
			// stateless request by its id alone (every 2026-07-28
			// request's session id is ""), so that one principal's cancel
			// named another's call. A 2025-11-25 cancel in the sender's
			// own session reaches that principal's request of that id in
			// that session (h.inflight). A 2026-07-28 one is answered and
			// ignored, as that revision says of HTTP: closing the
			// request's stream is the cancellation, no notification is
			// expected, and its id (unique only per client) could name
			// another client's call of the same principal.
			if !env.stateless(r) && sid != "" {
				h.inflight.cancel(p.Key(), sid, env.Params.RequestID)
			}
			w.WriteHeader(http.StatusAccepted)
			return
		}
		if r, ok = h.takeRate(w, r, p, env); !ok {
			return
		}
		if env.Method == string(mcp.MethodToolsCall) && len(env.ID) > 0 {
			// The call's id, for its audit record.
			r = r.WithContext(jsonrpc.WithCallInfo(r.Context(), jsonrpc.CallInfo{ID: jsonrpc.CanonicalID(env.ID)}))
		}
		if !env.stateless(r) && sid != "" && env.isRequest() {
			ctx, done := h.inflight.add(r.Context(), p.Key(), sid, env.ID)
			defer done()
			r = r.WithContext(ctx)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	ctx := r.Context()
	if h.s.opts.Tracing != nil {
		// The W3C headers' trace context; a request's _meta wins
		// (traceCall).
		ctx = telemetry.FromHeaders(ctx, propagation.HeaderCarrier(r.Header))
	}
	h.mcp.ServeHTTP(w, r.WithContext(withHTTP(auth.WithPrincipal(ctx, p), h)))
}

// readBody reads at most max bytes of r's body: a longer one (by its
// Content-Length or as it is read) is an error, and what was read is let
// go.
func readBody(r *http.Request, max int) ([]byte, error) {
	if r.ContentLength > int64(max) {
		return nil, fmt.Errorf("the request body is %d bytes, over the limit of %d bytes (toolgate serve --max-request-bytes)", r.ContentLength, max)
	}
	if r.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	if len(b) > max {
		return nil, fmt.Errorf("the request body is over the limit of %d bytes (toolgate serve --max-request-bytes)", max)
	}
	return b, nil
}

// statusRecorder remembers the status code written, and passes Flush on
// (mcp-go streams SSE through it).
type statusRecorder struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *Server) kindOf(name string) status.Kind {
	for _, t := range s.Served() {
		if t.Name == name {
			return t.Kind
		}
	}
	return ""
}

func (s *Server) backendOf(name string) string {
	for _, t := range s.Served() {
		if t.Name == name {
			return t.Backend
		}
	}
	return ""
}

// ServedNames lists the names of the tools served.
func (s *Server) ServedNames() []string {
	var out []string
	for _, t := range s.Served() {
		out = append(out, t.Name)
	}
	return slices.Clip(out)
}

// bounded cuts s to at most n bytes and replaces what does not print, so
// that a value quoted in an error cannot flood or forge a line. It is
// lossy: never use it for what must tell two values apart (showClaim).
func bounded(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, s)
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "")
	}
	return s
}
