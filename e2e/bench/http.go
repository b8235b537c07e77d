package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/mcptest"
)

// The HTTP rows: toolgate serve --listen 127.0.0.1:0 --auth-tokens (a TCP
// listener, loopback too, serves only with authentication), driven by
// mcp-go's streamable HTTP client with the bench's bearer token.

// benchToken is the bearer token of the HTTP rows (its file is in the
// cache, mode 0600).
const benchToken = "bench-0123456789abcdef0123456789abcdef0123456789"

// httpServer is one toolgate serving MCP over HTTP.
type httpServer struct {
	cmd *exec.Cmd
	url string
}

// startHTTP starts argv (toolgate serve ... --listen 127.0.0.1:0) and
// waits for the line naming its URL; the rest of its stderr goes to logw.
func startHTTP(argv, env []string, logw io.Writer) (*httpServer, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	pr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logw, line)
			if u, ok := strings.CutPrefix(line, "toolgate serve: MCP on "); ok && !sent {
				found <- u
				sent = true
			}
		}
		close(found)
	}()
	select {
	case u, ok := <-found:
		if !ok {
			_ = cmd.Wait()
			return nil, fmt.Errorf("%s exited before serving", argv[0])
		}
		return &httpServer{cmd: cmd, url: u}, nil
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s named no URL within 60 s", argv[0])
	}
}

func (h *httpServer) close() {
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}

// dialHTTP connects one client (its own connections) to h: a 2025-11-25
// session, or the stateless 2026-07-28 revision.
func dialHTTP(h *httpServer, stateless bool) (*session, error) {
	s := &session{cmd: h.cmd, started: time.Now()}
	c, err := mcptest.Dial(context.Background(), h.url, mcptest.Options{
		Token: benchToken, Legacy: !stateless, Name: "toolgate-bench-http", Timeout: 60 * time.Second,
		HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}},
	})
	if err != nil {
		return nil, err
	}
	s.c = c
	s.ready = time.Now()
	return s, nil
}

// httpServerFor starts toolgate over HTTP for sandbox path p, with enough
// concurrency for the throughput rows: 128 clients, each with its own
// connections, all from 127.0.0.1 (so no per-client connection bound).
func (b *bench) httpServerFor(conf, p string) (*httpServer, error) {
	tokens, err := b.writeConf("tokens", "bench "+benchToken+"\n")
	if err != nil {
		return nil, err
	}
	argv := b.serverArgv(conf, append(backendFlags(p), "--listen", "127.0.0.1:0", "--auth-tokens", tokens,
		"--max-concurrent", "128", "--max-concurrent-per-principal", "0", "--max-connections-per-client", "0")...)
	return startHTTP(argv, httpEnv(), b.log)
}

func httpEnv() []string { return peerEnv() }

// httpThroughput is the throughput of one HTTP server with conc clients,
// each its own session and connections, making total calls between them.
func httpThroughput(h *httpServer, tool string, conc, total int) (sample, time.Duration, error) {
	sessions := make([]*session, conc)
	for i := range sessions {
		s, err := dialHTTP(h, false)
		if err != nil {
			for _, s := range sessions[:i] {
				s.close()
			}
			return nil, 0, err
		}
		sessions[i] = s
	}
	defer func() {
		for _, s := range sessions {
			s.close()
		}
	}()
	return concurrentSessions(sessions, tool, total)
}

// The per-call HTTP rows, measured in the same rounds as stdio's.
const httpGroup = "toolgate (MCP over streamable HTTP, loopback)"

func (b *bench) httpPaths(conf string, add func(*path, error)) {
	h, err := b.httpServerFor(conf, "bwrap")
	if err != nil {
		add(&path{group: httpGroup, name: "HTTP: direct (read tool)"}, err)
		return
	}
	legacy, err := dialHTTP(h, false)
	p := b.mcpPath(legacy, httpGroup, "HTTP: direct (read tool)", "2025-11-25 session, mcp-go's streamable HTTP client; the same server as the next two", "rd", nil)
	p.close = func() { legacy.close(); h.close() }
	add(p, err)
	bw := b.mcpPath(legacy, httpGroup, "HTTP: bwrap", "2025-11-25 session", "ts", nil)
	bw.close = nil // the first row closes the session and the server
	add(bw, err)
	modern, err := dialHTTP(h, true)
	add(b.mcpPath(modern, httpGroup, "HTTP 2026-07-28: direct (read tool)", "stateless: no session, _meta on every request", "rd", nil), err)
}

// httpThroughputRows: one HTTP server, N clients each with its own session
// and connections.
func (b *bench) httpThroughputRows(conf string) {
	for _, p := range []struct{ name, tool string }{{"HTTP direct", "rd"}, {"HTTP bwrap", "ts"}} {
		h, err := b.httpServerFor(conf, "bwrap")
		if err != nil {
			b.res.Throughput = append(b.res.Throughput, Throughput{Path: p.name, Skipped: firstLine(err.Error())})
			continue
		}
		for _, conc := range []int{1, 8, 32, 128} {
			t := Throughput{Path: p.name, Concurrency: conc}
			total := max(b.calls, conc*25)
			d, el, err := httpThroughput(h, p.tool, conc, total)
			if err != nil {
				t.Skipped = firstLine(err.Error())
			} else {
				t.Calls = len(d)
				t.CallsPerSec = float64(len(d)) / el.Seconds()
				t.MedianMS, t.P99MS = ms(d.median()), ms(d.p99())
				_, t.PeakRSSKiB = rss(h.cmd.Process.Pid)
				logf(b.stderr, "throughput %s x%d clients: %.0f calls/s, median %s ms, p99 %s ms", p.name, conc, t.CallsPerSec, fmtMS(t.MedianMS), fmtMS(t.P99MS))
			}
			b.res.Throughput = append(b.res.Throughput, t)
		}
		h.close()
	}
}
