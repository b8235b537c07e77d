package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	rt "github.com/toolgate/toolgate/runtime"
)

// poolStatus reads the pool's state from checkpoint_status.
func poolStatus(s *session) (rt.PoolStatus, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, _, err := s.call(ctx, "checkpoint_status", nil)
	if err != nil || res.IsError {
		return rt.PoolStatus{}, false
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return rt.PoolStatus{}, false
	}
	var st struct {
		Sandbox struct {
			Pool *rt.PoolStatus `json:"pool"`
		} `json:"sandbox"`
	}
	if json.Unmarshal(raw, &st) != nil || st.Sandbox.Pool == nil {
		return rt.PoolStatus{}, false
	}
	return *st.Sandbox.Pool, true
}

// poolCounters are the pool's hits, waits and misses so far.
func poolCounters(s *session) (PoolCounts, bool) {
	st, ok := poolStatus(s)
	return PoolCounts{Hits: st.Hits, Misses: st.Misses}, ok
}

// waitPoolReady waits until the pool holds n ready sandboxes and prepares
// none.
func waitPoolReady(s *session, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		st, ok := poolStatus(s)
		if ok && st.Ready >= n && st.Preparing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the pool did not hold %d ready sandboxes within %s: %+v", n, limit, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// poolTools is how many test-class tools the idle-cost conf has: one
// prepared sandbox each.
const poolTools = 4

// poolConf is a tools.conf of poolTools test-class tools.
func (b *bench) poolConf() string {
	var c strings.Builder
	c.WriteString("# toolgate bench: the pool's idle cost\n")
	for i := range poolTools {
		fmt.Fprintf(&c, "tool p%d %s test 60 65536 on %s -- echo hello %d\n", i, b.probe, b.work, i)
	}
	return c.String()
}

// poolCost measures, per backend, what one prepared sandbox holds at rest:
// a server of poolTools test tools with the pool on, once every sandbox is
// ready, against the same server with the pool off.
func (b *bench) poolCost(string) {
	conf, err := b.writeConf("pool.conf", b.poolConf())
	backends := append([]string{"bwrap"}, prefixed("oci/", b.ociRuntimes)...)
	for _, backend := range backends {
		c := PoolCost{Backend: backend, Prepared: poolTools}
		if err != nil {
			c.Skipped = firstLine(err.Error())
			b.res.Pool = append(b.res.Pool, c)
			continue
		}
		if err := b.poolCostOf(conf, backend, &c); err != nil {
			c.Skipped = firstLine(err.Error())
		} else {
			logf(b.stderr, "pool idle cost %s: per prepared sandbox %.1f processes, %.1f MiB RSS, %.1f MiB PSS, %.1f cgroups", backend,
				c.Processes, c.RSSKiB/1024, c.PSSKiB/1024, c.Cgroups)
		}
		b.res.Pool = append(b.res.Pool, c)
	}
}

func (b *bench) poolCostOf(conf, backend string, c *PoolCost) error {
	off, err := b.sessionFor(conf, backend)
	if err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond)
	c.ServerOffKiB, _ = rss(off.pid())
	c.DescendantsOff = rt.DescendantsCost(off.pid()).Processes
	off.close()
	on, err := b.sessionFor(conf, backend+poolSuffix)
	if err != nil {
		return err
	}
	defer on.close()
	if err := waitPoolReady(on, poolTools, 120*time.Second); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond)
	cost := rt.DescendantsCost(on.pid())
	// Every prepared sandbox the server holds: the tools', and outline's
	// helper run when ctags is installed.
	st, ok := poolStatus(on)
	if !ok || st.Ready == 0 {
		return fmt.Errorf("no pool status")
	}
	c.Prepared = st.Ready
	n := float64(st.Ready)
	c.Processes, c.RSSKiB, c.PSSKiB, c.Cgroups = float64(cost.Processes)/n, float64(cost.RSSKiB)/n, float64(cost.PSSKiB)/n, float64(cost.Cgroups)/n
	c.ServerOnKiB, _ = rss(on.pid())
	return nil
}

func prefixed(prefix string, names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, prefix+n)
	}
	return out
}
