package builtin

import (
	"fmt"
	"sort"
	"strconv"
)

func sprintf(format string, a ...any) string { return fmt.Sprintf(format, a...) }

func sortedQuoted(keys []string) []string {
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = strconv.Quote(k)
	}
	return out
}
