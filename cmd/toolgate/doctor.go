package main

import (
	"flag"
	"fmt"
	"io"
)

// doctor reports what works on this host and the exact fix for what does not.
func doctor(args []string, stdout, stderr io.Writer) int {
	var s settings
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	s.register(fs)
	if !parse(fs, args, stderr) {
		return 2
	}
	fmt.Fprintf(stdout, "toolgate %s\n", version)
	return 0
}
