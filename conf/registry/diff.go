package registry

// A unified diff of two texts, line by line (Myers' O(ND) algorithm), for
// showing how a downstream tool's definition drifted from its pin.

import (
	"fmt"
	"strings"
)

// diffContext is the number of unchanged lines shown around each change.
const diffContext = 3

// maxDiffEdits bounds the edit distance Myers' search explores (its memory
// grows with the square of it); past it, the part between the common head
// and tail is shown as removed and added whole.
const maxDiffEdits = 1000

type diffOp struct {
	kind byte // ' ', '-' or '+'
	line string
}

// UnifiedDiff returns the unified diff, with three lines of context, that
// turns a into b, under the headers "--- aName" and "+++ bName"; "" when
// they are equal.
func UnifiedDiff(aName, bName, a, b string) string {
	if a == b {
		return ""
	}
	al, bl := splitLines(a), splitLines(b)
	ops := diffLines(al, bl)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", aName, bName)
	// aAt[p], bAt[p]: the lines of a and of b before ops[p].
	aAt, bAt := make([]int, len(ops)+1), make([]int, len(ops)+1)
	for p, op := range ops {
		aAt[p+1], bAt[p+1] = aAt[p], bAt[p]
		if op.kind != '+' {
			aAt[p+1]++
		}
		if op.kind != '-' {
			bAt[p+1]++
		}
	}
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk: the changes from i on that are at most 2*diffContext
		// unchanged lines apart, with diffContext lines around them.
		last := i
		for j := i + 1; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				if j-last-1 > 2*diffContext {
					break
				}
				last = j
			}
		}
		start, end := max(i-diffContext, 0), min(last+1+diffContext, len(ops))
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(aAt[start], aAt[end]-aAt[start]), hunkRange(bAt[start], bAt[end]-bAt[start]))
		for _, op := range ops[start:end] {
			out.WriteByte(op.kind)
			out.WriteString(op.line)
			out.WriteByte('\n')
		}
		i = end
	}
	return out.String()
}

// hunkRange renders a hunk's range of lines starting after line start
// (0-based), n long, as unified diffs do.
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// diffLines is the edit script from a to b: the common head and tail, and
// Myers' shortest script between them (or, past maxDiffEdits, all of the
// middle removed then added).
func diffLines(a, b []string) []diffOp {
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	var ops []diffOp
	for _, l := range a[:head] {
		ops = append(ops, diffOp{' ', l})
	}
	ma, mb := a[head:len(a)-tail], b[head:len(b)-tail]
	if mid, ok := myers(ma, mb); ok {
		ops = append(ops, mid...)
	} else {
		for _, l := range ma {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range mb {
			ops = append(ops, diffOp{'+', l})
		}
	}
	for _, l := range a[len(a)-tail:] {
		ops = append(ops, diffOp{' ', l})
	}
	return ops
}

// myers is the shortest edit script from a to b, removals before
// additions at each change; ok is false past maxDiffEdits.
func myers(a, b []string) ([]diffOp, bool) {
	n, m := len(a), len(b)
	limit := min(n+m, maxDiffEdits)
	off := limit + 1
	v := make([]int, 2*limit+3)
	var trace [][]int // trace[d]: v before step d, for k in [-d-1, d+1]
	for d := 0; d <= limit; d++ {
		trace = append(trace, append([]int(nil), v[off-d-1:off+d+2]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || k != d && v[off+k-1] < v[off+k+1] {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(a, b, trace, d), true
			}
		}
	}
	return nil, false
}

func backtrack(a, b []string, trace [][]int, dEnd int) []diffOp {
	var rev []diffOp
	x, y := len(a), len(b)
	for d := dEnd; d > 0; d-- {
		vp := trace[d]
		at := func(k int) int { return vp[k+d+1] }
		k := x - y
		prevK := k - 1
		if k == -d || k != d && at(k-1) < at(k+1) {
			prevK = k + 1
		}
		prevX := at(prevK)
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			rev = append(rev, diffOp{' ', a[x-1]})
			x, y = x-1, y-1
		}
		if x == prevX {
			rev = append(rev, diffOp{'+', b[y-1]})
			y--
		} else {
			rev = append(rev, diffOp{'-', a[x-1]})
			x--
		}
	}
	for x > 0 && y > 0 {
		rev = append(rev, diffOp{' ', a[x-1]})
		x, y = x-1, y-1
	}
	ops := make([]diffOp, len(rev))
	for i, op := range rev {
		ops[len(rev)-1-i] = op
	}
	return ops
}
