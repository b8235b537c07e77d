// Command bench is toolgate's side-by-side benchmark (scripts/bench.sh)
// and soak test (scripts/soak.sh). It is a development program: it is not
// part of the shipped binaries.
//
//	bench run  [flags]   per-call cost of every execution path against its
//	                     floor and against what operators use instead, plus
//	                     throughput, start-up, a capped flood and the
//	                     server's RSS; writes bench.md and bench.json
//	bench soak [flags]   mixed calls against one server per sandbox backend;
//	                     fails when fds, threads, RSS, children, zombies,
//	                     containers, bundles or cgroups do not return to
//	                     their start values
//	bench profile [flags] the server in this process under a CPU profile
//
// The scripts build the binaries and install the peers; see them for the
// flags they pass.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bench run|soak [flags]")
		os.Exit(2)
	}
	var code int
	switch os.Args[1] {
	case "run":
		code = runBench(os.Args[2:], os.Stdout, os.Stderr)
	case "soak":
		code = runSoak(os.Args[2:], os.Stdout, os.Stderr)
	case "profile":
		code = runProfile(os.Args[2:], os.Stderr)
	default:
		fmt.Fprintf(os.Stderr, "bench: unknown command %q: want run or soak\n", os.Args[1])
		code = 2
	}
	os.Exit(code)
}

// common are the flags of both commands: where the built programs are.
type common struct {
	toolgate string // toolgate, with toolgate-shim next to it
	shim     string
	probe    string // the probe test tool (static)
	cache    string // work area, traversable by the sandbox uid
	work     string // the tool dir
	logPath  string // servers' stderr
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.toolgate, "toolgate", "", "the toolgate binary (toolgate-shim next to it)")
	fs.StringVar(&c.probe, "probe", "", "the probe test tool (go build ./internal/probe)")
	fs.StringVar(&c.cache, "cache", "/var/cache/toolgate/bench", "work directory (must be traversable by uid 65534)")
}

func (c *common) setup() error {
	if c.toolgate == "" || c.probe == "" {
		return fmt.Errorf("-toolgate and -probe are required")
	}
	for _, p := range []*string{&c.toolgate, &c.probe, &c.cache} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	c.shim = filepath.Join(filepath.Dir(c.toolgate), "toolgate-shim")
	for _, p := range []string{c.toolgate, c.shim, c.probe} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	c.work = filepath.Join(c.cache, "work")
	if err := os.MkdirAll(c.work, 0o755); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	for d := c.work; d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o005 != 0o005 {
			return fmt.Errorf("setup: %s (mode %s) must be readable and searchable by the sandbox uid", d, fi.Mode().Perm())
		}
	}
	c.logPath = filepath.Join(c.cache, "servers.log")
	return nil
}

// toolArgv is the argv of the measured tool: it prints "hello".
func (c *common) toolArgv() []string { return []string{c.probe, "echo", "hello"} }

// writeConf writes a tools.conf (mode 0600) into the cache and returns its
// path.
func (c *common) writeConf(name, text string) (string, error) {
	p := filepath.Join(c.cache, "conf", name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		return "", err
	}
	return p, os.Chmod(p, 0o600)
}

// serverArgv is toolgate serve with conf and the extra flags.
func (c *common) serverArgv(conf string, extra ...string) []string {
	return append([]string{c.toolgate, "serve", "--conf", conf}, extra...)
}

// poolSuffix marks a sandbox path run with the pool of prepared
// sandboxes on ("bwrap+pool", "oci/runc+pool"); without it a path runs
// with the pool off, so that each row says which it measures.
const poolSuffix = "+pool"

// backendFlags are the serve flags of a sandbox path ("bwrap", "oci/runc",
// "bwrap+pool").
func backendFlags(path string) []string {
	base, pooled := strings.CutSuffix(path, poolSuffix)
	f := []string{"--backend", "bwrap"}
	if rtName, ok := strings.CutPrefix(base, "oci/"); ok {
		f = []string{"--backend", "oci", "--oci-runtime", rtName}
	}
	if pooled {
		return append(f, "--sandbox-pool", "1")
	}
	return append(f, "--sandbox-pool", "0")
}

// pathName is how the tables name a sandbox path: "bwrap", "bwrap, pool
// on".
func pathName(path string) string {
	if base, pooled := strings.CutSuffix(path, poolSuffix); pooled {
		return base + ", pool on"
	}
	return path
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func want(list []string, name string) bool {
	return len(list) == 0 || slices.Contains(list, name)
}

func logf(w io.Writer, format string, a ...any) {
	fmt.Fprintf(w, "bench: "+format+"\n", a...)
}
