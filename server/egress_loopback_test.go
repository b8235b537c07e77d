package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/internal/testbin"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
	"github.com/toolgate/toolgate/runtime/cgroup"
)

// TestEgressLoopbackGit: a listed loopback destination (a git server on
// the host's 127.0.0.1) is reached by a real tool that honours NO_PROXY:
// `git ls-remote` in the bwrap sandbox, with an egress line listing
// 127.0.0.1:PORT and an env line, gets the server's refs through the
// proxy. (With the default NO_PROXY, git went to the sandbox's own
// loopback: "Couldn't connect to server".)
func TestEgressLoopbackGit(t *testing.T) {
	if _, err := bwrap.Find(); err != nil {
		testbin.Missing(t, "%v", err)
	}
	git := "/usr/bin/git"
	if _, err := os.Stat(git); err != nil {
		testbin.Missing(t, "git: %v", err)
	}
	const ref = "0123456789abcdef0123456789abcdef01234567\trefs/heads/main\n"
	var hits atomic.Int64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// git's dumb HTTP protocol: ls-remote reads info/refs.
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/repo.git/info/refs" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, ref)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	addr := l.Addr().String()

	cg := cgroup.Setup()
	t.Cleanup(cg.Close)
	r, err := bwrap.New(context.Background(), bwrap.Config{Shim: testbin.Shim(t), Cgroups: cg, Limits: rt.DefaultSandboxLimits()})
	if errors.Is(err, bundle.ErrNoSeccomp) {
		testbin.Missing(t, "this test binary was built without -tags seccomp (go test -tags seccomp): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := testbin.Dir(t)
	text := fmt.Sprintf("tool remote %s test 30 65536 on %s -- ls-remote http://%s/repo.git\negress remote %s\nenv remote HOME=/tmp\n", git, dir, addr, addr)
	c := conf.Parse("tools.conf", []byte(text), conf.Options{Builtins: builtin.Names()})
	if c.State != conf.StateLoaded {
		t.Fatalf("conf: %v", c.Errors)
	}
	s := New(Options{Conf: c, Direct: &fakeRunner{}, Sandbox: rt.ReadySandbox("bwrap", r)})
	res, err := callTool(t, session(t, s), "remote", nil)
	if err != nil {
		t.Fatal(err)
	}
	out := resultText(res)
	if res.IsError || !strings.Contains(out, "0123456789abcdef0123456789abcdef01234567\trefs/heads/main") || hits.Load() == 0 {
		t.Errorf("git ls-remote of a listed loopback server: isError %v, %d requests reached it:\n%s", res.IsError, hits.Load(), out)
	}
}
