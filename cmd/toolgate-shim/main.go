// Command toolgate-shim is the small exec helper of toolgate: the reap,
// enter and init shims of package runtime (see runtime.ShimArg). It is a
// separate binary so that it starts in well under a millisecond: it links
// nothing but the runtime package, while the toolgate binary's MCP
// dependencies spend milliseconds in package initialisation. toolgate finds
// it next to its own executable.
package main

import (
	"fmt"
	"os"

	rt "github.com/toolgate/toolgate/runtime"
)

func main() {
	rt.MaybeShim()
	fmt.Fprintln(os.Stderr, "toolgate-shim: an internal helper of toolgate; not meant to be run by hand")
	os.Exit(2)
}
