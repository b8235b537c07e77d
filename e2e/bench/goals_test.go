package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// rowsOf makes measured rows from names and medians.
func rowsOf(medians map[string]float64) []Row {
	var rows []Row
	for name, m := range medians {
		rows = append(rows, Row{Group: "g", Name: name, Calls: 10, MedianMS: m})
	}
	return rows
}

// chainRows are the rows of a hybrid host's full breakdown.
func chainRows() map[string]float64 {
	return map[string]float64{
		forkExecRow: 2, bwrapBareRow: 8, bwrapNoSeccompRow: 10, rawBwrapRow: 11.5,
		enterNoCgroupRow: 14, enterV2Row: 15, enterFullRow: 20, bwrapRow: 23,
		shimStartRow: 1.2, cgroupRow: 0.8, teardownRow: 6,
	}
}

func TestBreakdown(t *testing.T) {
	got := breakdown(rowsOf(chainRows()))
	want := []Step{
		{Name: "the tool's own fork+exec from Go", Kind: StepChain, Row: forkExecRow, MS: 2},
		{Name: "bwrap itself: its namespaces and mounts, its exec of the tool", Kind: StepChain, Row: bwrapBareRow, Base: forkExecRow, MS: 6},
		{Name: "the init shim: its start, the rlimits, its exec of the tool with exactly the policy's environment", Kind: StepChain, Row: bwrapNoSeccompRow, Base: bwrapBareRow, MS: 2},
		{Name: "seccomp: the filter loaded by bwrap, and every syscall after it through it", Kind: StepChain, Row: rawBwrapRow, Base: bwrapNoSeccompRow, MS: 1.5},
		{Name: "the enter shim: its start, the uid drop, a new session keyring, its exec of bwrap", Kind: StepChain, Row: enterNoCgroupRow, Base: rawBwrapRow, MS: 2.5},
		{Name: "the cgroup2 group: made, the enter shim started in it (CLONE_INTO_CGROUP)", Kind: StepChain, Row: enterV2Row, Base: enterNoCgroupRow, MS: 1},
		{Name: "the v1 pids and memory groups: made, joined by the enter shim (a hybrid host)", Kind: StepChain, Row: enterFullRow, Base: enterV2Row, MS: 5},
		{Name: toolgateStep, Kind: StepChain, Row: bwrapRow, Base: enterFullRow, MS: 3},
		{Name: "toolgate's bwrap call, pool off", Kind: StepTotal, Row: bwrapRow, MS: 23},
		{Name: "a shim's start: fork+exec+exit of toolgate-shim (the chain starts two: enter, init)", Kind: StepAlone, Row: shimStartRow, MS: 1.2},
		{Name: "the call's cgroups made and removed, in-process, no process in them", Kind: StepAlone, Row: cgroupRow, MS: 0.8},
		{Name: "the teardown after the call: its cgroups killed and removed once bwrap exits (toolgate: after the answer, off the call's path)", Kind: StepAlone, Row: teardownRow, MS: 6},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("breakdown (-want +got):\n%s", diff)
	}
	sum := 0.0
	for _, st := range got {
		if st.Kind == StepChain {
			sum += st.MS
		}
	}
	if roundMS(sum) != 23 {
		t.Errorf("the steps add up to %v, want the bwrap row's 23", sum)
	}
}

// TestBreakdownMissingRows: a step whose row was skipped says why, and the
// next step is taken from the last measured row (a cgroup2-only host has
// no cgroup2-only row: its per-call cgroups are the cgroup2 group); without
// the by-hand chain with cgroups, toolgate's own step is not measured.
func TestBreakdownMissingRows(t *testing.T) {
	m := chainRows()
	delete(m, enterV2Row)
	rows := append(rowsOf(m), Row{Name: enterV2Row, Skipped: "cgroup2 only"})
	got := breakdown(rows)
	byRow := map[string]Step{}
	for _, st := range got {
		if st.Kind == StepChain {
			byRow[st.Row] = st
		}
	}
	if st := byRow[enterV2Row]; st.Unmeasured != "skipped: cgroup2 only" {
		t.Errorf("cgroup2 step = %+v, want it skipped with the row's reason", st)
	}
	if st := byRow[enterFullRow]; st.Base != enterNoCgroupRow || st.MS != 6 || st.Name != "the call's cgroups: made and entered" {
		t.Errorf("cgroups step = %+v, want 20 − 14 = 6 ms from %s, named for all the call's cgroups", st, enterNoCgroupRow)
	}

	m = chainRows()
	delete(m, enterFullRow)
	got = breakdown(rowsOf(m))
	for _, st := range got {
		if st.Name == toolgateStep && (st.Unmeasured == "" || st.MS != 0) {
			t.Errorf("toolgate step without the by-hand chain = %+v, want it not measured", st)
		}
	}
	if got := breakdown(rowsOf(map[string]float64{"direct (read tool)": 3})); got != nil {
		t.Errorf("breakdown of no chain rows = %+v, want nil", got)
	}
}
