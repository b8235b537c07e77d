package builtin

import (
	"sort"
	"strconv"
)

func sortedQuoted(keys []string) []string {
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = strconv.Quote(k)
	}
	return out
}
