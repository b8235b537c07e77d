package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/bwrap"
	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/direct"
	"github.com/toolgate/toolgate/runtime/oci"
)

// The runtime layer without MCP: the test tool's call through the
// backends' Go API, from the bench's own process, as toolgate's server
// makes it once a call has been decoded and admitted. Against the MCP rows
// they split a pool-on call into what the runtime layer costs (its release
// of a prepared sandbox, the shim's work, the status back) and what the
// MCP round trip and the server add; against the floors, into what the
// runtime layer adds over the runtime's own start.
const (
	directInRow   = "direct run, in-process"
	bwrapInRow    = "bwrap prepared sandbox released, in-process"
	runcInRow     = "runc prepared container released, in-process"
	inProcessNote = "the backend's Go API from the bench's own process, no MCP"
)

// inProcessPaths adds the three rows: a direct run, and the release of a
// bwrap sandbox and of a runc container prepared before the call (each
// prepared and cleaned up untimed, between calls, as the pool does after
// a call's answer).
func (b *bench) inProcessPaths(cg *cgroup.Manager, add func(*path, error)) {
	inv := rt.Invocation{
		Template: rt.Template{Name: "ts", Path: b.probe, Argv: b.toolArgv(), Dir: b.work},
		Call:     rt.Call{Timeout: 60 * time.Second, MaxBytes: 65536},
	}
	i := 0
	next := func() rt.Invocation {
		i++
		c := inv
		c.ID = "bench-in-" + strconv.Itoa(i)
		return c
	}
	dr := &direct.Runner{Cgroups: cg, Shim: b.shim}
	add(&path{
		group: "floor", name: directInRow, note: inProcessNote + ": direct.Runner.Run, its per-call cgroup2 group (CLONE_INTO_CGROUP, cgroup.kill)",
		call: func() error { return wantHello(dr.Run(context.Background(), next())) },
	}, nil)

	limits := rt.DefaultSandboxLimits()
	br, err := bwrap.New(context.Background(), bwrap.Config{Shim: b.shim, Cgroups: cg, Limits: limits})
	p := &path{group: "floor", name: bwrapInRow, note: inProcessNote + ": Prepare (cgroups joined, standby shim waiting) untimed, then Standby.Release: the pipe passed, the tool exec'd, its status back"}
	if err == nil {
		prepared(p, br, inv.Template)
		closeSb := p.close
		p.close = func() { closeSb(); _ = br.Close() }
	}
	add(p, err)

	p = &path{group: "floor", name: runcInRow, note: inProcessNote + ": Prepare (`runc create` under the hold shim) untimed, then Standby.Release: the hold shim's `runc start`, the wait for the container's init, its status back"}
	dir, err := os.MkdirTemp(b.cache, "oci-run-")
	if err != nil {
		add(p, err)
		return
	}
	or, err := oci.New(context.Background(), oci.Config{Runtime: "runc", Shim: b.shim, RunDir: dir, Limits: limits, Probe: "-"})
	if err != nil {
		_ = os.RemoveAll(dir)
		add(p, err)
		return
	}
	prepared(p, or, inv.Template)
	closeSb := p.close
	p.close = func() { closeSb(); _ = or.Close(); _ = os.RemoveAll(dir) }
	add(p, nil)
}

// prepared makes p's call the release of a sandbox of t that pr prepared
// before it: the first now, each next one in p's settle (untimed), after
// the last one's cleanup, as the pool prepares the next after a call.
func prepared(p *path, pr rt.Preparer, t rt.Template) {
	var sb *rt.Standby
	prepare := func() error {
		s, err := pr.Prepare(t)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := s.WaitReady(ctx); err != nil {
			s.Discard()
			s.Cleanup()
			return err
		}
		sb = s
		return nil
	}
	p.err = prepare()
	p.call = func() error {
		if sb == nil {
			return fmt.Errorf("no prepared sandbox")
		}
		return wantHello(sb.Release(context.Background(), rt.Call{Timeout: 60 * time.Second, MaxBytes: 65536}))
	}
	p.settle = func() {
		if sb != nil {
			sb.Cleanup()
			sb = nil
		}
		if err := prepare(); err != nil {
			p.err = err
		}
	}
	p.close = func() {
		if sb != nil {
			sb.Discard()
			sb.Cleanup()
		}
	}
}

// wantHello checks a call's result is the test tool's.
func wantHello(res rt.Result, err error) error {
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || !strings.Contains(string(res.Output), "hello") {
		return fmt.Errorf("exit %d: %q", res.ExitCode, firstLine(string(res.Output)))
	}
	return nil
}

// poolChains are the two pool-on calls as chains of rows, each one step
// more than the one before: a bwrap call from the tool's own fork+exec
// through the direct backend and the prepared sandbox to MCP, and a runc
// call from runc's own start of a created container through the hold
// shim to MCP.
var poolChains = []struct {
	total string
	steps []struct{ step, row string }
}{
	{"toolgate's bwrap call, pool on", []struct{ step, row string }{
		{"the tool's own fork+exec from Go", forkExecRow},
		{"the direct backend over it: the call's cgroup2 group, the pipe, the wait", directInRow},
		{"the prepared sandbox over a direct run: the release (one message, three descriptors), the shim's wake, its fork and the tool's exec inside the sandbox, the status back", bwrapInRow},
		{"MCP and the server: the round trip through mcp-go's client and server, the call's admission and audit record", bwrapPoolRow},
	}},
	{"toolgate's oci/runc call, pool on", []struct{ step, row string }{
		{"runc start of a created container and the wait for its init's exit, by hand", runcStartExitRow},
		{"the hold shim over it: the release, the shim's wake, its fork and wait of runc start, its wait for the init, the status back", runcInRow},
		{"MCP and the server", runcPoolRow},
	}},
}

// poolBreakdown is each pool-on call, step by step (poolChains), then
// what MCP and the server add to a direct call, for comparison with their
// step. Nil when no chain's row was measured.
func poolBreakdown(rows []Row) []Step {
	var out []Step
	measured := false
	for _, c := range poolChains {
		base := ""
		for _, s := range c.steps {
			st := Step{Name: s.step, Kind: StepChain, Row: s.row}
			r, why := rowOrReason(rows, s.row)
			if why != "" {
				st.Unmeasured = why
				out = append(out, st)
				continue
			}
			measured = true
			st.MS = r.MedianMS
			if b, ok := findRow(rows, base); ok {
				st.Base, st.MS = base, roundMS(r.MedianMS-b.MedianMS)
			}
			base = s.row
			out = append(out, st)
		}
		last := c.steps[len(c.steps)-1].row
		total := Step{Name: c.total, Kind: StepTotal, Row: last}
		if r, why := rowOrReason(rows, last); why != "" {
			total.Unmeasured = why
		} else {
			total.MS = r.MedianMS
		}
		out = append(out, total)
	}
	if !measured {
		return nil
	}
	st := Step{Name: "MCP and the server, a direct call's", Kind: StepAlone, Row: directRow, Base: directInRow}
	r, why := rowOrReason(rows, directRow)
	b, whyBase := rowOrReason(rows, directInRow)
	if why = cmp.Or(why, whyBase); why != "" {
		st.Unmeasured = why
	} else {
		st.MS = roundMS(r.MedianMS - b.MedianMS)
	}
	return append(out, st)
}
