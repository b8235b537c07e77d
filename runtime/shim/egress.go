package shim

import (
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/bundle"
)

// EgressAtRelease is a standby shim's Egress when the sandbox was
// prepared for a tool with an egress allowlist: it takes its call's proxy
// socket at its release (standby.go).
const EgressAtRelease = "@release"

// superviseEgress is the init (or service) shim of a sandbox with an
// egress allowlist. It stays the sandbox's first process (PID 1 of its
// pid namespace), so that the tool has no unexpected child to wait for
// and a tool that ignores the proxy variables has nothing to reach:
//
//   - it listens on 127.0.0.1:bundle.EgressPort of the sandbox's own
//     network namespace (only lo) before the tool starts, so the port is
//     the proxy's before anything else can take it;
//   - it starts the tool as its child with env plus the proxy variables
//     (bundle.ProxyEnv: the one addition, and the only proxy variables),
//     and stderr joined to stdout unless keepStderr;
//   - it bridges each connection to the port onto a new connection to the
//     egress proxy's socket at s.Egress (bound read-only from the host),
//     which decides and records every destination;
//   - it reaps every orphan, and when the tool exits, it exits with the
//     tool's status (128+N for signal N, as the tool as PID 1 would have
//     been reported), which ends the pid namespace and all in it.
func superviseEgress(s Spec, env []string, keepStderr bool) int {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(bundle.EgressPort)))
	if err != nil {
		die(126, "sandbox: egress: listen on the proxy port: %v", err)
	}
	stderr := os.Stdout
	if keepStderr {
		stderr = os.Stderr
	}
	// The shim holds none of the call's streams once the tool has them:
	// the tool's output ends when the tool (and what it left) closes it.
	pid := startTool(s.Path, s.Argv, WithProxyEnv(env), stderr)
	go bridge(l, s.Egress)
	return reapUntil(pid)
}

// WithProxyEnv returns env with bundle.ProxyEnv: any proxy variable env
// has (either spelling: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY) is replaced,
// so that traffic goes nowhere but the egress proxy; a NO_PROXY that env
// sets itself (a registry entry's own) is kept in place of the default.
func WithProxyEnv(env []string) []string {
	isProxy := func(k string) bool {
		return slices.ContainsFunc([]string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"}, func(v string) bool { return strings.EqualFold(v, k) })
	}
	out := make([]string, 0, len(env)+len(bundle.ProxyEnv))
	ownNoProxy := false
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(bundle.NoProxyVars, k) {
			ownNoProxy = true
		}
		if !isProxy(k) {
			out = append(out, kv)
		}
	}
	for _, kv := range bundle.ProxyEnv {
		k, _, _ := strings.Cut(kv, "=")
		if ownNoProxy && slices.Contains(bundle.NoProxyVars, k) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// reapUntil reaps children (the tool, and the orphans a PID 1 inherits)
// until pid exits, and returns its status.
func reapUntil(pid int) int {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			die(126, "sandbox: wait: %v", err)
		case got != pid:
			continue
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// bridge joins each connection that l accepts to a new connection to the
// egress proxy's socket at sock, until l fails (the sandbox ends).
func bridge(l net.Listener, sock string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go join(c, sock)
	}
}

// join copies both ways between c and a new connection to sock, passing
// each side's end of stream on, and closes both when both are done. A
// proxy that cannot be reached closes c: the tool sees a reset.
func join(c net.Conn, sock string) {
	defer c.Close()
	p, err := net.Dial("unix", sock)
	if err != nil {
		return
	}
	defer p.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(p, c)
		_ = p.(*net.UnixConn).CloseWrite()
	})
	_, _ = io.Copy(c, p)
	_ = c.(*net.TCPConn).CloseWrite()
	wg.Wait()
}
