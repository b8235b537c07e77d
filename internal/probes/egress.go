package probes

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// egressProbe reports what a tool with an egress allowlist can reach.
// Each argument is KIND:TARGET:
//
//   - get:URL       a plain-HTTP GET through the proxy that HTTP_PROXY
//     names (set explicitly: Go's own proxy rules skip loopback);
//   - connect:H:P   a CONNECT through that proxy: its status line;
//   - direct:H:P    a TCP connection that ignores the proxy;
//   - dns:NAME      a name lookup with the sandbox's resolver settings;
//   - udp:H:P       a DNS query datagram sent straight to H:P, and
//     whether anything answers within a second;
//   - connects:N:H:P  N CONNECTs through the proxy, one after another:
//     how many got each status;
//   - size:URL      a plain-HTTP GET through the proxy, read to the end:
//     the status, the bytes read and how the body ended;
//   - hosts:N:LEN   N CONNECTs through the proxy, one after another, each
//     to port 443 of a name of LEN bytes ("aaa...a.example.com") that no
//     allowlist lists: how many got each status.
//   - header:NAME=VALUE  a header the https: requests after it send;
//   - https:URL     an HTTPS GET through the proxy, verified against the
//     sandbox's trust store (SSL_CERT_FILE): the status and the body's
//     first line;
//   - seek:SHA256HEX:LEN:ROLLING  whether any LEN bytes of what the sandbox can
//     read (every visible process's environment and command line, the
//     files under /.toolgate, /tmp, /dev/shm, /etc/ssl and the working
//     directory) hash to SHA256HEX (and ROLLING, by Rolling, which finds
//     the candidates): a secret it must not find, named by digests only.
//
// It first prints the proxy variables it was given. dns: refuses to run
// outside a sandbox (requireEgressSandbox): on a host it would query the
// host's resolver, which may send a packet off the machine.
func egressProbe(args []string) {
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "ALL_PROXY"} {
		if v, ok := os.LookupEnv(k); ok {
			fmt.Printf("env %s=%s\n", k, v)
		}
	}
	proxy := os.Getenv("HTTP_PROXY")
	var headers [][2]string
	for _, a := range args {
		kind, target, ok := strings.Cut(a, ":")
		if !ok {
			fail(fmt.Sprintf("egress: want KIND:TARGET, got %q", a))
		}
		switch kind {
		case "get":
			fmt.Printf("get %s: %s\n", target, proxyGet(proxy, target))
		case "header":
			k, v, _ := strings.Cut(target, "=")
			headers = append(headers, [2]string{k, v})
		case "https":
			fmt.Printf("https %s: %s\n", target, proxyFetch(proxy, target, headers))
		case "seek":
			fmt.Printf("seek: %s\n", seekSecret(target))
		case "connect":
			fmt.Printf("connect %s: %s\n", target, proxyConnect(proxy, target))
		case "direct":
			c, err := net.DialTimeout("tcp", target, 2*time.Second)
			if err == nil {
				c.Close()
			}
			fmt.Printf("direct %s: %s\n", target, result(err))
		case "dns":
			requireEgressSandbox()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			addrs, err := net.DefaultResolver.LookupHost(ctx, target)
			cancel()
			if err != nil {
				fmt.Printf("dns %s: failed\n", target)
			} else {
				fmt.Printf("dns %s: resolved %s\n", target, strings.Join(addrs, ","))
			}
		case "udp":
			fmt.Printf("udp %s: %s\n", target, udpQuery(target))
		case "connects":
			n, hostport, _ := strings.Cut(target, ":")
			count, err := strconv.Atoi(n)
			if err != nil {
				fail(fmt.Sprintf("egress: connects:N:H:P, got %q", a))
			}
			got := map[string]int{}
			for range count {
				got[proxyConnect(proxy, hostport)]++
			}
			fmt.Printf("connects %s: %s\n", hostport, counts(got))
		case "hosts":
			ns, ls, _ := strings.Cut(target, ":")
			count, err1 := strconv.Atoi(ns)
			size, err2 := strconv.Atoi(ls)
			if err1 != nil || err2 != nil || size < len(".example.com")+1 {
				fail(fmt.Sprintf("egress: hosts:N:LEN, got %q", a))
			}
			name := strings.Repeat("a", size-len(".example.com")) + ".example.com"
			got := map[string]int{}
			for range count {
				got[proxyConnect(proxy, name+":443")]++
			}
			fmt.Printf("hosts %dx%d: %s\n", count, size, counts(got))
		case "size":
			fmt.Printf("size %s: %s\n", target, proxySize(proxy, target))
		default:
			fail(fmt.Sprintf("egress: unknown kind %q", kind))
		}
	}
}

// proxyGet fetches u through proxy: "STATUS first-line-of-body".
func proxyGet(proxy, u string) string { return proxyFetch(proxy, u, nil) }

// proxyConnect asks proxy for a tunnel to hostport: the answer's status
// code, or why there was none.
func proxyConnect(proxy, hostport string) string {
	pu, err := url.Parse(proxy)
	if proxy == "" || err != nil {
		return "no proxy variable"
	}
	c, err := net.DialTimeout("tcp", pu.Host, 2*time.Second)
	if err != nil {
		return "proxy unreachable " + result(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return "no answer " + result(err)
	}
	resp.Body.Close()
	return fmt.Sprint(resp.StatusCode)
}

// udpQuery sends one DNS query for example.com to hostport and reports
// whether anything answered.
func udpQuery(hostport string) string {
	c, err := net.Dial("udp", hostport)
	if err != nil {
		return "denied " + result(err)
	}
	defer c.Close()
	// id 0x1234, recursion desired, one question: example.com A IN.
	q := []byte{
		0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
		7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0, 0, 1, 0, 1,
	}
	if _, err := c.Write(q); err != nil {
		return "denied " + result(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 512)
	if _, err := c.Read(buf); err != nil {
		return "no answer"
	}
	return "answered"
}

// requireEgressSandbox refuses to run unless this process is the tool of
// a sandbox (sandboxed).
func requireEgressSandbox() {
	if sandboxed() {
		return
	}
	fmt.Fprintf(os.Stderr, "probe: refusing: not the tool of a sandbox (pid %d): a name lookup here would use the host's resolver\n", os.Getpid())
	os.Exit(99)
}

// counts renders a tally as "k=v" pairs in key order.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// proxySize reads u through proxy to the end: "STATUS read N bytes: END".
func proxySize(proxy, u string) string {
	pu, err := url.Parse(proxy)
	if proxy == "" || err != nil {
		return "no proxy variable"
	}
	c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	resp, err := c.Get(u) //nolint:noctx // the client's timeout bounds it
	if err != nil {
		return "error " + result(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	end := "complete"
	if err != nil {
		end = "cut"
	}
	return fmt.Sprintf("%d read %d bytes: %s", resp.StatusCode, n, end)
}

// RollBase is the base of seek's rolling hash: Rolling(s) is
// sum s[i]*RollBase^(len-1-i), mod 2^64.
const RollBase = 257

// Rolling is seek's rolling hash of s.
func Rolling(s []byte) uint64 {
	var h uint64
	for _, c := range s {
		h = h*RollBase + uint64(c)
	}
	return h
}

// proxyFetch GETs u through proxy with headers, never following a
// redirect (what the proxy answered is the report) and trusting what the
// sandbox's trust store does for https: the status and the body's first
// line.
func proxyFetch(proxy, u string, headers [][2]string) string {
	pu, err := url.Parse(proxy)
	if proxy == "" || err != nil {
		return "no proxy variable"
	}
	c := &http.Client{
		Timeout:       5 * time.Second,
		Transport:     &http.Transport{Proxy: http.ProxyURL(pu)},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, err := http.NewRequest(http.MethodGet, u, nil) //nolint:noctx // the client's timeout bounds it
	if err != nil {
		return "error " + result(err)
	}
	for _, h := range headers {
		req.Header.Add(h[0], h[1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return "error " + result(err)
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(io.LimitReader(resp.Body, 512)).ReadString('\n')
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(line))
}

// seekSecret looks for a secret given by its SHA-256 and length in what
// the sandbox can read, and says where it was found, or that it was not.
func seekSecret(spec string) string {
	parts := strings.Split(spec, ":")
	if len(parts) != 3 {
		fail("seek: want SHA256HEX:LEN:ROLLING")
	}
	want := parts[0]
	size, err1 := strconv.Atoi(parts[1])
	roll, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || size <= 0 {
		fail("seek: want SHA256HEX:LEN:ROLLING")
	}
	var sources, total int
	var found []string
	look := func(name string, b []byte) {
		sources++
		total += len(b)
		// A rolling hash finds the candidates; SHA-256 confirms them.
		if len(b) < size {
			return
		}
		var h, pow uint64 = 0, 1
		for i := range size {
			h = h*RollBase + uint64(b[i])
			if i > 0 {
				pow *= RollBase
			}
		}
		for i := 0; ; i++ {
			if h == roll {
				if sum := sha256.Sum256(b[i : i+size]); hex.EncodeToString(sum[:]) == want {
					found = append(found, name)
					return
				}
			}
			if i+size >= len(b) {
				return
			}
			h = (h-uint64(b[i])*pow)*RollBase + uint64(b[i+size])
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, f := range []string{"environ", "cmdline"} {
			if b, err := os.ReadFile(p + "/" + f); err == nil {
				look(p+"/"+f, b)
			}
		}
	}
	wd, _ := os.Getwd()
	for _, root := range []string{"/.toolgate", "/tmp", "/dev/shm", "/etc/ssl", wd} {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil //nolint:nilerr // what cannot be read is not found
			}
			if b, err := os.ReadFile(p); err == nil {
				look(p, b)
			}
			return nil
		})
	}
	if len(found) > 0 {
		return "found in " + strings.Join(found, " ")
	}
	return fmt.Sprintf("found nowhere (%d sources, %d bytes)", sources, total)
}
