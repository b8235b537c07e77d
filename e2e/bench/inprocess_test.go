package main

import "testing"

// TestPoolBreakdown: each pool-on chain's steps are the differences of
// its rows and add up to its total; a skipped row says why and the next
// step is taken from the last measured row; MCP's share of a direct call
// is the direct row less the in-process one.
func TestPoolBreakdown(t *testing.T) {
	m := map[string]float64{
		forkExecRow: 2, directInRow: 2.5, bwrapInRow: 3.25, bwrapPoolRow: 4,
		runcStartExitRow: 12, runcInRow: 13, runcPoolRow: 14, directRow: 3.2,
	}
	got := poolBreakdown(rowsOf(m))
	want := map[string]struct {
		base string
		ms   float64
	}{
		forkExecRow:      {"", 2},
		directInRow:      {forkExecRow, 0.5},
		bwrapInRow:       {directInRow, 0.75},
		runcStartExitRow: {"", 12},
		runcInRow:        {runcStartExitRow, 1},
	}
	sums := map[string]float64{}
	chain := 0.0
	for _, st := range got {
		switch st.Kind {
		case StepChain:
			chain += st.MS
			if w, ok := want[st.Row]; ok && (st.Base != w.base || st.MS != w.ms) {
				t.Errorf("step %s = %s %v ms, want %s %v", st.Row, st.Base, st.MS, w.base, w.ms)
			}
		case StepTotal:
			sums[st.Name], chain = roundMS(chain), 0
			if st.MS != m[st.Row] {
				t.Errorf("total %s = %v, want the row's %v", st.Name, st.MS, m[st.Row])
			}
		case StepAlone:
			if st.Row != directRow || st.Base != directInRow || st.MS != 0.7 {
				t.Errorf("alone %+v, want direct − direct in-process = 0.7 ms", st)
			}
		}
	}
	if sums["toolgate's bwrap call, pool on"] != 4 || sums["toolgate's oci/runc call, pool on"] != 14 {
		t.Errorf("the chains add up to %v, want 4 and 14", sums)
	}

	delete(m, runcInRow)
	rows := append(rowsOf(m), Row{Name: runcInRow, Skipped: "no runc"})
	for _, st := range poolBreakdown(rows) {
		if st.Row == runcInRow && st.Kind == StepChain && st.Unmeasured != "skipped: no runc" {
			t.Errorf("runc step = %+v, want it skipped with the row's reason", st)
		}
		if st.Row == runcPoolRow && st.Kind == StepChain && (st.Base != runcStartExitRow || st.MS != 2) {
			t.Errorf("MCP step after a skipped row = %+v, want 14 − 12 from %s", st, runcStartExitRow)
		}
	}
	if got := poolBreakdown(rowsOf(map[string]float64{"other": 1})); got != nil {
		t.Errorf("breakdown of no chain rows = %+v, want nil", got)
	}
}
