package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/toolgate/toolgate/conf"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/oci"
	"github.com/toolgate/toolgate/server"
)

// specCmd prints, as JSON, the OCI runtime spec a call of the configured
// test-class tool TOOL would use under --backend oci (with the runtime of
// --oci-runtime and the limits of the sandbox flags). It starts nothing and
// changes nothing on the host.
//
//	toolgate spec [flags] TOOL
func specCmd(args []string, stdout, stderr io.Writer) int {
	var s settings
	fs := flag.NewFlagSet("spec", flag.ContinueOnError)
	s.register(fs)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: toolgate spec [flags] TOOL")
		fs.PrintDefaults()
	}
	// Accept the tool name before or after the flags.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return 2
		}
	}
	if name == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	c := conf.Load(s.confPath, s.confOptions())
	switch c.State {
	case conf.StateRefused:
		fmt.Fprintf(stderr, "toolgate spec: tools.conf %s is refused (run `toolgate check`): %v\n", c.Path, c.Err())
		return 1
	case conf.StateAbsent:
		fmt.Fprintf(stderr, "toolgate spec: tools.conf %s is absent (%s): no external tools\n", c.Path, c.Reason)
		return 1
	}
	t, ok := c.Tool(name)
	if !ok {
		fmt.Fprintf(stderr, "toolgate spec: no tool %q in %s\n", name, c.Path)
		return 1
	}
	if t.Class != conf.ClassTest {
		fmt.Fprintf(stderr, "toolgate spec: tool %q is class %s: it runs directly, never in a container\n", name, t.Class)
		return 1
	}
	shim, err := rt.FindShim()
	if err != nil {
		fmt.Fprintf(stderr, "toolgate spec: %v\n", err)
		return 1
	}
	cfg, err := s.ociConfig(shim)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate spec: %v\n", err)
		return 2
	}
	inv := server.InvocationOf(t)
	inv.ID = "spec"
	spec, err := oci.Spec(cfg, inv)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate spec: %v\n", err)
		return 1
	}
	out, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		fmt.Fprintf(stderr, "toolgate spec: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", out)
	return 0
}
