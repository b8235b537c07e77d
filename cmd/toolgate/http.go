package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os/user"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/server"
)

// httpFlags are the flags of serve's streamable HTTP transport.
type httpFlags struct {
	listen          string
	metricsListen   string
	tlsCert         string
	tlsKey          string
	tokens          string
	oauthIssuer     string
	oauthResource   string
	oauthJWKS       string
	oauthAlgs       string
	toolScopes      listFlag
	allowOrigins    listFlag
	allowHosts      listFlag
	listenGroup     string
	perPrincipal    int
	maxConns        int
	maxConnsClient  int
	idleTimeout     time.Duration
	shutdownGrace   time.Duration
	scopes          server.ToolScopes
	oauthConfigured bool
	unixPath        string // --listen unix:PATH
	gid             int    // --listen-group, resolved (-1: none)
	// static are --auth-tokens' tokens once loaded (loadTokens); a
	// reload replaces them.
	static *auth.StaticTokens
}

// loadTokens loads --auth-tokens, when given.
func (f *httpFlags) loadTokens(a *app) error {
	if f.tokens == "" {
		return nil
	}
	t, err := conf.LoadTokens(f.tokens)
	if err != nil {
		return fmt.Errorf("--auth-tokens: %w", err)
	}
	f.static = auth.NewStaticTokens(t)
	a.log.WithField("tokens", len(t.Tokens)).Info("static bearer tokens loaded")
	return nil
}

// listFlag is a flag that may be given more than once.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func (f *httpFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", "", "serve MCP over streamable HTTP instead of stdio, at http://ADDR/mcp: ADDR is host:port, which needs --auth-tokens or --oauth-issuer (loopback too: every local user can reach it), or unix:/PATH, a unix socket only toolgate's user may open (mode 0600; --listen-group), served without a token")
	fs.StringVar(&f.listenGroup, "listen-group", "", "with --listen unix:/PATH: the socket's group (a name or a gid), mode 0660, so that the group's members may connect too")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "also serve /metrics, /healthz and /readyz without authentication on ADDR (host:port, for Prometheus and kubelet probes)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM; with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "the private key of --tls-cert (PEM)")
	fs.StringVar(&f.tokens, "auth-tokens", "", "static bearer tokens: a file of `NAME TOKEN [SCOPE...]` lines (TOKEN may be sha256:HEX), owned and moded as tools.conf must be")
	fs.StringVar(&f.oauthIssuer, "oauth-issuer", "", "OAuth 2.1 resource server: accept JWT access tokens of this issuer (its keys from its metadata, or --oauth-jwks-url)")
	fs.StringVar(&f.oauthResource, "oauth-resource", "", "this server's URL as clients reach it (https://host/mcp): the audience a token must name, and the protected resource metadata's resource")
	fs.StringVar(&f.oauthJWKS, "oauth-jwks-url", "", "the issuer's JWKS URL (default: from its RFC 8414 or OpenID Connect metadata)")
	fs.StringVar(&f.oauthAlgs, "oauth-algs", strings.Join(auth.DefaultOAuthAlgorithms, ","), "signature algorithms accepted (asymmetric only)")
	fs.Var(&f.toolScopes, "tool-scope", "SCOPE=TOOL[,TOOL...]: a token with SCOPE lists and calls these tools (* for all); once given, a tool no scope names is served to no one over HTTP (repeatable)")
	fs.Var(&f.allowOrigins, "allow-origin", "an Origin (scheme://host[:port]) accepted besides loopback ones; a request with any other Origin is refused 403 (repeatable)")
	fs.Var(&f.allowHosts, "allow-host", "a host name a request's Host may give besides IP addresses, localhost and the hosts of --listen, --metrics-listen and --oauth-resource; any other name is refused 403 on every path (DNS rebinding) (repeatable)")
	fs.IntVar(&f.perPrincipal, "max-concurrent-per-principal", goruntime.NumCPU()*2, "calls one principal runs at once over HTTP; the excess queues (0: no bound but --max-concurrent)")
	fs.IntVar(&f.maxConns, "max-connections", server.DefaultMaxConns, "HTTP connections open at once on each listener; one more is closed as soon as it is accepted (0: no bound)")
	fs.IntVar(&f.maxConnsClient, "max-connections-per-client", server.DefaultMaxConnsPerClient, "HTTP connections open at once from one client address (on a unix socket: one uid); one more is closed as soon as it is accepted (0: no bound; raise it behind a proxy, whose connections all come from its address)")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", server.DefaultIdleTimeout, "close an HTTP keep-alive connection idle this long")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", server.DefaultShutdownGrace, "on SIGTERM, how long in-flight HTTP calls may finish before they are killed")
}

// check validates the HTTP flags on their own.
func (f *httpFlags) check() error {
	if f.listen == "" {
		for name, v := range map[string]string{
			"--metrics-listen": f.metricsListen, "--tls-cert": f.tlsCert, "--tls-key": f.tlsKey,
			"--auth-tokens": f.tokens, "--oauth-issuer": f.oauthIssuer, "--oauth-resource": f.oauthResource, "--oauth-jwks-url": f.oauthJWKS,
		} {
			if v != "" {
				return fmt.Errorf("%s is a flag of the HTTP transport: give --listen too", name)
			}
		}
		if len(f.toolScopes) > 0 || len(f.allowOrigins) > 0 || len(f.allowHosts) > 0 {
			return errors.New("--tool-scope, --allow-origin and --allow-host are flags of the HTTP transport: give --listen too")
		}
		if f.listenGroup != "" {
			return errors.New("--listen-group is the group of a unix socket listener: give --listen unix:/PATH too")
		}
		return nil
	}
	f.gid = -1
	if p, ok := strings.CutPrefix(f.listen, server.UnixPrefix); ok {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("--listen %q: want unix:/PATH, an absolute path (unix:/run/toolgate/mcp.sock)", f.listen)
		}
		f.unixPath = p
		if f.listenGroup != "" {
			gid, err := lookupGroup(f.listenGroup)
			if err != nil {
				return fmt.Errorf("--listen-group %q: %w", f.listenGroup, err)
			}
			f.gid = gid
		}
	} else {
		if _, _, err := net.SplitHostPort(f.listen); err != nil {
			return fmt.Errorf("--listen %q: want host:port (127.0.0.1:8080, [::1]:8080, :8080) or unix:/PATH: %w", f.listen, err)
		}
		if f.listenGroup != "" {
			return fmt.Errorf("--listen-group is the group of a unix socket listener, and --listen %q is a TCP address: give --listen unix:/PATH, or drop --listen-group", f.listen)
		}
	}
	if f.maxConns < 0 || f.maxConnsClient < 0 {
		return errors.New("--max-connections and --max-connections-per-client: want 0 (no bound) or more")
	}
	if f.idleTimeout <= 0 {
		return errors.New("--idle-timeout: want a duration above 0 (60s)")
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	f.oauthConfigured = f.oauthIssuer != ""
	if f.oauthConfigured && f.oauthResource == "" {
		return errors.New("--oauth-issuer needs --oauth-resource, this server's URL: the audience its tokens must name")
	}
	if !f.oauthConfigured && (f.oauthResource != "" || f.oauthJWKS != "") {
		return errors.New("--oauth-resource and --oauth-jwks-url need --oauth-issuer")
	}
	f.scopes = server.ToolScopes{}
	for _, v := range f.toolScopes {
		scope, tools, err := server.ParseToolScope(v)
		if err != nil {
			return err
		}
		f.scopes.Add(scope, tools)
	}
	if len(f.scopes) > 0 && f.tokens == "" && !f.oauthConfigured {
		return errors.New("--tool-scope needs authentication (--auth-tokens or --oauth-issuer)")
	}
	if f.perPrincipal < 0 {
		return errors.New("--max-concurrent-per-principal: want 0 or more")
	}
	if f.shutdownGrace < 0 {
		return errors.New("--shutdown-grace: want 0 or more")
	}
	return nil
}

// serveHTTP serves srv over streamable HTTP until ctx ends (SIGTERM), then
// drains. It returns the exit code.
func serveHTTP(ctx context.Context, a *app, srv *server.Server, f *httpFlags, maxBody int, stderr io.Writer) int {
	fail := func(code int, format string, v ...any) int {
		fmt.Fprintf(stderr, "toolgate serve: "+format+"\n", v...)
		return code
	}
	var auths []auth.Authenticator
	opts := server.HTTPOptions{
		Scopes:            f.scopes,
		AllowOrigins:      f.allowOrigins,
		AllowHosts:        append(slices.Clone(f.allowHosts), listenHostNames(f.listen, f.metricsListen)...),
		MaxBodyBytes:      maxBody,
		MaxPerPrincipal:   f.perPrincipal,
		MaxConns:          f.maxConns,
		MaxConnsPerClient: f.maxConnsClient,
		IdleTimeout:       f.idleTimeout,
		ShutdownGrace:     f.shutdownGrace,
		TLSCert:           f.tlsCert,
		TLSKey:            f.tlsKey,
	}
	if f.static != nil {
		auths = append(auths, f.static)
	}
	if f.oauthConfigured {
		var algs []string
		for s := range strings.SplitSeq(f.oauthAlgs, ",") {
			if s = strings.TrimSpace(s); s != "" {
				algs = append(algs, s)
			}
		}
		o, err := auth.NewOAuth(auth.OAuthOptions{
			Issuer: f.oauthIssuer, Resource: f.oauthResource, JWKSURL: f.oauthJWKS, Algorithms: algs, Log: a.log,
		})
		if err != nil {
			return fail(2, "%v", err)
		}
		defer o.Close()
		auths = append(auths, o)
		opts.OAuth, opts.Resource = o, f.oauthResource
	}
	if len(auths) > 0 {
		opts.Auth = auth.Chain(auths...)
	}
	h, err := server.NewHTTP(srv, opts)
	if err != nil {
		return fail(2, "%v", err)
	}
	var ln net.Listener
	if f.unixPath != "" {
		ln, err = server.ListenUnix(f.unixPath, f.gid)
	} else {
		ln, err = net.Listen("tcp", f.listen)
	}
	if err != nil {
		return fail(1, "--listen: %v", err)
	}
	defer ln.Close() // a unix socket's Close removes it
	if err := server.CheckListen(ln.Addr(), opts.Auth != nil); err != nil {
		return fail(2, "%v", err)
	}
	var mln net.Listener
	if f.metricsListen != "" {
		if mln, err = net.Listen("tcp", f.metricsListen); err != nil {
			return fail(1, "--metrics-listen: %v", err)
		}
		defer mln.Close()
		fmt.Fprintf(stderr, "toolgate serve: metrics and probes on http://%s/metrics\n", mln.Addr())
	}
	if len(f.scopes) > 0 {
		served := srv.ServedNames()
		if u := f.scopes.Unmapped(served); len(u) > 0 {
			a.log.WithField("tools", strings.Join(u, " ")).Warn("--tool-scope: no scope opens these tools: no HTTP principal lists or calls them")
		}
		var unknown []string
		for _, n := range f.scopes.Unknown(served) {
			if !strings.Contains(n, "__") { // a downstream tool may be listed later
				unknown = append(unknown, n)
			}
		}
		if len(unknown) > 0 {
			a.log.WithField("tools", strings.Join(unknown, " ")).Warn("--tool-scope names tools that are not served")
		}
	}
	scheme := "http"
	if f.tlsCert != "" {
		scheme = "https"
	}
	if opts.Auth == nil {
		who := "toolgate's user"
		if f.gid >= 0 {
			who = fmt.Sprintf("toolgate's user and group %d", f.gid)
		}
		a.log.WithField("socket", f.unixPath).Infof("serving MCP on a unix socket without authentication: every process of %s may connect, as principal %q", who, auth.LocalPrincipal)
	} else if scheme == "http" {
		if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
			a.log.Warn("serving MCP over plain HTTP on a non-loopback address: bearer tokens cross the network in the clear unless a TLS proxy or mesh is in front (--tls-cert, --tls-key)")
		}
	}
	if f.unixPath != "" {
		fmt.Fprintf(stderr, "toolgate serve: MCP on %s%s (%s through the socket)\n", server.UnixPrefix, f.unixPath, server.MCPPath)
	} else {
		fmt.Fprintf(stderr, "toolgate serve: MCP on %s://%s%s\n", scheme, ln.Addr(), server.MCPPath)
	}
	a.log.WithField("tools", len(srv.Served())).Info("serving MCP over streamable HTTP")
	if err := h.Serve(ctx, ln, mln); err != nil && !errors.Is(err, context.Canceled) {
		return fail(1, "%v", err)
	}
	a.log.Info("signal: HTTP server stopped")
	return 0
}

// lookupGroup resolves --listen-group: a group name, or a numeric gid.
func lookupGroup(name string) (int, error) {
	if gid, err := strconv.Atoi(name); err == nil {
		if gid < 0 {
			return 0, errors.New("want a group name or a gid of 0 or more")
		}
		return gid, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("no such group (want a group name or a gid): %w", err)
	}
	return strconv.Atoi(g.Gid)
}

// listenHostNames are the host names of the --listen and --metrics-listen
// addresses (not IP literals, not empty): a request may name them in its
// Host.
func listenHostNames(addrs ...string) []string {
	var out []string
	for _, a := range addrs {
		if strings.HasPrefix(a, server.UnixPrefix) {
			continue
		}
		h, _, err := net.SplitHostPort(a)
		if err != nil || h == "" || net.ParseIP(h) != nil {
			continue
		}
		out = append(out, h)
	}
	return out
}
