package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolgate/toolgate/auth"
)

// sessions binds each 2025-11-25 session id (Mcp-Session-Id) to the
// principal whose initialize minted it: a request that names a session of
// another principal, or one this replica never minted, is answered 404, so
// that no principal can cancel, read the notifications of, or end another's
// session. The ids are 128 random bits. A replica keeps its sessions in
// memory: a load balancer in front of several replicas must route a
// session to the replica that minted it (2026-07-28 requests carry no
// session and go anywhere).
type sessions struct {
	mu   sync.Mutex
	byID map[string]*boundSession
	// perPrincipal bounds the live sessions of one principal: minting one
	// more forgets its least recently used.
	perPrincipal int
	idle         time.Duration
	now          func() time.Time
}

type boundSession struct {
	principal string
	last      time.Time
}

func newSessions(perPrincipal int, idle time.Duration) *sessions {
	return &sessions{byID: map[string]*boundSession{}, perPrincipal: perPrincipal, idle: idle, now: time.Now}
}

var errSessionUnknown = errors.New("session not found")

// owns reports whether id is a live session of principal, touching it.
func (s *sessions) owns(principal, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.byID[id]
	if !ok || b.principal != principal {
		return false
	}
	if s.idle > 0 && s.now().Sub(b.last) > s.idle {
		delete(s.byID, id)
		return false
	}
	b.last = s.now()
	return true
}

func (s *sessions) mint(principal string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var oldest string
	n := 0
	for k, v := range s.byID {
		if s.idle > 0 && now.Sub(v.last) > s.idle {
			delete(s.byID, k)
			continue
		}
		if v.principal != principal {
			continue
		}
		n++
		if oldest == "" || v.last.Before(s.byID[oldest].last) {
			oldest = k
		}
	}
	if s.perPrincipal > 0 && n >= s.perPrincipal && oldest != "" {
		delete(s.byID, oldest)
	}
	s.byID[id] = &boundSession{principal: principal, last: now}
	return id
}

func (s *sessions) terminate(principal, id string, any bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.byID[id]
	if !ok || (!any && b.principal != principal) {
		return errSessionUnknown
	}
	delete(s.byID, id)
	return nil
}

// ResolveSessionIdManager implements mcpserver.SessionIdManagerResolver: a
// manager bound to the request's principal; without a request (mcp-go's
// idle sweeper, shutdown), one that may end any session.
func (s *sessions) ResolveSessionIdManager(r *http.Request) mcpserver.SessionIdManager { //nolint:staticcheck // ST1003: mcp-go's interface names the method
	if r == nil {
		return sessionManager{s: s, any: true}
	}
	p, _ := auth.PrincipalFrom(r.Context())
	return sessionManager{s: s, principal: p.Key()}
}

type sessionManager struct {
	s         *sessions
	principal string
	any       bool
}

func (m sessionManager) Generate() string { return m.s.mint(m.principal) }

func (m sessionManager) Validate(id string) (bool, error) {
	if m.any {
		return false, nil
	}
	if !m.s.owns(m.principal, id) {
		return false, fmt.Errorf("%w", errSessionUnknown)
	}
	return false, nil
}

func (m sessionManager) Terminate(id string) (bool, error) {
	return false, m.s.terminate(m.principal, id, m.any)
}

// principalLimits bounds each principal's concurrent calls; the excess
// queues, as --max-concurrent does for the whole server.
type principalLimits struct {
	max int
	mu  sync.Mutex
	sem map[string]*principalSlots
}

type principalSlots struct {
	ch    chan struct{}
	users int // holders and waiters, so that an idle principal's entry goes
}

func newPrincipalLimits(max int) *principalLimits {
	return &principalLimits{max: max, sem: map[string]*principalSlots{}}
}

// acquire takes a slot of principal, waiting at most timeout (the call's
// own) or until ctx ends.
func (l *principalLimits) acquire(ctx context.Context, principal string, timeout time.Duration) (func(), time.Duration, error) {
	if l == nil || l.max <= 0 {
		return func() {}, 0, nil
	}
	l.mu.Lock()
	ps := l.sem[principal]
	if ps == nil {
		ps = &principalSlots{ch: make(chan struct{}, l.max)}
		l.sem[principal] = ps
	}
	ps.users++
	l.mu.Unlock()
	done := func() {
		l.mu.Lock()
		if ps.users--; ps.users == 0 {
			delete(l.sem, principal)
		}
		l.mu.Unlock()
	}
	release := func() { <-ps.ch; done() }
	start := time.Now()
	select {
	case ps.ch <- struct{}{}:
		return release, 0, nil
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ps.ch <- struct{}{}:
		return release, time.Since(start), nil
	case <-t.C:
		done()
		return nil, time.Since(start), fmt.Errorf("queued for %s behind %d running calls of this principal (--max-concurrent-per-principal) without a free slot; not run", timeout, l.max)
	case <-ctx.Done():
		done()
		return nil, time.Since(start), fmt.Errorf("cancelled while queued: %w", ctx.Err())
	}
}
