package server

import (
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Connection bounds of a listener (serve --max-connections,
// --max-connections-per-client, --idle-timeout).
const (
	// DefaultMaxConns bounds the open connections of one listener: at
	// about 19 KB of server memory each (what the review measured of an
	// idle keep-alive connection), 1024 hold some 20 MB.
	DefaultMaxConns = 1024
	// DefaultMaxConnsPerClient bounds the open connections of one client
	// address: a client runs at most --max-concurrent-per-principal calls
	// at once (CPUs × 2), each holding one connection while it runs, and
	// keeps a few idle ones; 64 leaves room for that and for several
	// principals behind one address, and keeps one address from taking
	// the listener's 1024.
	DefaultMaxConnsPerClient = 64
	// DefaultIdleTimeout closes a keep-alive connection idle that long.
	// Clients reuse a connection within seconds between calls (an agent
	// loop), and Go's and Node's clients retry a request that meets a
	// connection closed while idle; 60 s frees a slot a departed client
	// holds twice as fast as the 2 minutes it used to be.
	DefaultIdleTimeout = 60 * time.Second
)

// The listeners' names (the listener label of the connection metrics).
const (
	listenerMCP     = "mcp"
	listenerMetrics = "metrics"
)

// The bounds that refuse a connection (the limit label of
// toolgate_http_connections_refused_total).
const (
	limitConns          = "max_connections"
	limitConnsPerClient = "max_connections_per_client"
)

// limitListener bounds the connections open at once on a listener, in all
// (max) and per client address (perClient; a unix socket's clients are
// told apart by their uid); 0 is no bound. A connection over either bound
// is closed as soon as it is accepted, before any byte of it is read (a
// TLS handshake included: the listener is below TLS), and counted; the
// connections already open go on. It also reads the peer's credentials of
// a unix socket connection (SO_PEERCRED), once, at accept.
type limitListener struct {
	net.Listener
	name           string
	max, perClient int
	m              *Metrics

	mu       sync.Mutex
	open     int
	byClient map[string]int
}

func newLimitListener(ln net.Listener, name string, max, perClient int, m *Metrics) *limitListener {
	m.connBounds(name, max, perClient)
	return &limitListener{Listener: ln, name: name, max: max, perClient: perClient, m: m, byClient: map[string]int{}}
}

// Accept returns the next connection within the bounds, closing those
// over them.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l, uid: -1}
		if uc, ok := c.(*net.UnixConn); ok {
			lc.uid = peerUID(uc)
			lc.client = "uid:" + strconv.Itoa(lc.uid)
		} else {
			lc.client = clientAddr(c.RemoteAddr())
		}
		l.mu.Lock()
		refused := ""
		switch {
		case l.max > 0 && l.open >= l.max:
			refused = limitConns
		case l.perClient > 0 && l.byClient[lc.client] >= l.perClient:
			refused = limitConnsPerClient
		default:
			l.open++
			l.byClient[lc.client]++
		}
		l.mu.Unlock()
		if refused != "" {
			// Counted before the close: a client that sees its
			// connection closed finds the refusal in /metrics.
			l.m.connRefused(l.name, refused)
			_ = c.Close()
			continue
		}
		l.m.connOpened(l.name, 1)
		return lc, nil
	}
}

func (l *limitListener) release(client string) {
	l.mu.Lock()
	l.open--
	if l.byClient[client]--; l.byClient[client] <= 0 {
		delete(l.byClient, client)
	}
	l.mu.Unlock()
	l.m.connOpened(l.name, -1)
}

// clientAddr is the address a TCP client's connections are counted under:
// its IP (an IPv4-mapped IPv6 address as the IPv4 one).
func clientAddr(a net.Addr) string {
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap().String()
	}
	return a.String()
}

// limitedConn is a connection within its listener's bounds: its Close
// gives its place back, once.
type limitedConn struct {
	net.Conn
	l      *limitListener
	client string
	uid    int // the peer's uid on a unix socket (-1: unknown, or TCP)
	once   sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.client) })
	return err
}
