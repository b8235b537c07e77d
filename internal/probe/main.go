// Command probe is the test tool of toolgate's runner and sandbox tests:
// package probes as a static program. Tests build it with `go build`
// (internal/testbin); it is never installed.
package main

import (
	"os"
	"runtime"

	"github.com/toolgate/toolgate/internal/probes"
)

// init keeps main on the main thread, whose parent-death signal is the
// process's own (the pdeathsig mode reads it there).
func init() { runtime.LockOSThread() }

func main() {
	probes.Main(nil, os.Args[1:])
}
