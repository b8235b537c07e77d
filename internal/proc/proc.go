// Package proc reads what toolgate needs to know about its own processes
// from /proc: its children (the reapers), every process below one (the
// cost of a prepared sandbox, the bench), their memory and cgroups, its
// open descriptors. It imports only the standard library, so that the shim
// (runtime/shim), which runs on every sandboxed call, can use it without
// linking the server's side.
package proc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ChildPids lists the children of this process, from every thread's
// /proc/self/task/TID/children.
func ChildPids() []int {
	files, _ := filepath.Glob("/proc/self/task/*/children")
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for s := range strings.FieldsSeq(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}
