package main

import (
	"maps"
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

func TestRatioTarget(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rows       []Row
		want       Target
		unmeasured bool
	}{
		{
			name: "held at the limit",
			rows: rowsOf(map[string]float64{"a": 30, "f": 20}),
			want: Target{Name: "t", Want: "median ≤ 1.50× f", Measured: "30.0 / 20.0 ms = 1.50×", Held: true},
		},
		{
			name: "missed",
			rows: rowsOf(map[string]float64{"a": 30.5, "f": 20}),
			want: Target{Name: "t", Want: "median ≤ 1.50× f", Measured: "30.5 / 20.0 ms = 1.52×"},
		},
		{
			name: "floor skipped",
			rows: append(rowsOf(map[string]float64{"a": 30}), Row{Name: "f", Skipped: "no bwrap"}),
			want: Target{Name: "t", Want: "median ≤ 1.50× f", Unmeasured: "a path was not measured"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ratioTarget(tc.rows, "t", "a", "f", 1.5)); diff != "" {
				t.Errorf("ratioTarget (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOverTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		rows []Row
		want Target
	}{
		{
			name: "held",
			rows: rowsOf(map[string]float64{"a": 3.9, "f": 3.5}),
			want: Target{Name: "t", Want: "median(a) − median(f) ≤ 0.50 ms", Measured: "3.90 − 3.50 = 0.40 ms", Held: true},
		},
		{
			name: "missed",
			rows: rowsOf(map[string]float64{"a": 4.39, "f": 3.54}),
			want: Target{Name: "t", Want: "median(a) − median(f) ≤ 0.50 ms", Measured: "4.39 − 3.54 = 0.85 ms"},
		},
		{
			name: "path missing",
			rows: rowsOf(map[string]float64{"f": 3.54}),
			want: Target{Name: "t", Want: "median(a) − median(f) ≤ 0.50 ms", Unmeasured: "a path was not measured"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, overTarget(tc.rows, "t", "a", "f", 0.5)); diff != "" {
				t.Errorf("overTarget (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGoalTargets: each of issue 27's goals compares its path with its
// own floor and limit: held just inside it, missed just outside.
func TestGoalTargets(t *testing.T) {
	floors := map[string]float64{
		gitHostRow: 10, directRow: 3.5, rawBwrapRow: 12, runcStartRow: 12, minimalStartRow: 1,
	}
	inside := map[string]float64{
		builtinGitDiffRow: 20, builtinGitDiffOffRow: 19.9, bwrapPoolRow: 4, bwrapRow: 18, runcPoolRow: 13.5, shimStartRow: 1.3,
	}
	outside := map[string]float64{
		builtinGitDiffRow: 20.1, builtinGitDiffOffRow: 60, bwrapPoolRow: 4.01, bwrapRow: 18.1, runcPoolRow: 13.6, shimStartRow: 1.31,
	}
	want := []string{
		"git_diff_input ≤ 2× its git runs on the host",
		"(info) git_diff_input, pool off, ≤ 2× its git runs on the host",
		"bwrap, pool on, ≤ direct (read tool) + 0.5 ms",
		"bwrap, pool off, ≤ 1.5× raw bwrap",
		"oci/runc, pool on, ≤ runc start of a created container + 1.5 ms",
		"toolgate-shim starts in ≤ 1.3× a minimal static Go binary's time",
	}
	for _, tc := range []struct {
		name  string
		paths map[string]float64
		held  bool
	}{{"inside", inside, true}, {"outside", outside, false}} {
		t.Run(tc.name, func(t *testing.T) {
			medians := maps.Clone(floors)
			maps.Copy(medians, tc.paths)
			got := goalTargets(rowsOf(medians))
			var names []string
			for _, g := range got {
				names = append(names, g.Name)
				if g.Unmeasured != "" || g.Held != tc.held {
					t.Errorf("%s: held %v (unmeasured %q, measured %q), want held %v", g.Name, g.Held, g.Unmeasured, g.Measured, tc.held)
				}
			}
			if diff := cmp.Diff(want, names); diff != "" {
				t.Errorf("goalTargets names (-want +got):\n%s", diff)
			}
		})
	}
	for _, g := range goalTargets(nil) {
		if g.Unmeasured == "" {
			t.Errorf("%s: measured with no rows: %+v", g.Name, g)
		}
	}
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
