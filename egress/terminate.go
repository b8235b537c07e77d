package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The bounds of a terminated tunnel (a CONNECT to a destination with a
// credential): the proxy serves the tool's requests inside it itself, so
// each is bounded as toolgate's own HTTP server bounds a request.
const (
	// tunnelHandshake bounds the 200 and the TLS handshake.
	tunnelHandshake = 10 * time.Second
	// tunnelIdle ends a tunnel that sends no request for this long.
	tunnelIdle = 60 * time.Second
	// tunnelHeaderBytes bounds one request's header.
	tunnelHeaderBytes = 64 << 10
	// MaxTunnels bounds the terminated tunnels one proxy holds at once:
	// the default per-call connection cap (256).
	MaxTunnels = 256
)

// methods are what a credentialed destination is sent (upper case): no
// TRACE or CONNECT (they would echo the credential back or tunnel past
// it), no method a server might read as one of those.
var methods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// hopByHop are the headers of one connection, never passed on.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// terminate serves a CONNECT to dest (a destination with a credential) on
// client: the 200, the TLS of the server CA's certificate for dest, then
// each request the tool sends inside, checked, given the credential and
// sent on (injector). The tunnel is the proxy's own: Close ends it.
func (p *Proxy) terminate(client net.Conn, dest string) {
	defer client.Close()
	if !p.trackTunnel(client) {
		p.refuseTunnel(client, dest, fmt.Errorf("more than %d tunnels to credentialed destinations at once", MaxTunnels))
		return
	}
	defer p.untrackTunnel(client)
	if p.caErr != nil {
		p.refuseTunnel(client, dest, p.caErr)
		return
	}
	host, _, _ := net.SplitHostPort(dest)
	cfg, err := p.cfg.CA.tlsConfig(host)
	if err != nil {
		p.refuseTunnel(client, dest, err)
		return
	}
	_ = client.SetDeadline(time.Now().Add(tunnelHandshake))
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	tc := tls.Server(client, cfg)
	if err := tc.Handshake(); err != nil {
		return
	}
	_ = client.SetDeadline(time.Time{})
	srv := &http.Server{
		Handler:           p.injector(dest),
		ReadHeaderTimeout: tunnelHandshake,
		IdleTimeout:       tunnelIdle,
		MaxHeaderBytes:    tunnelHeaderBytes,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	l := newConnListener(tc)
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed || st == http.StateHijacked {
			l.done()
		}
	}
	_ = srv.Serve(l)
}

// refuseTunnel answers a CONNECT it will not serve 403 and records it.
func (p *Proxy) refuseTunnel(client net.Conn, dest string, err error) {
	p.recordRefusal(dest, err)
	msg := "toolgate egress: " + dest + ": " + err.Error() + "\n"
	_ = client.SetWriteDeadline(time.Now().Add(tunnelHandshake))
	_, _ = fmt.Fprintf(client, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(msg), msg)
}

func (p *Proxy) trackTunnel(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.tunnels) >= MaxTunnels {
		return false
	}
	p.tunnels[c] = struct{}{}
	p.wg.Add(1)
	return true
}

func (p *Proxy) untrackTunnel(c net.Conn) {
	p.mu.Lock()
	delete(p.tunnels, c)
	p.mu.Unlock()
	p.wg.Done()
}

// injector serves the requests of a terminated tunnel to dest: each must
// name dest itself (no other host rides on the tunnel) and use a plain
// method; every credential-bearing header the tool set is removed and the
// credential set; the request goes on through dial (decided, counted and
// recorded as any connection), and the answer comes back without what
// reflects the credential (headers, trailers) and without trailers at
// all.
func (p *Proxy) injector(dest string) http.Handler {
	inj := p.cfg.Inject[dest]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(err error) {
			p.recordRefusal(dest, err)
			http.Error(w, "toolgate egress: "+dest+": "+err.Error(), http.StatusForbidden)
		}
		host := r.Host
		if r.URL.IsAbs() {
			if r.URL.Scheme != "https" {
				refuse(errClear)
				return
			}
			host = r.URL.Host
		}
		if got := canonicalHostPort(host, "443"); got != dest {
			refuse(fmt.Errorf("a request for %s inside the tunnel to %s: one destination per tunnel", got, dest))
			return
		}
		method := strings.ToUpper(r.Method)
		if !methods[method] {
			refuse(fmt.Errorf("%s is refused to a destination with a credential (it could echo the credential back)", method))
			return
		}
		if r.Header.Get("Upgrade") != "" {
			refuse(errors.New("no protocol upgrade on a destination with a credential"))
			return
		}
		out, err := http.NewRequestWithContext(context.WithValue(r.Context(), injectedKey{}, true), method,
			"https://"+dest+r.URL.RequestURI(), r.Body)
		if err != nil {
			refuse(err)
			return
		}
		out.Header = r.Header.Clone()
		for _, k := range append([]string{"Authorization", "Proxy-Authorization", inj.Header}, hopByHop...) {
			out.Header.Del(k)
		}
		if inj.StripCookies {
			out.Header.Del("Cookie")
		}
		out.Header.Set(inj.Header, inj.Value)
		out.ContentLength = r.ContentLength
		resp, err := p.injTr.RoundTrip(out)
		if err != nil {
			status := http.StatusBadGateway
			if _, ok := errors.AsType[policyError](err); ok {
				status = http.StatusForbidden
			}
			http.Error(w, "toolgate egress: "+err.Error(), status)
			return
		}
		defer resp.Body.Close()
		scrubHeader(resp.Header, inj)
		for _, k := range hopByHop {
			resp.Header.Del(k)
		}
		maps.Copy(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		flusher, _ := w.(http.Flusher)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				if flusher != nil {
					flusher.Flush() // a stream (SSE) reaches the tool as it comes
				}
			}
			if err != nil {
				return // trailers are never passed on: one could carry the credential
			}
		}
	})
}

// scrubHeader removes every header that reflects the credential: its whole
// value, or its secret part (after an auth scheme such as "Bearer "), in
// any case. A reflection encoded otherwise cannot be caught: name only
// destinations that do not echo requests.
func scrubHeader(h http.Header, inj Injection) {
	needles := []string{strings.ToLower(inj.Value)}
	if _, secret, ok := strings.Cut(inj.Value, " "); ok && len(secret) >= 8 {
		needles = append(needles, strings.ToLower(secret))
	}
	for k, vs := range h {
		for _, v := range vs {
			lv := strings.ToLower(v)
			for _, n := range needles {
				if strings.Contains(lv, n) {
					h.Del(k)
				}
			}
		}
	}
}

// canonicalHostPort is host:port with the host lower case, no trailing
// dot, and the port def when none is given.
func canonicalHostPort(hostport, def string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, def
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return net.JoinHostPort(strings.Trim(host, "[]"), port)
}

// connListener is a listener of one connection, for an http.Server that
// serves it: Accept gives it once, then waits until it is done.
type connListener struct {
	c    net.Conn
	once sync.Once
	gave bool
	mu   sync.Mutex
	end  chan struct{}
}

func newConnListener(c net.Conn) *connListener {
	return &connListener{c: c, end: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.gave {
		l.gave = true
		l.mu.Unlock()
		return l.c, nil
	}
	l.mu.Unlock()
	<-l.end
	return nil, net.ErrClosed
}

func (l *connListener) done()          { l.once.Do(func() { close(l.end) }) }
func (l *connListener) Close() error   { l.done(); return nil }
func (l *connListener) Addr() net.Addr { return l.c.LocalAddr() }
