// Command toolgate is an MCP server over stdio that turns the fixed-argv
// executables named in tools.conf into MCP tools, running test-class tools
// sandboxed.
//
//	toolgate [serve] [flags]        serve MCP on stdin/stdout (the default), or over HTTP with --listen
//	toolgate check [flags]          print the tools serve would serve, or the refused line; exit 1 when refused
//	toolgate --list-tools [flags]   the same as check
//	toolgate doctor [flags]         what backends and helpers work here, and how to fix what does not
//	toolgate selftest [--all]       run the sandbox escape battery against the configured backends
//	toolgate registry list|show|validate   inspect the tool-MCP registry without launching a server
//	toolgate policy check [flags]   explain what a Cedar policy decides for a principal and a tool
//	toolgate version                print the version
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/toolgate/toolgate/internal/probes"
	rt "github.com/toolgate/toolgate/runtime"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	rt.MaybeShim()
	if len(os.Args) > 1 && os.Args[1] == probes.ShimArg {
		// `toolgate selftest` runs this binary as the tool of each sandbox
		// under test.
		probes.Main([]string{probes.ShimArg}, os.Args[2:])
		os.Exit(0)
	}
	// Not in the shims above: what they are handed must reach what they
	// exec.
	if err := rt.SealInheritedFDs(); err != nil {
		fmt.Fprintf(os.Stderr, "toolgate: %v\n", err)
		os.Exit(1)
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	if i := slices.Index(args, "--list-tools"); i >= 0 {
		cmd = "check"
		args = slices.Delete(slices.Clone(args), i, i+1)
	}
	switch cmd {
	case "serve":
		return serve(args, stdin, stdout, stderr)
	case "check":
		return check(args, stdout, stderr)
	case "doctor":
		return doctor(args, stdout, stderr)
	case "selftest":
		return selftest(args, stdout, stderr)
	case "spec":
		return specCmd(args, stdout, stderr)
	case "registry":
		return registryCmd(args, stdout, stderr)
	case "policy":
		return policyCmd(args, stdout, stderr)
	case "version":
		fmt.Fprintf(stdout, "toolgate %s\n", version)
		return 0
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "toolgate: unknown command %q\n", cmd)
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  toolgate [serve] [flags]        serve MCP over stdio (default), or over streamable HTTP with --listen ADDR
  toolgate check [flags]          print what serve would serve, or the refused line and why (exit 1)
  toolgate --list-tools [flags]   same as check
  toolgate doctor [flags]         report which backends and helpers work here
  toolgate selftest [--all]       run the sandbox escape battery here; print each guarantee held or broken
  toolgate spec [flags] TOOL      print the OCI runtime spec a call of TOOL would use (--backend oci)
  toolgate registry list|show|validate   inspect the tool-MCP registry (run "toolgate registry help")
  toolgate policy check [flags]   explain what a --policy file decides for a principal and a tool
  toolgate version                print the version
run "toolgate serve -h" for the flags
`)
}

// signalContext is cancelled by SIGTERM or SIGINT, and by each of also
// (registry --live: SIGHUP; serve reloads on SIGHUP instead, reload.go).
//
// SIGPIPE gets a handler too: a client that closed its end of stdout then
// makes a write fail with EPIPE, which stops the server as the end of
// stdin does, instead of killing toolgate before it ends its sandboxes
// and removes its cgroups. A handler, not SIG_IGN: tools still start with
// the default disposition.
func signalContext(also ...os.Signal) (context.Context, context.CancelFunc) {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	return signal.NotifyContext(context.Background(), append([]os.Signal{syscall.SIGTERM, syscall.SIGINT}, also...)...)
}

// parse parses flags, printing errors to stderr; it returns false on error.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) bool {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "toolgate %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return false
	}
	return true
}
