// Package egress is the narrow network of a sandbox that asks for one: an
// HTTP proxy (CONNECT for TLS, absolute-form requests for plain HTTP) that
// enforces an allowlist (package allowlist) on the host side. A sandbox
// with an allowlist keeps its own network namespace with only lo and no
// resolver configuration: its one way out is this proxy, reached through a
// socket bound into the sandbox, so a tool that ignores the proxy
// variables has no network at all.
//
// The proxy resolves names itself, matches the name and port the tool
// asked for against the list, refuses an IP literal unless it is listed,
// refuses a resolved address in a range the list never reaches unless that
// very address is listed (allowlist.Forbidden: loopback, link-local and
// cloud metadata, private, shared, multicast, unspecified, local-use
// NAT64; a well-known-prefix NAT64 address judged as the IPv4 address it
// carries, as an IPv4-mapped one is), dials the
// address it checked (never resolving the name again), and never follows a
// redirect: the tool's next request is a new decision. Every connection,
// allowed or refused, is one Record, within the bounds of the audit
// (audit.go): a per-call budget of audit bytes, and one Summary record
// for the connections refused past a per-call cap; per-call limits bound
// connections and bytes.
package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/toolgate/toolgate/egress/allowlist"
)

// Limits bound what one call may do through the proxy; zero means no
// bound.
type Limits struct {
	// Conns is the most connections (allowed or not) one call may open.
	Conns int
	// Bytes is the most bytes, both ways, one call may move.
	Bytes int64
}

// The limits a call can hit, as its result names them.
const (
	LimitConns = "egress-connections"
	LimitBytes = "egress-bytes"
)

// Resolver resolves a name into addresses (net.DefaultResolver's
// LookupNetIP for "ip"; tests pass their own).
type Resolver func(ctx context.Context, host string) ([]netip.Addr, error)

// Config configures one call's proxy.
type Config struct {
	Allow  allowlist.List
	Limits Limits
	// Resolve defaults to the system resolver; Dial to a net.Dialer.
	Resolve Resolver
	Dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	// Record receives every connection's record, within the audit
	// budget, and the Summary of those not recorded one by one; nil
	// discards them.
	Record func(Record)
	// AuditBytes is the audit budget (DefaultAuditBytes when 0): of the
	// proxy's life when AuditWindow is 0 (a call), of each AuditWindow
	// otherwise (a downstream server, which outlives its calls).
	AuditBytes  int64
	AuditWindow time.Duration
	// Inject are the credentials of the destinations that have one, by
	// host:port as listed (allowlist.Rule.String()); CA signs the
	// certificates of their terminated TLS (ServerCA when nil). Every
	// other destination is tunnelled as it is, and gets nothing.
	Inject map[string]Injection
	CA     *CA
	// UpstreamRoots verify the destinations of injected requests; nil is
	// the system roots (SSL_CERT_FILE and SSL_CERT_DIR honoured).
	UpstreamRoots *x509.CertPool
}

// Proxy is the HTTP proxy of one call (or one downstream server's life):
// it serves the connections its listener accepts, each a CONNECT or a
// plain-HTTP absolute-form request, and enforces Config.Allow on each.
type Proxy struct {
	cfg   Config
	srv   *http.Server
	audit *auditor
	conns atomic.Int64
	bytes atomic.Int64
	limit atomic.Value   // string: the limit hit first
	wg    sync.WaitGroup // dials under way and allowed connections not closed yet

	caErr error           // the server CA could not be made: injected destinations answer it
	injTr *http.Transport // the upstream of injected requests

	closeOnce sync.Once

	mu     sync.Mutex
	closed bool                      // Close began: a dial is refused, a dialled connection closed
	live   map[*countedConn]struct{} // allowed connections not closed yet
	// tunnels are the terminated tunnels served now (terminate).
	tunnels map[net.Conn]struct{}
}

// New returns the proxy of cfg; Serve runs it.
func New(cfg Config) *Proxy {
	if cfg.Resolve == nil {
		cfg.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: 10 * time.Second}
		cfg.Dial = d.DialContext
	}
	p := &Proxy{cfg: cfg, live: map[*countedConn]struct{}{}, tunnels: map[net.Conn]struct{}{}, audit: newAuditor(cfg.Record, cfg.AuditBytes, cfg.AuditWindow, time.Now)}
	if len(cfg.Inject) > 0 && cfg.CA == nil {
		p.cfg.CA, p.caErr = ServerCA()
	}
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = log.New(io.Discard, "", 0)
	gp.Verbose = false
	// No connection is made but through dial, which decides; a refusal
	// answers 403 to a CONNECT and to a plain request alike.
	gp.ConnectDialWithReq = func(req *http.Request, _, addr string) (net.Conn, error) {
		return p.dial(req.Context(), addr)
	}
	// Injected requests keep their upstream connections alive (each
	// connection is still one decision and one record): a tool's requests
	// to its API then cost one TLS handshake per connection, not two.
	p.injTr = &http.Transport{
		Proxy:               nil,
		DialContext:         func(ctx context.Context, _, addr string) (net.Conn, error) { return p.dial(ctx, addr) },
		DisableCompression:  true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
		TLSClientConfig:     &tls.Config{RootCAs: cfg.UpstreamRoots, MinVersion: tls.VersionTLS12},
	}
	gp.Tr = &http.Transport{
		Proxy:              nil, // never a proxy of its own
		DialContext:        func(ctx context.Context, _, addr string) (net.Conn, error) { return p.dial(ctx, addr) },
		DisableCompression: true,
		DisableKeepAlives:  true, // one connection, one decision, one record
	}
	// Every CONNECT goes to dial, which decides (and records) it; a
	// refusal answers 403 with the reason, a failed dial 502.
	// A destination with a credential is the exception: its tunnel is
	// the proxy's own (terminate), so that each request inside can be
	// checked and given the credential, and each goes on through dial.
	gp.OnRequest().HandleConnectFunc(func(host string, _ *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		if dest, ok := p.credentialFor(host, ""); ok { // a CONNECT states its port
			return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: func(_ *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
				p.terminate(client, dest)
			}}, host
		}
		return goproxy.OkConnect, host
	})
	gp.ConnectionErrHandler = func(w io.Writer, _ *goproxy.ProxyCtx, err error) {
		status := "502 Bad Gateway"
		if _, ok := errors.AsType[policyError](err); ok {
			status = "403 Forbidden"
		}
		msg := "toolgate egress: " + err.Error() + "\n"
		_, _ = fmt.Fprintf(w, "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", status, len(msg), msg)
	}
	gp.OnRequest().DoFunc(func(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
		if r.URL.Scheme != "http" {
			return r, goproxy.NewResponse(r, "text/plain", http.StatusBadRequest, "toolgate egress: only http:// requests are forwarded; use CONNECT for TLS\n")
		}
		if dest, ok := p.credentialFor(r.URL.Host, "80"); ok {
			return r, p.refuseRequest(r, dest, errClear)
		}
		return r, nil
	})
	gp.OnResponse().DoFunc(func(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
		if resp == nil && ctx.Error != nil {
			status := http.StatusBadGateway
			if _, ok := errors.AsType[policyError](ctx.Error); ok {
				status = http.StatusForbidden
			}
			return goproxy.NewResponse(ctx.Req, "text/plain", status, "toolgate egress: "+ctx.Error.Error()+"\n")
		}
		return resp
	})
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "toolgate egress: a proxy request is an absolute URL or a CONNECT", http.StatusBadRequest)
	})
	p.srv = &http.Server{Handler: gp, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	return p
}

// Serve answers the connections of l until Close; it returns nil then.
func (p *Proxy) Serve(l net.Listener) error {
	err := p.srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops the proxy and every connection through it (a CONNECT
// tunnel is the proxy's own to close: the HTTP server let go of it), and
// returns once each is recorded and the summary of those not recorded one
// by one is written. A dial under way when Close begins is recorded too
// (refused, or closed as soon as dialled); none starts after.
func (p *Proxy) Close() {
	p.closeOnce.Do(p.close)
}

func (p *Proxy) close() {
	_ = p.srv.Close()
	p.mu.Lock()
	p.closed = true
	live := make([]*countedConn, 0, len(p.live))
	for c := range p.live {
		live = append(live, c)
	}
	tunnels := make([]net.Conn, 0, len(p.tunnels))
	for c := range p.tunnels {
		tunnels = append(tunnels, c)
	}
	p.mu.Unlock()
	// A terminated tunnel is the proxy's own to end (the HTTP server let
	// go of it at the CONNECT), as is a tunnelled one's upstream.
	for _, c := range tunnels {
		_ = c.Close()
	}
	p.injTr.CloseIdleConnections()
	for _, c := range live {
		_ = c.Close()
	}
	p.wg.Wait()
	p.audit.close()
}

// Limit names the limit the call hit first ("" when none).
func (p *Proxy) Limit() string {
	s, _ := p.limit.Load().(string)
	return s
}

// Used returns the connections asked for (allowed or refused) and the
// bytes moved both ways so far.
func (p *Proxy) Used() (conns, bytes int64) {
	return p.conns.Load(), p.bytes.Load()
}

func (p *Proxy) hit(limit string) {
	p.limit.CompareAndSwap(nil, limit)
}

// policyError is a refusal by the allowlist or a limit (403), not a
// failure to reach an allowed destination (502).
type policyError struct{ error }

func (e policyError) Unwrap() error { return e.error }

// check decides host:port: the address to dial, or why not. Its errors
// never repeat the host: the record carries it once.
func (p *Proxy) check(ctx context.Context, hostport string) (netip.AddrPort, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return netip.AddrPort{}, errors.New("not host:port")
	}
	n, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || n == 0 {
		return netip.AddrPort{}, errors.New("the port is not a decimal 1 to 65535")
	}
	port := uint16(n)
	if ip, err := netip.ParseAddr(host); err == nil {
		if !p.cfg.Allow.ListsIP(ip, port) {
			return netip.AddrPort{}, errors.New("an IP literal not in the allowlist")
		}
		return netip.AddrPortFrom(ip.Unmap(), port), nil
	}
	if _, ok := p.cfg.Allow.MatchName(host, port); !ok {
		return netip.AddrPort{}, errors.New("not in the allowlist")
	}
	if len(host) > MaxHost {
		// Only a "*." rule matches so long a name: it is no DNS name.
		return netip.AddrPort{}, fmt.Errorf("a name longer than %d bytes", MaxHost)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := p.cfg.Resolve(ctx, host)
	if err != nil {
		// A resolver's error names the host: keep only what it says of it.
		if de, ok := errors.AsType[*net.DNSError](err); ok {
			return netip.AddrPort{}, fmt.Errorf("resolve: %s", de.Err)
		}
		return netip.AddrPort{}, fmt.Errorf("resolve: %w", err)
	}
	var refused []string
	for _, a := range addrs {
		a = a.Unmap()
		if why, bad := allowlist.Forbidden(a); bad && !p.cfg.Allow.ListsIP(a, port) {
			refused = append(refused, a.String()+" ("+why+")")
			continue
		}
		return netip.AddrPortFrom(a, port), nil
	}
	if len(refused) == 0 {
		return netip.AddrPort{}, errors.New("resolves to no address")
	}
	return netip.AddrPort{}, fmt.Errorf("resolves only to addresses that are never reached unless listed: %v", refused)
}

// dial decides hostport, counts it against the limits, dials the checked
// address and records the connection. A refusal's error, which the tool
// reads in its 403 (or 502), names the host as the record does, then why.
func (p *Proxy) dial(ctx context.Context, hostport string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	port, _ := strconv.ParseUint(portStr, 10, 16)
	rec := Record{Port: uint16(port)}
	rec.Host, rec.HostBytes = auditHost(host)
	shown := net.JoinHostPort(rec.Host, strconv.Itoa(int(rec.Port)))
	start := time.Now()
	refuse := func(err error, pastCap string) error {
		rec.Decision, rec.Reason, rec.Elapsed = Refused, err.Error(), time.Since(start)
		p.audit.record(rec, pastCap)
		return fmt.Errorf("%s: %w", shown, err)
	}
	policy := func(err error, pastCap string) error { return refuse(policyError{err}, pastCap) }
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", shown, policyError{errors.New("the proxy is closed: the call has ended")})
	}
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	if n := p.conns.Add(1); p.cfg.Limits.Conns > 0 && n > int64(p.cfg.Limits.Conns) {
		p.hit(LimitConns)
		return nil, policy(fmt.Errorf("more than %d connections in one call (%s)", p.cfg.Limits.Conns, LimitConns), LimitConns)
	}
	if p.cfg.Limits.Bytes > 0 && p.bytes.Load() >= p.cfg.Limits.Bytes {
		p.hit(LimitBytes)
		return nil, policy(fmt.Errorf("the call moved its %d bytes already (%s)", p.cfg.Limits.Bytes, LimitBytes), LimitBytes)
	}
	addr, err := p.check(ctx, hostport)
	if err != nil {
		return nil, policy(err, "")
	}
	rec.Addr = addr.String()
	if ctx.Value(injectedKey{}) != nil {
		rec.Credential = CredentialInjected
	}
	c, err := p.cfg.Dial(ctx, "tcp", addr.String())
	if err != nil {
		return nil, refuse(fmt.Errorf("dial %s: %w", addr, err), "")
	}
	rec.Decision = Allowed
	cc := &countedConn{Conn: c, p: p, rec: rec, start: start}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return nil, refuse(errors.New("the proxy closed while dialling: the call has ended"), "")
	}
	p.wg.Add(1)
	p.live[cc] = struct{}{}
	p.mu.Unlock()
	return cc, nil
}

// countedConn counts the bytes of an allowed connection against the
// call's limit and records the connection when it closes.
type countedConn struct {
	net.Conn
	p        *Proxy
	rec      Record
	start    time.Time
	up, down atomic.Int64
	once     sync.Once
}

func (c *countedConn) Read(b []byte) (int, error) {
	b, err := c.reserve(b)
	if err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	c.settle(len(b), n)
	c.down.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	var done int
	for done < len(b) {
		chunk, err := c.reserve(b[done:])
		if err != nil {
			return done, err
		}
		n, err := c.Conn.Write(chunk)
		c.settle(len(chunk), n)
		c.up.Add(int64(n))
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// reserve takes room for up to len(b) bytes from the call's budget
// (shared by all its connections, so taken before the bytes move), and
// returns b cut to what it took. With the budget spent it closes the
// connection and fails.
func (c *countedConn) reserve(b []byte) ([]byte, error) {
	l := c.p.cfg.Limits.Bytes
	if l <= 0 {
		c.p.bytes.Add(int64(len(b)))
		return b, nil
	}
	for {
		used := c.p.bytes.Load()
		room := l - used
		if room <= 0 {
			c.p.hit(LimitBytes)
			c.rec.Reason = fmt.Sprintf("cut at the call's %d bytes (%s)", l, LimitBytes)
			_ = c.Close()
			return nil, errors.New(c.rec.Reason)
		}
		take := min(int64(len(b)), room)
		if c.p.bytes.CompareAndSwap(used, used+take) {
			return b[:take], nil
		}
	}
}

// settle gives back what a reservation of took did not move.
func (c *countedConn) settle(took, moved int) {
	if took > moved {
		c.p.bytes.Add(int64(moved - took))
	}
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.p.mu.Lock()
		delete(c.p.live, c)
		c.p.mu.Unlock()
		c.rec.Up, c.rec.Down, c.rec.Elapsed = c.up.Load(), c.down.Load(), time.Since(c.start)
		c.p.audit.record(c.rec, "")
		c.p.wg.Done()
	})
	return err
}
