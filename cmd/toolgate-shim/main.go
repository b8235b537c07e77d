// Command toolgate-shim is the small exec helper of toolgate: the reap,
// enter, init, service, standby, hold and mask shims of package
// runtime/shim (see shim.Arg). It is a separate binary so that it starts
// fast: it links runtime/shim alone, which imports nothing of the server's
// side (package runtime, the egress proxy, net/http), while the toolgate
// binary's dependencies spend milliseconds in package initialisation.
// toolgate finds it next to its own executable.
package main

import "github.com/toolgate/toolgate/runtime/shim"

func main() { shim.Main() }
