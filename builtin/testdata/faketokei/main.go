// Command faketokei stands in for tokei in tests (tokei is not packaged for
// Debian 12). Tests build it with `go build`; it is not part of toolgate.
//
// With --version it prints a tokei version line. Otherwise it records its
// argv, environment and working directory as JSON in EXE.log, then prints
// the file EXE.out (tokei-format JSON written by the test) and exits with
// the status in EXE.exit (default 0). When EXE.out is missing it prints
// nothing.
package main

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		os.Stdout.WriteString("tokei 12.1.2 compiled with serialization support: json\n")
		return
	}
	exe, err := os.Executable()
	if err != nil {
		os.Exit(99)
	}
	wd, _ := os.Getwd()
	rec, _ := json.Marshal(map[string]any{"args": os.Args[1:], "env": os.Environ(), "dir": wd})
	if err := os.WriteFile(exe+".log", rec, 0o644); err != nil {
		os.Exit(98)
	}
	if out, err := os.ReadFile(exe + ".out"); err == nil {
		os.Stdout.Write(out)
	}
	if b, err := os.ReadFile(exe + ".exit"); err == nil {
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		os.Stderr.WriteString("faketokei: failing as told\n")
		os.Exit(n)
	}
}
