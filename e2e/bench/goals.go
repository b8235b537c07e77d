package main

import (
	"fmt"
	"math"
)

// The per-call rows that issue 27's goals and the breakdown of a pool-off
// bwrap call are computed from, by name: each is a path of the same paced,
// shuffled rounds (perCall).
const (
	forkExecRow          = "fork+exec from Go"
	bwrapBareRow         = "raw bwrap, no seccomp filter, the tool exec'd without the init shim"
	bwrapNoSeccompRow    = "raw bwrap, no seccomp filter"
	rawBwrapRow          = "raw bwrap"
	enterNoCgroupRow     = "bwrap through the enter shim, no cgroup (by hand)"
	enterV2Row           = "bwrap through the enter shim, cgroup2 group only (by hand)"
	enterFullRow         = "bwrap through the enter shim, per-call cgroups (by hand)"
	teardownRow          = "teardown of the per-call cgroups after bwrap exits (by hand)"
	cgroupRow            = "cgroup creation and removal alone, in-process"
	runcStartRow         = "runc start of a created container, toolgate's own bundle"
	runcStartExitRow     = "runc start of a created container, until its init has exited"
	gitHostRow           = "git_diff_input's git runs on the host"
	directRow            = "direct (read tool)"
	bwrapRow             = "bwrap"
	bwrapPoolRow         = "bwrap, pool on"
	runcPoolRow          = "oci/runc, pool on"
	builtinGitDiffRow    = "built-in git_diff_input"
	builtinGitDiffOffRow = "built-in git_diff_input, pool off"
)

// findRow returns the measured row named name, if any.
func findRow(rows []Row, name string) (Row, bool) {
	for _, r := range rows {
		if r.Name == name && r.Skipped == "" {
			return r, true
		}
	}
	return Row{}, false
}

// ratioTarget holds median(a) to at most limit times median(floor).
func ratioTarget(rows []Row, name, a, floor string, limit float64) Target {
	t := Target{Name: name, Want: fmt.Sprintf("median ≤ %.2f× %s", limit, floor)}
	ra, ok1 := findRow(rows, a)
	rf, ok2 := findRow(rows, floor)
	if !ok1 || !ok2 || rf.MedianMS <= 0 {
		t.Unmeasured = "a path was not measured"
		return t
	}
	r := ra.MedianMS / rf.MedianMS
	t.Measured = fmt.Sprintf("%s / %s ms = %.2f×", fmtMS(ra.MedianMS), fmtMS(rf.MedianMS), r)
	t.Held = r <= limit
	return t
}

// overTarget holds median(a) to at most limit ms over median(floor).
func overTarget(rows []Row, name, a, floor string, limit float64) Target {
	t := Target{Name: name, Want: fmt.Sprintf("median(%s) − median(%s) ≤ %s ms", a, floor, fmtMS(limit))}
	ra, ok1 := findRow(rows, a)
	rf, ok2 := findRow(rows, floor)
	if !ok1 || !ok2 {
		t.Unmeasured = "a path was not measured"
		return t
	}
	add := ra.MedianMS - rf.MedianMS
	t.Measured = fmt.Sprintf("%s − %s = %.2f ms", fmtMS(ra.MedianMS), fmtMS(rf.MedianMS), add)
	t.Held = add <= limit
	return t
}

// goalTargets are issue 27's goals: each path against its floor, both
// measured side by side in the same rounds, calls paced as an agent's.
func goalTargets(rows []Row) []Target {
	return []Target{
		ratioTarget(rows, "git_diff_input ≤ 2× its git runs on the host", builtinGitDiffRow, gitHostRow, 2),
		ratioTarget(rows, "(info) git_diff_input, pool off, ≤ 2× its git runs on the host", builtinGitDiffOffRow, gitHostRow, 2),
		overTarget(rows, "bwrap, pool on, ≤ direct (read tool) + 0.5 ms", bwrapPoolRow, directRow, 0.5),
		ratioTarget(rows, "bwrap, pool off, ≤ 1.5× raw bwrap", bwrapRow, rawBwrapRow, 1.5),
		overTarget(rows, "oci/runc, pool on, ≤ runc start of a created container + 1.5 ms", runcPoolRow, runcStartRow, 1.5),
		ratioTarget(rows, "toolgate-shim starts in ≤ 1.3× a minimal static Go binary's time", shimStartRow, minimalStartRow, 1.3),
	}
}

// Step is one line of the breakdown of a pool-off bwrap call.
type Step struct {
	Name string `json:"name"`
	// Kind is StepChain (the chain's steps add up to the total),
	// StepTotal, or StepAlone (a part of a step, timed by itself).
	Kind string `json:"kind"`
	// MS is median(Row) − median(Base), or median(Row) without a Base.
	Row  string  `json:"row"`
	Base string  `json:"base,omitempty"`
	MS   float64 `json:"ms"`
	// Unmeasured says why a row the line needs was not measured.
	Unmeasured string `json:"unmeasured,omitempty"`
}

// The kinds of Step.
const (
	StepChain = "step"
	StepTotal = "total"
	StepAlone = "alone"
)

// toolgateStep is the breakdown's last step: toolgate's bwrap call less
// the same exec chain made by hand, cgroups included.
const toolgateStep = "what toolgate adds over the exec chain by hand"

// bwrapChain are the rows of the pool-off bwrap call's exec chain, each
// one step more than the one before: the breakdown's steps.
var bwrapChain = []struct{ step, row string }{
	{"the tool's own fork+exec from Go", forkExecRow},
	{"bwrap itself: its namespaces and mounts, its exec of the tool", bwrapBareRow},
	{"the init shim: its start, the rlimits, its exec of the tool with exactly the policy's environment", bwrapNoSeccompRow},
	{"seccomp: the filter loaded by bwrap, and every syscall after it through it", rawBwrapRow},
	{"the enter shim: its start, the uid drop, a new session keyring, its exec of bwrap", enterNoCgroupRow},
	{"the cgroup2 group: made, the enter shim started in it (CLONE_INTO_CGROUP)", enterV2Row},
	{"", enterFullRow}, // named by what is before it (breakdown)
	{toolgateStep, bwrapRow},
}

// bwrapAlone are parts of the chain's steps timed by themselves.
var bwrapAlone = []struct{ step, row string }{
	{"a shim's start: fork+exec+exit of toolgate-shim (the chain starts two: enter, init)", shimStartRow},
	{"the call's cgroups made and removed, in-process, no process in them", cgroupRow},
	{"the teardown after the call: its cgroups killed and removed once bwrap exits (toolgate: after the answer, off the call's path)", teardownRow},
}

// breakdown is the pool-off bwrap call, step by step: each step of the
// exec chain is the difference between the medians of two rows of the
// same rounds, the row with the step and the last measured row without
// it, so that the steps add up to toolgate's bwrap row; then the parts
// timed alone. A step whose row was not measured says why, and the next
// step is taken from the last measured row. Nil when none of the chain
// was measured.
func breakdown(rows []Row) []Step {
	var out []Step
	measured := false
	base := ""
	for _, c := range bwrapChain {
		st := Step{Name: c.step, Kind: StepChain, Row: c.row}
		if c.row == enterFullRow {
			st.Name = "the call's cgroups: made and entered"
			if base == enterV2Row {
				st.Name = "the v1 pids and memory groups: made, joined by the enter shim (a hybrid host)"
			}
		}
		r, why := rowOrReason(rows, c.row)
		switch {
		case why != "":
			st.Unmeasured = why
		case c.step == toolgateStep && base != enterFullRow:
			st.Unmeasured = "the exec chain by hand with its cgroups was not measured"
		default:
			measured = true
			st.MS = r.MedianMS
			if b, ok := findRow(rows, base); ok {
				st.Base, st.MS = base, roundMS(r.MedianMS-b.MedianMS)
			}
			base = c.row
		}
		out = append(out, st)
	}
	if !measured {
		return nil
	}
	total := Step{Name: "toolgate's bwrap call, pool off", Kind: StepTotal, Row: bwrapRow}
	if r, why := rowOrReason(rows, bwrapRow); why != "" {
		total.Unmeasured = why
	} else {
		total.MS = r.MedianMS
	}
	out = append(out, total)
	for _, a := range bwrapAlone {
		st := Step{Name: a.step, Kind: StepAlone, Row: a.row}
		if r, why := rowOrReason(rows, a.row); why != "" {
			st.Unmeasured = why
		} else {
			st.MS = r.MedianMS
		}
		out = append(out, st)
	}
	return out
}

// rowOrReason returns the measured row named name, or why there is none.
func rowOrReason(rows []Row, name string) (Row, string) {
	for _, r := range rows {
		if r.Name == name {
			if r.Skipped != "" {
				return Row{}, "skipped: " + r.Skipped
			}
			return r, ""
		}
	}
	return Row{}, "not measured"
}

// roundMS rounds a difference of medians to the microsecond, as ms does.
func roundMS(v float64) float64 { return math.Round(v*1000) / 1000 }
