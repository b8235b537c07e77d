package bwrap

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/egress/allowlist"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
)

var svcSeq int

// startProbe starts the probe as a sandboxed service and returns it with
// its stderr lines.
func startProbe(t *testing.T, r *Runner, s rt.Service, args ...string) (*rt.Process, func() []string) {
	t.Helper()
	probe := testbin.Probe(t)
	svcSeq++
	var mu sync.Mutex
	var lines []string
	s.ID = fmt.Sprintf("svc-test-%d-%d", os.Getpid(), svcSeq)
	s.Name = "probe"
	s.Path = probe
	s.Argv = append([]string{probe}, args...)
	s.Stderr = func(l string) {
		mu.Lock()
		lines = append(lines, l)
		mu.Unlock()
	}
	p, err := r.StartService(context.Background(), s)
	if err != nil {
		t.Fatalf("StartService(%v): %v", args, err)
	}
	t.Cleanup(p.Close)
	return p, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
}

// output reads the service's stdout to EOF, bounded in time.
func output(t *testing.T, p *rt.Process) string {
	t.Helper()
	done := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(p.Stdout())
		done <- b
	}()
	select {
	case b := <-done:
		return string(b)
	case <-time.After(20 * time.Second):
		p.Kill()
		t.Fatal("service stdout did not reach EOF")
		return ""
	}
}

// TestServiceEnv proves the server's environment is exactly the four
// variables (testbin.ToolEnv) plus
// its own variables (no PWD, nothing of the server's), and that a value
// never appears on the command line of any process toolgate starts.
func TestServiceEnv(t *testing.T) {
	r := newRunner(t)
	secret := fmt.Sprintf("svc-value-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Setenv("TOOLGATE_LEAK_CHECK", "from-the-server-environment")
	p, _ := startProbe(t, r, rt.Service{Env: []string{"SVC_TOKEN=" + secret, "LEVEL=info"}}, "sleep", "3")
	// While it runs, no argv on the host holds the value.
	time.Sleep(300 * time.Millisecond)
	if pid, ok := argvContaining(secret); ok {
		t.Errorf("process %d has the variable's value on its command line", pid)
	}
	p.Close()

	p, _ = startProbe(t, r, rt.Service{Env: []string{"SVC_TOKEN=" + secret, "LEVEL=info"}}, "env")
	got := strings.TrimSpace(output(t, p))
	want := strings.Join([]string{
		"GIT_CONFIG_NOSYSTEM=1", "GIT_PAGER=cat", "LEVEL=info", "PAGER=cat", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SVC_TOKEN=" + secret,
	}, "\n")
	if got != want {
		t.Errorf("service environment:\n%s\nwant exactly:\n%s", got, want)
	}
	<-p.Done()
	if code := p.ExitCode(); code != 0 {
		t.Errorf("ExitCode() = %d, want 0", code)
	}
}

// argvContaining returns a process whose command line contains s.
func argvContaining(s string) (int, bool) {
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && bytes.Contains(b, []byte(s)) {
			var pid int
			fmt.Sscanf(f, "/proc/%d/cmdline", &pid)
			return pid, true
		}
	}
	return 0, false
}

// TestServicePipes proves stdin and stdout are the service's channel and
// stderr goes to the callback, apart from stdout.
func TestServicePipes(t *testing.T) {
	r := newRunner(t)
	p, _ := startProbe(t, r, rt.Service{}, "stdin")
	if _, err := p.Stdin().Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	p.Stdin().Close()
	if got := output(t, p); got != "stdin bytes=5\n" {
		t.Errorf("stdout = %q, want %q", got, "stdin bytes=5\n")
	}

	p, stderr := startProbe(t, r, rt.Service{}, "stderr")
	if got := output(t, p); got != "to stdout\n" {
		t.Errorf("stdout = %q, want only %q (stderr must stay apart)", got, "to stdout\n")
	}
	<-p.Done()
	if got := strings.Join(stderr(), "|"); got != "to stderr" {
		t.Errorf("stderr lines = %q, want %q", got, "to stderr")
	}
}

// TestServiceNetwork proves a sandboxed service has no network unless
// Network is set: a listener of the host on 127.0.0.1 is unreachable.
func TestServiceNetwork(t *testing.T) {
	r := newRunner(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := l.Addr().String()
	for _, tc := range []struct {
		network bool
		want    string
	}{
		{false, "connect " + addr + ": denied"},
		{true, "connect " + addr + ": ok"},
	} {
		p, _ := startProbe(t, r, rt.Service{Network: tc.network}, "net", addr)
		if got := output(t, p); !strings.Contains(got, tc.want) {
			t.Errorf("Network=%v: probe says\n%s\nwant %q", tc.network, got, tc.want)
		}
	}
}

// TestServiceReadOnly proves Dir and ReadOnly are visible read-only and
// nothing else of the host is.
func TestServiceReadOnly(t *testing.T) {
	r := newRunner(t)
	dir, data, other := testbin.Dir(t), testbin.Dir(t), testbin.Dir(t)
	for _, d := range []string{dir, data, other} {
		if err := os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, _ := startProbe(t, r, rt.Service{Dir: dir, ReadOnly: []string{data}},
		"read", dir+"/f", data+"/f", other+"/f")
	got := output(t, p)
	for _, want := range []string{"read " + dir + "/f: ok", "read " + data + "/f: ok", "read " + other + "/f: denied ENOENT"} {
		if !strings.Contains(got, want) {
			t.Errorf("probe says\n%s\nwant %q", got, want)
		}
	}
	p, _ = startProbe(t, r, rt.Service{Dir: dir, ReadOnly: []string{data}}, "write", dir+"/g", data+"/g")
	got = output(t, p)
	for _, want := range []string{"write " + dir + "/g: denied EROFS", "write " + data + "/g: denied EROFS"} {
		if !strings.Contains(got, want) {
			t.Errorf("probe says\n%s\nwant %q", got, want)
		}
	}
	p, _ = startProbe(t, r, rt.Service{Dir: dir}, "cwd")
	if got := output(t, p); got != dir+"\n" {
		t.Errorf("cwd = %q, want %q", got, dir+"\n")
	}
}

// TestServiceKill proves Kill ends the whole sandbox promptly, and a bind
// of a host root is refused before anything starts.
func TestServiceKill(t *testing.T) {
	r := newRunner(t)
	p, _ := startProbe(t, r, rt.Service{}, "sleep", "60")
	start := time.Now()
	p.Kill()
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Kill took %s", el)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Kill")
	}
	if got := output(t, p); strings.Contains(got, "woke") {
		t.Errorf("the service survived Kill: %q", got)
	}

	_, err := r.StartService(context.Background(), rt.Service{ID: "refused", Name: "x", Path: "/usr/bin/true", Argv: []string{"/usr/bin/true"}, ReadOnly: []string{"/etc"}})
	if err == nil || !strings.Contains(err.Error(), `"/etc" cannot be bound into a sandbox`) {
		t.Errorf("StartService(ReadOnly /etc) = %v, want a refusal", err)
	}
}

// TestServiceCredential: a sandboxed service with an allowlist and a
// credential (a downstream server that calls an API) reaches its TLS
// destination through its proxy, which sets the credential; the service
// trusts the server CA and holds no key.
func TestServiceCredential(t *testing.T) {
	r := newRunner(t)
	var mu sync.Mutex
	var got []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		got = append(got, req.Header.Get("X-Api-Key"))
		mu.Unlock()
		fmt.Fprintln(w, "api answered")
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	old := rt.UpstreamRoots.Swap(roots)
	defer rt.UpstreamRoots.Store(old)
	dest := srv.Listener.Addr().String()
	allow, err := allowlist.ParseList([]string{dest})
	if err != nil {
		t.Fatal(err)
	}
	svc := rt.Service{Egress: allow, Inject: map[string]egress.Injection{dest: {Header: "X-Api-Key", Value: "svc-secret-key"}}}
	p, _ := startProbe(t, r, svc, "egress", "header:X-Api-Key=the-servers-own", "https:https://"+dest+"/")
	out := output(t, p)
	if !strings.Contains(out, "https https://"+dest+"/: 200 api answered") {
		t.Errorf("the service's HTTPS request through its proxy:\n%s", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "svc-secret-key" {
		t.Errorf("the destination got X-Api-Key %q, want the credential once", got)
	}
}
