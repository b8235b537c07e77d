package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
)

// Injection is a credential the proxy sets on the requests a tool sends to
// one destination: Header (canonical) becomes Value, whatever the tool
// sent. The tool never holds Value: the proxy terminates the tool's TLS to
// that destination with a certificate of the server's CA, reads each
// request, removes every credential-bearing header the tool set
// (Authorization, Proxy-Authorization, Header, and Cookie when
// StripCookies), sets Header, and sends the request on over its own TLS
// connection, verified against the system roots (or Config.UpstreamRoots).
type Injection struct {
	Header       string
	Value        string
	StripCookies bool
}

// Format prints an Injection without its value, however it is formatted.
func (i Injection) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "{Header:%s Value:[redacted] StripCookies:%v}", i.Header, i.StripCookies)
}

// CA is the certificate authority of one server start that the proxies'
// terminated TLS connections present certificates of: its key lives in
// this process's memory only, and sandboxes with a credential trust its
// certificate (PEM). Leaf certificates are made once per host and kept.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

var serverCA struct {
	once sync.Once
	ca   *CA
	err  error
}

// ServerCA returns the CA of this server start, made at its first use.
func ServerCA() (*CA, error) {
	serverCA.once.Do(func() { serverCA.ca, serverCA.err = NewCA() })
	return serverCA.ca, serverCA.err
}

// NewCA makes a CA: ECDSA P-256, valid from an hour ago for 30 days (a
// server start, however long, is served by leaves it signs; a restart
// makes another).
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	tpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "toolgate egress CA (this server start)", Organization: []string{"toolgate"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	return &CA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), leaves: map[string]*tls.Certificate{}}, nil
}

// PEM is the CA's certificate, for the sandboxes' trust stores.
func (ca *CA) PEM() []byte { return ca.pem }

// Leaf returns the certificate the proxy presents for host (a name or an
// IP literal), made on first use and kept for the CA's life.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     ca.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tpl.IPAddresses = []net.IP{ip}
	} else {
		tpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key}
	ca.leaves[host] = c
	return c, nil
}

// tlsConfig is the server side of a terminated connection to host.
func (ca *CA) tlsConfig(host string) (*tls.Config, error) {
	leaf, err := ca.Leaf(host)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{*leaf}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}, nil
}

// injectedKey marks a request's context: its connection carries an
// injected credential (the record says so).
type injectedKey struct{}

// credentialFor returns the destination of hostport (port def when none
// is stated) as Config.Inject keys it, if it has a credential.
func (p *Proxy) credentialFor(hostport, def string) (string, bool) {
	key := canonicalHostPort(hostport, def)
	_, ok := p.cfg.Inject[key]
	return key, ok
}

// errClear is the refusal of a plain-HTTP request to a destination with a
// credential: the key never travels in clear.
var errClear = errors.New("a credential is set only over TLS: use https:// (the key never travels in clear)")

// refuseRequest records the refusal of a plain-HTTP request to dest (a
// credentialed destination) and answers it 403 with the reason.
func (p *Proxy) refuseRequest(r *http.Request, dest string, err error) *http.Response {
	p.recordRefusal(dest, err)
	return goproxy.NewResponse(r, "text/plain", http.StatusForbidden, "toolgate egress: "+dest+": "+err.Error()+"\n")
}

// recordRefusal records a refused request or tunnel to dest.
func (p *Proxy) recordRefusal(dest string, err error) {
	host, portStr, _ := net.SplitHostPort(dest)
	port, _ := strconv.ParseUint(portStr, 10, 16)
	rec := Record{Port: uint16(port), Decision: Refused, Reason: err.Error()}
	rec.Host, rec.HostBytes = auditHost(host)
	p.audit.record(rec, "")
}
