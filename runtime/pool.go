package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/telemetry"
)

// key identifies what a sandbox prepared for t would run: two templates
// with the same key are interchangeable, any difference makes another.
func (t Template) key() string {
	h := sha256.New()
	field := func(s string) {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	field("tool")
	field(t.Path)
	field(t.Dir)
	fmt.Fprintf(h, "%d", len(t.Argv))
	for _, a := range t.Argv {
		field(a)
	}
	fmt.Fprintf(h, "%v%v%d", t.SplitStderr, t.Stdin, len(t.Env))
	for _, kv := range t.Env {
		field(kv)
	}
	fmt.Fprintf(h, "%v%v%v%d", t.Proxied, t.Trusted, t.Session, len(t.Verbs))
	for _, v := range t.Verbs {
		field(v)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// serviceKey identifies what a sandbox prepared for s would run, its
// variables' values included (they are part of the prepared process).
func serviceKey(s Service) string {
	h := sha256.New()
	for _, f := range slices.Concat([]string{"service", s.Name, s.Path, s.Dir, fmt.Sprint(s.Network), fmt.Sprint(len(s.Argv))}, s.Argv,
		[]string{fmt.Sprint(len(s.Env))}, s.Env, []string{fmt.Sprint(len(s.ReadOnly))}, s.ReadOnly) {
		fmt.Fprintf(h, "%d:%s", len(f), f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Preparer is a sandbox backend that can prepare a sandbox for a template
// ahead of its call: Prepare starts it (its setup runs on in the
// background; Standby.Ready says when it is done) and returns at once.
// The prepared sandbox is the backend's own rendering of the sandbox
// policy, the same one Run uses, with the last step (the exec of the tool)
// held back until the release.
type Preparer interface {
	Runner
	Prepare(t Template) (*Standby, error)
}

// ServicePreparer is a backend that can also prepare a long-lived
// service's sandbox ahead of its start.
type ServicePreparer interface {
	ServiceStarter
	PrepareService(s Service) (*Standby, error)
	// ReleaseService turns a prepared service sandbox into the running
	// Process.
	ReleaseService(sb *Standby, s Service) (*Process, error)
}

// PoolConfig bounds a Pool.
type PoolConfig struct {
	// Depth is how many prepared sandboxes are kept for each template
	// (and for each service, at most one).
	Depth int
	// Max bounds the prepared sandboxes held at once, in all; beyond it
	// the least recently used template's are given up. 0: Depth per
	// template, without a global bound.
	Max int
	// MaxAge replaces a prepared sandbox older than this (0: never).
	MaxAge time.Duration
	// Parallel bounds the sandboxes being prepared at once (0: 2).
	Parallel int
}

// DefaultPoolDepth is the default depth of the sandbox pool: one prepared
// sandbox per test-class tool (docs/sandbox.md, "What a call costs").
const DefaultPoolDepth = 1

// DefaultPoolMax is the default bound on prepared sandboxes held at once.
const DefaultPoolMax = 32

// DefaultPoolMaxAge is the default age after which a prepared sandbox is
// replaced: what it bound from the host (/etc's allow-list, the tool's
// exe) is then at most this old.
const DefaultPoolMaxAge = 10 * time.Minute

// Pool keeps sandboxes prepared ahead of their calls, so that a call only
// releases one that is ready: for each template it is told to keep
// (Keep), Depth single-use sandboxes, each started by the backend with the
// full policy and waiting on its release channel. A call of a kept
// template takes a ready one, and a replacement is prepared off the call's
// path, after it. A sandbox is used once and never returned. When none is
// there (a burst beyond the pool) the call runs through the backend's
// own Run, which prepares its sandbox on the call's path: never
// unsandboxed. A stale one (it ended, a path it bound changed, it is
// older than MaxAge) is discarded, never used. Calls of templates it does
// not keep go to the backend directly.
//
// A Pool is a Runner (and a ServiceStarter when its backend starts
// services); it is safe for concurrent use.
type Pool struct {
	backend  Preparer
	services ServicePreparer // nil: services are started by the backend unpooled
	cfg      PoolConfig
	sem      chan struct{}

	mu     sync.Mutex
	slots  map[string]*slot
	closed bool

	bg       sync.WaitGroup // preparations and cleanups
	stopJan  chan struct{}
	janitor  sync.WaitGroup
	counters poolCounters
}

// slot is one template's (or service's) prepared sandboxes.
type slot struct {
	key      string
	name     string
	kind     string // "tool" or "service"
	t        Template
	svc      Service
	depth    int
	held     []*Standby // prepared, ready or not yet
	pending  int        // preparations asked for whose sandbox is not in held yet
	inflight int        // calls of it running now
	used     time.Time
	kept     bool      // Keep names it (a service slot is kept once started)
	backoff  time.Time // no preparation before this, after a failure
	fails    int
	lastErr  string
}

type poolCounters struct {
	hits, misses, stale, expired, prepared, failed, evicted atomic.Int64
}

// NewPool returns a pool over backend. With a depth of 0 (or a backend
// that cannot prepare sandboxes) it returns nil: callers use the backend
// itself.
func NewPool(backend Runner, cfg PoolConfig) *Pool {
	b, ok := backend.(Preparer)
	if !ok || cfg.Depth <= 0 {
		return nil
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 2
	}
	p := &Pool{backend: b, cfg: cfg, sem: make(chan struct{}, cfg.Parallel), slots: map[string]*slot{}, stopJan: make(chan struct{})}
	if s, ok := backend.(ServicePreparer); ok {
		p.services = s
	}
	if cfg.MaxAge > 0 {
		p.janitor.Go(p.sweepLoop)
	}
	return p
}

// Backend is the runner the pool prepares with.
func (p *Pool) Backend() Runner { return p.backend }

// Keep sets the templates the pool keeps sandboxes prepared for, and
// starts preparing them (in order, within Max). Sandboxes prepared for a
// template it no longer names are discarded.
func (p *Pool) Keep(ts []Template) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	ts = slices.DeleteFunc(slices.Clone(ts), func(t Template) bool { return !p.CanPrepare(t) })
	want := map[string]bool{}
	for _, t := range ts {
		k := t.key()
		want[k] = true
		if s, ok := p.slots[k]; ok {
			s.kept = true
			continue
		}
		p.slots[k] = &slot{key: k, name: t.Name, kind: "tool", t: t, depth: p.cfg.Depth, kept: true}
	}
	for k, s := range p.slots {
		if s.kind == "tool" && !want[k] {
			p.dropLocked(s)
		}
	}
	for _, t := range ts {
		p.refillLocked(p.slots[t.key()])
	}
}

// dropLocked forgets s and discards its sandboxes.
func (p *Pool) dropLocked(s *slot) {
	delete(p.slots, s.key)
	for _, sb := range s.held {
		p.discardLocked(sb)
	}
	s.held = nil
}

// heldLocked counts the sandboxes held or asked for.
func (p *Pool) heldLocked() int {
	n := 0
	for _, s := range p.slots {
		n += len(s.held) + s.pending
	}
	return n
}

// refillLocked asks for as many preparations as s lacks, within Max: a
// template called more recently than another takes the other's place.
func (p *Pool) refillLocked(s *slot) {
	if s == nil || p.closed || !s.kept || time.Now().Before(s.backoff) {
		return
	}
	// In a burst beyond the pool (more calls of s in flight than its
	// depth), the calls prepare their own sandboxes and the pool steps
	// aside: the CPU is the bound then, and a prepared sandbox costs a
	// little more than one made on the call's path (an OCI runtime's
	// create and start are two processes and the hold shim a third, where
	// run is one). The refill comes when the burst is over.
	if s.inflight > s.depth {
		return
	}
	for len(s.held)+s.pending < s.depth {
		if p.cfg.Max > 0 && p.heldLocked() >= p.cfg.Max && !p.evictLocked(s) {
			return
		}
		s.pending++
		p.bg.Go(func() { p.prepare(s) })
	}
}

// evictLocked gives up one sandbox of the least recently used slot that
// was used less recently than s, to make room for s.
func (p *Pool) evictLocked(s *slot) bool {
	var victim *slot
	for _, o := range p.slots {
		if o == s || len(o.held) == 0 || !o.used.Before(s.used) {
			continue
		}
		if victim == nil || o.used.Before(victim.used) {
			victim = o
		}
	}
	if victim == nil {
		return false
	}
	sb := victim.held[len(victim.held)-1]
	victim.held = victim.held[:len(victim.held)-1]
	p.counters.evicted.Add(1)
	p.discardLocked(sb)
	return true
}

// prepare prepares one sandbox for s, at most cfg.Parallel at once: the
// slot of the semaphore is held until the sandbox is ready or failed.
func (p *Pool) prepare(s *slot) {
	p.sem <- struct{}{}
	// The preparation counts as pending until its sandbox is in held, so
	// that no other refill sees room for it meanwhile.
	p.mu.Lock()
	if p.closed || p.slots[s.key] != s || len(s.held)+s.pending > s.depth {
		s.pending--
		p.mu.Unlock()
		<-p.sem
		return
	}
	p.mu.Unlock()
	var sb *Standby
	var err error
	if s.kind == "service" {
		sb, err = p.services.PrepareService(s.svc)
	} else {
		sb, err = p.backend.Prepare(s.t)
	}
	p.mu.Lock()
	s.pending--
	if err != nil {
		p.mu.Unlock()
		<-p.sem
		p.failed(s, err)
		return
	}
	if p.closed || p.slots[s.key] != s {
		p.mu.Unlock()
		<-p.sem
		p.discard(sb)
		return
	}
	s.held = append(s.held, sb)
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
	err = sb.WaitReady(ctx)
	cancel()
	<-p.sem
	if err != nil {
		p.mu.Lock()
		i := slices.Index(s.held, sb)
		if i >= 0 {
			s.held = slices.Delete(s.held, i, i+1)
		}
		p.mu.Unlock()
		p.discard(sb)
		// A sandbox discarded (or taken by a call) while it was
		// prepared did not fail.
		if i >= 0 {
			p.failed(s, err)
		}
		return
	}
	p.counters.prepared.Add(1)
	p.mu.Lock()
	s.fails, s.lastErr = 0, ""
	p.mu.Unlock()
}

// prepareTimeout bounds one preparation: a sandbox not ready by then is
// discarded.
const prepareTimeout = 60 * time.Second

// failed records a failed preparation and backs the slot off (1 s,
// doubling to a minute), so that a backend that cannot prepare does not
// spin; the calls of the slot run through the backend's Run meanwhile.
func (p *Pool) failed(s *slot, err error) {
	p.counters.failed.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	s.fails++
	s.lastErr = err.Error()
	s.backoff = time.Now().Add(min(time.Second<<min(s.fails-1, 6), time.Minute))
	time.AfterFunc(time.Until(s.backoff), func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.slots[s.key] == s {
			p.refillLocked(s)
		}
	})
}

// discard ends an unused sandbox off the caller's path.
func (p *Pool) discard(sb *Standby) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.discardLocked(sb)
}

// discardLocked is discard with p.mu held: every goroutine Close waits for
// is added under p.mu, before Close marks the pool closed and waits.
func (p *Pool) discardLocked(sb *Standby) {
	p.bg.Go(func() {
		sb.Discard()
		sb.Cleanup()
	})
}

// take returns a ready sandbox of s to release now, or nil. A call never
// waits for one still being prepared: it prepares its own on its path
// (the backend's Run), and the one being prepared serves a later call.
// (Waiting would cost a call the rest of a preparation that began only
// after the previous call, which for an OCI runtime's create and start is
// longer than its run.) The caller asks for the replacement once its call
// is over (refill).
func (p *Pool) take(s *slot) *Standby {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.used = time.Now()
	for i := 0; i < len(s.held); {
		sb := s.held[i]
		if p.cfg.MaxAge > 0 && time.Since(sb.Born()) > p.cfg.MaxAge {
			s.held = slices.Delete(s.held, i, i+1)
			p.counters.expired.Add(1)
			p.discardLocked(sb)
			continue
		}
		if sb.IsReady() {
			s.held = slices.Delete(s.held, i, i+1)
			p.counters.hits.Add(1)
			return sb
		}
		select {
		case <-sb.exited:
			s.held = slices.Delete(s.held, i, i+1)
			p.counters.stale.Add(1)
			p.discardLocked(sb)
			continue
		default:
		}
		i++
	}
	return nil
}

// begin counts a call of s in flight; end ends it and asks for the
// replacement.
func (p *Pool) begin(s *slot) {
	p.mu.Lock()
	s.inflight++
	p.mu.Unlock()
}

func (p *Pool) end(s *slot) {
	p.mu.Lock()
	s.inflight--
	p.mu.Unlock()
	p.refill(s)
}

// slotOf returns the slot kept for t, or nil.
func (p *Pool) slotOf(key string) *slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	return p.slots[key]
}

// CanPrepare reports whether the backend can prepare a sandbox for t
// ahead of its call: a helper session's only when it keeps one sandbox
// for its commands (SessionOpener), a proxied tool's only when its
// prepared sandboxes take their proxy at release (EgressAttacher).
func (p *Pool) CanPrepare(t Template) bool {
	if _, ok := Runner(p.backend).(SessionOpener); t.Session && !ok {
		return false
	}
	if _, ok := Runner(p.backend).(EgressAttacher); t.Proxied && !ok {
		return false
	}
	return true
}

// Run runs inv in a sandbox prepared for it when the pool keeps its
// template, else (or when none can be had) through the backend's Run.
// A call with an egress allowlist gets a proxy of its own, started for it
// and handed to the prepared sandbox at its release (EgressAttacher).
func (p *Pool) Run(ctx context.Context, inv Invocation) (Result, error) {
	if !inv.egressShape() || !p.CanPrepare(inv.Template) {
		return p.backend.Run(ctx, inv)
	}
	if err := inv.streams(inv.Template); err != nil {
		return Result{}, fmt.Errorf("pool: %s: %w", inv.Name, err)
	}
	s := p.slotOf(inv.key()) // the key of the call's Template
	if s == nil {
		return p.backend.Run(ctx, inv)
	}
	p.begin(s)
	defer p.end(s)
	_, span := telemetry.Start(ctx, "sandbox take")
	for range 3 {
		sb := p.take(s)
		if sb == nil {
			break
		}
		telemetry.Attrs(span, attribute.Bool("toolgate.pool.hit", true))
		res, err := p.release(ctx, sb, inv, span)
		p.afterCall(sb.Cleanup)
		if errors.Is(err, ErrStandbyStale) || errors.Is(err, ErrStandbyUsed) {
			p.counters.stale.Add(1)
			_, span = telemetry.Start(ctx, "sandbox take", trace.WithAttributes(attribute.Bool("toolgate.pool.stale_before", true)))
			continue
		}
		return res, err
	}
	p.counters.misses.Add(1)
	telemetry.Attrs(span, attribute.Bool("toolgate.pool.hit", false))
	span.End()
	return p.backend.Run(ctx, inv)
}

// release runs inv in the prepared sandbox sb, with its egress proxy when
// it has an allowlist: started now, within the take's span, handed over
// with the streams, and closed with the call. It ends take.
func (p *Pool) release(ctx context.Context, sb *Standby, inv Invocation, take trace.Span) (Result, error) {
	if !inv.Proxied {
		take.End()
		return sb.Release(ctx, inv.Call)
	}
	eg, err := Runner(p.backend).(EgressAttacher).AttachEgress(inv, sb.IDs())
	take.End()
	if err != nil {
		sb.Discard()
		return Result{}, err
	}
	defer eg.Close()
	res, err := sb.releaseWith(ctx, inv.Call, eg)
	res.Egress = eg.Use()
	return res, err
}

// EgressAttacher is a backend whose sandboxes prepared for a proxied
// template (Template.Proxied) take their call's egress proxy at release:
// AttachEgress starts the proxy of inv for the sandbox of host ids id.
type EgressAttacher interface {
	AttachEgress(inv Invocation, id SandboxID) (*Egress, error)
}

// afterCallDelay is how long after a call's result its sandbox's cleanup
// and its replacement's preparation begin: long enough for the server to
// send the answer first (on two vCPUs the preparation's fork and cgroup
// writes, and the cleanup's unmounts and cgroup removal, would otherwise
// compete with it), short beside a preparation (10-20 ms here).
const afterCallDelay = 3 * time.Millisecond

// afterCall runs f off the call's path, afterCallDelay from now (at once,
// when the pool is closing: Close is not waiting for it any more).
func (p *Pool) afterCall(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		go f()
		return
	}
	p.bg.Add(1)
	time.AfterFunc(afterCallDelay, func() {
		defer p.bg.Done()
		f()
	})
}

// refill asks, after the call, for the preparations s lacks.
func (p *Pool) refill(s *slot) {
	p.afterCall(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.slots[s.key] == s {
			p.refillLocked(s)
		}
	})
}

// OpenSession opens a helper session for t (OpenSession) in a sandbox
// prepared for it ahead of the call when the pool keeps t and one is
// ready, else in one the backend prepares on the caller's path (or, when
// it cannot keep one sandbox for a session, a sandbox per command). Once
// the session is closed, its teardown and the next sandbox's preparation
// run off the call's path.
func (p *Pool) OpenSession(ctx context.Context, t Template) (Session, error) {
	if err := t.sessionShape(); err != nil {
		return nil, err
	}
	if _, ok := Runner(p.backend).(SessionOpener); !ok {
		return OpenSession(ctx, p.backend, t)
	}
	s := p.slotOf(t.key())
	if s == nil {
		return openPrepared(ctx, p.backend, t, p.afterCall)
	}
	p.begin(s)
	_, span := telemetry.Start(ctx, "sandbox take")
	for range 3 {
		sb := p.take(s)
		if sb == nil {
			break
		}
		sess, err := sb.Session(t, p.afterCall)
		if err == nil {
			telemetry.Attrs(span, attribute.Bool("toolgate.pool.hit", true))
			span.End()
			return &pooledSession{Session: sess, end: func() { p.end(s) }}, nil
		}
		p.afterCall(sb.Cleanup)
		p.counters.stale.Add(1)
	}
	p.counters.misses.Add(1)
	telemetry.Attrs(span, attribute.Bool("toolgate.pool.hit", false))
	span.End()
	sess, err := openPrepared(ctx, p.backend, t, p.afterCall)
	if err != nil {
		p.end(s)
		return nil, err
	}
	return &pooledSession{Session: sess, end: func() { p.end(s) }}, nil
}

// pooledSession is a session of a kept template: its close is the end of
// its call for the pool, which then prepares the next.
type pooledSession struct {
	Session
	end  func()
	once sync.Once
}

func (s *pooledSession) Close() {
	s.Session.Close()
	s.once.Do(s.end)
}

// StartService starts svc in a sandbox prepared for it when there is one,
// else through the backend; either way it keeps one prepared for the
// service's next start.
func (p *Pool) StartService(ctx context.Context, svc Service) (*Process, error) {
	if p.services == nil {
		st, ok := Runner(p.backend).(ServiceStarter)
		if !ok {
			return nil, fmt.Errorf("%w: the backend runs tools, not long-lived servers", ErrNoServices)
		}
		return st.StartService(ctx, svc)
	}
	// A service with an egress allowlist has a proxy for its life, made
	// with its sandbox: it starts on its path.
	if len(svc.Egress) > 0 {
		return p.services.StartService(ctx, svc)
	}
	key := serviceKey(svc)
	p.mu.Lock()
	// A start of the same server with another environment (a rotated
	// token) replaces its earlier one: the sandbox prepared for that
	// would never be used again, and holds the old values.
	for k, o := range p.slots {
		if o.kind == "service" && o.name == svc.Name && k != key {
			p.dropLocked(o)
		}
	}
	s, ok := p.slots[key]
	if !ok && !p.closed {
		s = &slot{key: key, name: svc.Name, kind: "service", svc: svc, depth: 1, kept: true}
		p.slots[key] = s
	}
	p.mu.Unlock()
	if s != nil {
		p.begin(s)
		defer p.end(s)
		for range 3 {
			sb := p.take(s)
			if sb == nil {
				break
			}
			proc, err := p.services.ReleaseService(sb, svc)
			if err == nil {
				return proc, nil
			}
			p.afterCall(sb.Cleanup)
			if !errors.Is(err, ErrStandbyStale) && !errors.Is(err, ErrStandbyUsed) {
				return nil, err
			}
			p.counters.stale.Add(1)
		}
		p.counters.misses.Add(1)
	}
	return p.services.StartService(ctx, svc)
}

// sweepLoop replaces sandboxes older than MaxAge and drops those that
// ended, every quarter of MaxAge (at least every second).
func (p *Pool) sweepLoop() {
	tick := time.NewTicker(max(p.cfg.MaxAge/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-p.stopJan:
			return
		case <-tick.C:
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		for _, s := range p.slots {
			kept := s.held[:0]
			for _, sb := range s.held {
				ended := false
				select {
				case <-sb.exited:
					ended = true
				default:
				}
				switch {
				case ended:
					p.counters.stale.Add(1)
					p.discardLocked(sb)
				case time.Since(sb.Born()) > p.cfg.MaxAge:
					p.counters.expired.Add(1)
					p.discardLocked(sb)
				default:
					kept = append(kept, sb)
				}
			}
			s.held = kept
			p.refillLocked(s)
		}
		p.mu.Unlock()
	}
}

// PoolStatus is what the pool holds, for doctor and checkpoint_status
// (status.Sandbox.Pool: its JSON is what clients read, and a key never
// changes).
type PoolStatus struct {
	Depth  int    `json:"depth"`
	Max    int    `json:"max"`
	MaxAge string `json:"max_age"`
	// Ready and Preparing count the sandboxes held: waiting for their
	// release, or still being set up.
	Ready     int `json:"ready"`
	Preparing int `json:"preparing"`
	// Hits are calls that released a ready sandbox; Misses, calls that
	// prepared their own on their path (a burst beyond the pool, or a call
	// that came before the next sandbox was ready).
	Hits     int64 `json:"hits"`
	Misses   int64 `json:"misses"`
	Prepared int64 `json:"prepared"`
	Failed   int64 `json:"failed"`
	// Stale, Expired and Evicted count sandboxes discarded unused: they
	// ended or a path they bound changed; they were older than MaxAge;
	// another template needed their place under Max.
	Stale   int64             `json:"stale"`
	Expired int64             `json:"expired"`
	Evicted int64             `json:"evicted"`
	Entries []PoolEntryStatus `json:"entries"`
}

// PoolEntryStatus is one template's or service's prepared sandboxes.
type PoolEntryStatus struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Ready     int    `json:"ready"`
	Preparing int    `json:"preparing"`
	LastError string `json:"last_error,omitempty"`
}

// Status reports what the pool holds now.
func (p *Pool) Status() PoolStatus {
	st := PoolStatus{
		Depth: p.cfg.Depth, Max: p.cfg.Max, MaxAge: p.cfg.MaxAge.String(),
		Hits: p.counters.hits.Load(), Misses: p.counters.misses.Load(),
		Prepared: p.counters.prepared.Load(), Failed: p.counters.failed.Load(),
		Stale: p.counters.stale.Load(), Expired: p.counters.expired.Load(), Evicted: p.counters.evicted.Load(),
		Entries: []PoolEntryStatus{},
	}
	p.mu.Lock()
	for _, s := range p.slots {
		e := PoolEntryStatus{Name: s.name, Kind: s.kind, Preparing: s.pending, LastError: s.lastErr}
		for _, sb := range s.held {
			if sb.IsReady() {
				e.Ready++
			} else {
				e.Preparing++
			}
		}
		st.Ready += e.Ready
		st.Preparing += e.Preparing
		st.Entries = append(st.Entries, e)
	}
	p.mu.Unlock()
	sort.Slice(st.Entries, func(i, j int) bool {
		a, b := st.Entries[i], st.Entries[j]
		if a.Kind != b.Kind {
			return a.Kind > b.Kind // tools first
		}
		return a.Name < b.Name
	})
	return st
}

// String summarises the status in one line.
func (st PoolStatus) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "depth %d per tool (at most %d held, replaced after %s): %d ready, %d preparing; %d calls released a ready sandbox, %d prepared their own",
		st.Depth, st.Max, st.MaxAge, st.Ready, st.Preparing, st.Hits, st.Misses)
	if st.Failed > 0 {
		fmt.Fprintf(&b, "; %d preparations failed", st.Failed)
	}
	return b.String()
}

// Close discards every prepared sandbox, waits until each is gone, and
// closes the backend when it holds host state.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for _, s := range p.slots {
		p.dropLocked(s)
	}
	p.mu.Unlock()
	close(p.stopJan)
	p.janitor.Wait()
	p.bg.Wait()
	if c, ok := Runner(p.backend).(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
