package builtin

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Byte budgets: the most the text content, and separately the JSON of the
// structured content, of one result may take. Each tool's description
// states its budget; a result that had to be cut says so (cut: true).
const (
	BudgetManifest = 256 << 10
	BudgetChunks   = 320 << 10
	BudgetReport   = 256 << 10
	BudgetSloc     = 64 << 10
	BudgetOutline  = 128 << 10
	BudgetRender   = 16 << 10
)

// jsonSize is the size of v marshalled.
func jsonSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return int(^uint(0) >> 1)
	}
	return len(b)
}

// fitCount returns the largest k in [0, n] for which size(k) <= budget,
// assuming size grows with k; 0 when nothing fits.
func fitCount(n, budget int, size func(k int) int) int {
	if size(n) <= budget {
		return n
	}
	// The largest k with size(k) <= budget: sort.Search finds the first k
	// that does not fit.
	first := sort.Search(n+1, func(k int) bool { return size(k) > budget })
	return max(first-1, 0)
}

// fit renders the largest prefix take(k) of n items whose structured
// content (JSON) and text both fit budget: the result of a list tool.
func fit[V any](n, budget int, take func(k int) V, text func(V) string) Result {
	k := fitCount(n, budget, func(k int) int {
		v := take(k)
		return max(jsonSize(v), len(text(v)))
	})
	v := take(k)
	return Result{Text: text(v), Structured: v}
}

// count renders n with a noun, plural when n is not 1 ("1 file",
// "2 files", "3 directories").
func count(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	if before, ok := strings.CutSuffix(noun, "y"); ok {
		return fmt.Sprintf("%d %sies", n, before)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// tokens estimates the model tokens of n bytes: one per four bytes,
// rounded up.
func tokens(n int) int { return (n + 3) / 4 }

// firstN returns at most n elements of s (never nil).
func firstN[T any](s []T, n int) []T {
	if n > len(s) {
		n = len(s)
	}
	out := make([]T, n)
	copy(out, s[:n])
	return out
}
