// Command minimal is the bench's floor for the start of a Go program: a
// static binary that does nothing. scripts/bench.sh builds it next to the
// bench, and the shim's start is measured against it in the same rounds.
package main

func main() {}
