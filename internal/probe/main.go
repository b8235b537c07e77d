// Command probe is the test tool of toolgate's runner and sandbox tests:
// package probes as a static program. Tests build it with `go build`
// (internal/testbin); it is never installed.
package main

import (
	"os"

	"github.com/toolgate/toolgate/internal/probes"
)

func main() {
	probes.Main(nil, os.Args[1:])
}
