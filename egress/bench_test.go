package egress

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/egress/allowlist"
)

// benchTarget is a TCP server on 127.0.0.1 that answers each connection's
// one byte with one byte, and the allowlist that lists it.
func benchTarget(b *testing.B) (string, allowlist.List) {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var one [1]byte
				if _, err := io.ReadFull(c, one[:]); err == nil {
					_, _ = c.Write(one[:])
				}
			}()
		}
	}()
	allow, err := allowlist.ParseList([]string{l.Addr().String()})
	if err != nil {
		b.Fatal(err)
	}
	return l.Addr().String(), allow
}

// benchProxy serves a proxy of allow on 127.0.0.1; each record is encoded
// as JSON, as an audit log would.
func benchProxy(b *testing.B, allow allowlist.List, lim Limits) (*Proxy, string) {
	b.Helper()
	p := New(Config{Allow: allow, Limits: lim, Record: func(r Record) { _ = json.NewEncoder(io.Discard).Encode(r) }})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = p.Serve(l) }()
	return p, l.Addr().String()
}

// connect asks the proxy at proxy for a tunnel to target and, when it
// answers 200, moves one byte each way: the status.
func connect(proxy, target string) (int, error) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	if _, err := c.Write([]byte{'x'}); err != nil {
		return 0, err
	}
	var one [1]byte
	if _, err := io.ReadFull(br, one[:]); err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// BenchmarkProxyConnect is one allowed CONNECT through a running proxy,
// one byte each way, and its record.
func BenchmarkProxyConnect(b *testing.B) {
	target, allow := benchTarget(b)
	p, addr := benchProxy(b, allow, Limits{})
	defer p.Close()
	for b.Loop() {
		if st, err := connect(addr, target); st != http.StatusOK || err != nil {
			b.Fatalf("connect: %d %v", st, err)
		}
	}
}

// BenchmarkProxyRefused is one CONNECT the allowlist refuses, and its
// record.
func BenchmarkProxyRefused(b *testing.B) {
	_, allow := benchTarget(b)
	p, addr := benchProxy(b, allow, Limits{})
	defer p.Close()
	for b.Loop() {
		if st, err := connect(addr, "unlisted.example.com:443"); st != http.StatusForbidden || err != nil {
			b.Fatalf("connect: %d %v", st, err)
		}
	}
}

// BenchmarkProxyCall is one call's proxy: started, one allowed CONNECT,
// closed (every record written).
func BenchmarkProxyCall(b *testing.B) {
	target, allow := benchTarget(b)
	for b.Loop() {
		p, addr := benchProxy(b, allow, Limits{Conns: 256, Bytes: 256 << 20})
		if st, err := connect(addr, target); st != http.StatusOK || err != nil {
			b.Fatalf("connect: %d %v", st, err)
		}
		p.Close()
	}
}

// BenchmarkAuditRecord is what the audit's bounds add to one connection:
// the host escaped and cut, the record measured and charged, written
// (here discarded) or counted.
func BenchmarkAuditRecord(b *testing.B) {
	for _, bc := range []struct{ name, host string }{
		{"name", "api.example.com"},
		{"64KiB", `evil"` + strings.Repeat("a", 64<<10) + ".example.com"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a := newAuditor(func(Record) {}, 1<<62, 0, time.Now)
			for b.Loop() {
				r := Record{Port: 443, Decision: Refused, Reason: "not in the allowlist"}
				r.Host, r.HostBytes = auditHost(bc.host)
				a.record(r, "")
			}
		})
	}
}
