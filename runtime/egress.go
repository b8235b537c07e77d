package runtime

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/egress/allowlist"
)

// Egress is the host side of one sandbox's narrow network: a private
// directory holding the socket of an egress proxy that enforces the
// allowlist. The backend binds Dir read-only into the sandbox at
// bundle.EgressDir; inside, the init (or service) shim bridges the
// sandbox's 127.0.0.1:bundle.EgressPort onto the socket and gives the tool
// the proxy variables (bundle.ProxyEnv). The sandbox keeps its own network
// namespace with only lo: the socket is its one way out.
type Egress struct {
	// Dir is the host directory bound into the sandbox.
	Dir string
	// Trust is set when Dir holds the trust files of the server CA
	// (bundle.TrustBundle, bundle.TrustCA): a call with a credential.
	Trust bool
	proxy *egress.Proxy
	done  chan struct{}
}

// EgressUse sums up one sandbox's traffic through its egress proxy.
type EgressUse struct {
	// Conns counts the connections asked for, allowed or refused; Bytes
	// the bytes moved both ways.
	Conns int64
	Bytes int64
	// Limit names the egress limit hit first (egress.LimitConns,
	// egress.LimitBytes), "" when none.
	Limit string
}

// egressParent is the directory of every egress socket directory of this
// process: root-owned 0711 when toolgate is root, so that no other user
// can list the names of the sandboxes' directories (each a 128-bit random
// name) or reach a socket without its name.
var egressParent struct {
	once sync.Once
	dir  string
	err  error
}

const egressPrefix = "toolgate-egress-"

// EgressDirExample stands for a call's egress directory where no call
// runs (`toolgate spec`): each call gets a fresh one.
var EgressDirExample = filepath.Join(os.TempDir(), egressPrefix+"PID", "CALL")

func egressRoot() (string, error) {
	egressParent.once.Do(func() {
		sweepEgress(os.TempDir())
		dir := filepath.Join(os.TempDir(), egressPrefix+strconv.Itoa(os.Getpid()))
		_ = os.RemoveAll(dir) // a dead process of the same pid left it
		if err := os.Mkdir(dir, 0o711); err != nil {
			egressParent.err = fmt.Errorf("egress: %w", err)
			return
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			egressParent.err = fmt.Errorf("egress: %w", err)
			return
		}
		egressParent.dir = dir
	})
	return egressParent.dir, egressParent.err
}

// sweepEgress removes the egress directories in tmp of processes that no
// longer run (a server that was killed cannot remove its own).
func sweepEgress(tmp string) {
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), egressPrefix))
		if !e.IsDir() || !strings.HasPrefix(e.Name(), egressPrefix) || err != nil || pid <= 0 {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.RemoveAll(filepath.Join(tmp, e.Name()))
		}
	}
}

// StartEgress starts the egress proxy of allow for one call's sandbox
// under limits, its socket in a fresh directory that the sandbox's host
// uid:gid can reach (-1: toolgate's own ids, when it is not root). record
// receives one record per connection within the call's audit budget
// (egress.DefaultAuditBytes), and the summary of those not recorded one
// by one when the proxy closes. Close it when the sandbox has ended.
func StartEgress(allow allowlist.List, limits egress.Limits, uid, gid int, record func(egress.Record)) (*Egress, error) {
	return startEgress(allow, nil, limits, 0, uid, gid, record)
}

// UpstreamRoots are, when set, what verifies the destinations of injected requests
// instead of the system roots: for the battery's own TLS servers (its
// tests and `toolgate selftest`). Serve never sets it: an operator's
// private CA goes in SSL_CERT_FILE or SSL_CERT_DIR.
var UpstreamRoots atomic.Pointer[x509.CertPool]

// ServiceAuditWindow is the period of a downstream server's egress audit
// budget: a server outlives its calls, so its budget
// (egress.DefaultAuditBytes) is renewed every minute rather than spent
// once.
const ServiceAuditWindow = time.Minute

// startEgress is StartEgress with the audit budget renewed each window
// (0: once for the proxy's life).
func startEgress(allow allowlist.List, inject map[string]egress.Injection, limits egress.Limits, window time.Duration, uid, gid int, record func(egress.Record)) (*Egress, error) {
	if len(allow) == 0 {
		return nil, errors.New("egress: no destination")
	}
	root, err := egressRoot()
	if err != nil {
		return nil, err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(root, hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	fail := func(err error) (*Egress, error) {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("egress: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return fail(err)
	}
	sock := filepath.Join(dir, bundle.EgressSocket)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fail(err)
	}
	if uid >= 0 {
		if err := os.Chown(sock, uid, gid); err != nil {
			l.Close()
			return fail(err)
		}
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		l.Close()
		return fail(err)
	}
	e := &Egress{Dir: dir, done: make(chan struct{})}
	if len(inject) > 0 {
		// The sandbox trusts the server CA: its trust files, made once
		// per server start, are linked into the directory it binds.
		if err := linkTrust(root, dir); err != nil {
			l.Close()
			return fail(err)
		}
		e.Trust = true
	}
	e.proxy = egress.New(egress.Config{
		Allow:         allow,
		Limits:        limits,
		Record:        record,
		AuditWindow:   window,
		Inject:        inject,
		CA:            nil, // the server's (egress.ServerCA)
		UpstreamRoots: UpstreamRoots.Load(),
	})
	go func() {
		defer close(e.done)
		_ = e.proxy.Serve(l)
	}()
	return e, nil
}

// open opens the proxy's socket O_PATH, for a prepared sandbox that takes
// it at release: a descriptor its shim can connect to (through
// /proc/self/fd) and do nothing else with.
func (e *Egress) open() (*os.File, error) {
	p := filepath.Join(e.Dir, bundle.EgressSocket)
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// TrustDir is a directory of the server CA's trust files alone
// (bundle.TrustBundle, bundle.TrustCA), for a sandbox prepared ahead of a
// call with a credential: bound at bundle.EgressDir, as a call's egress
// directory is, before the call's proxy exists. Made once per server.
func TrustDir() (string, error) {
	trustDir.once.Do(func() {
		root, err := egressRoot()
		if err != nil {
			trustDir.err = err
			return
		}
		d := filepath.Join(root, "trust")
		if err := os.Mkdir(d, 0o755); err != nil {
			trustDir.err = fmt.Errorf("egress: %w", err)
			return
		}
		if err := os.Chmod(d, 0o755); err != nil {
			trustDir.err = fmt.Errorf("egress: %w", err)
			return
		}
		if err := linkTrust(root, d); err != nil {
			trustDir.err = err
			return
		}
		trustDir.dir = d
	})
	return trustDir.dir, trustDir.err
}

var trustDir struct {
	once sync.Once
	dir  string
	err  error
}

// Use sums up the traffic so far; zero for a nil Egress.
func (e *Egress) Use() EgressUse {
	if e == nil {
		return EgressUse{}
	}
	c, b := e.proxy.Used()
	return EgressUse{Conns: c, Bytes: b, Limit: e.proxy.Limit()}
}

// Close stops the proxy, ends every connection through it, and removes
// the directory. A nil Egress is a no-op.
func (e *Egress) Close() {
	if e == nil {
		return
	}
	e.proxy.Close()
	<-e.done
	os.RemoveAll(e.Dir)
}

// StartEgress starts the egress of inv under the per-call limits of pol
// when inv has an allowlist (a nil *Egress, whose methods are no-ops, when
// not): a sandbox backend's first step of a call. The sandbox's host ids
// own the socket.
func (inv Invocation) StartEgress(pol bundle.Policy, uid, gid int) (*Egress, error) {
	if len(inv.Egress) == 0 {
		return nil, nil //nolint:nilnil // no allowlist: no egress, and a nil *Egress is usable
	}
	return startEgress(inv.Egress, inv.Inject, egress.Limits{Conns: pol.EgressConns, Bytes: pol.EgressBytes}, 0, uid, gid, inv.EgressRecord)
}

// StartEgress starts the egress of s when it has an allowlist (nil
// otherwise), for the service's whole life: each connection is recorded
// within an audit budget renewed every ServiceAuditWindow, none is capped
// (a server outlives its calls; each call is bounded by its timeout).
func (s Service) StartEgress(uid, gid int) (*Egress, error) {
	if len(s.Egress) == 0 {
		return nil, nil //nolint:nilnil // no allowlist: no egress, and a nil *Egress is usable
	}
	return startEgress(s.Egress, s.Inject, egress.Limits{}, ServiceAuditWindow, uid, gid, s.EgressRecord)
}
