package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// docs/performance.md is written by the programs that measure, never by
// hand: `bench run -doc PATH` (scripts/bench.sh) writes its section, `bench
// soak -doc PATH` (SOAK_DOC=... scripts/soak.sh) its own. The page is
// rendered whole each time, from docHeader and the sections, so that
// nothing but the latest figures is on it; a section one program does not
// write is kept as it was.

// Doc sections, in page order.
const (
	docRun  = "run"
	docSoak = "soak"
)

var docSections = []struct{ name, title, missing string }{
	{docRun, "## The latest benchmark", "Not measured yet: run `scripts/bench.sh`."},
	{docSoak, "## The latest soak", "Not run yet: run `SOAK_DOC=docs/performance.md scripts/soak.sh`."},
}

// docHeader opens the page.
const docHeader = `# Performance

This page is written by ` + "`scripts/bench.sh`" + ` (through ` + "`e2e/bench`" + `): do not edit it by
hand, run the script again. Each full run replaces its section with the
figures it printed, with the date and the machine; ` + "`BENCH_DOC=`" + ` (empty) keeps
the page as it is, and a partial run (` + "`-only`" + `) never writes it. The soak's
section is written by ` + "`SOAK_DOC=docs/performance.md scripts/soak.sh`" + `.
Why a call costs what it does is explained in
[sandbox.md](sandbox.md#what-a-call-costs-and-why).

` + "`scripts/bench.sh`" + ` measures every way a call can run, side by side, in one
run: the floors (fork+exec of the tool from Go; raw ` + "`bwrap`" + ` with the exact
argv the backend builds, init shim included, and the same call one step at a
time, from bwrap alone to the enter shim and the per-call cgroups; ` + "`runc run`" + `
of a minimal hand-written bundle and ` + "`runc start`" + ` of a container created
before the call; git_diff_input's git runs on the host), the runtime layer
without MCP (a direct run, and the release of a prepared bwrap sandbox and
runc container, through the backends' Go API in the bench's own process),
toolgate over MCP stdio with mcp-go's client (a read tool, a test tool through
bwrap, oci/runc, oci/crun, oci/runsc, and the built-ins) and over streamable
HTTP on loopback, and what an operator would use instead (` + "`srt`" + ` from
@anthropic-ai/sandbox-runtime, ` + "`mcp-server-commands`" + ` over MCP,
` + "`podman run --rm --network none`" + ` per call). Each path gets 200 calls, one at
a time and 40 ms apart as an agent's calls are, in rounds that run every path
once in a shuffled order, so that a shared machine's load and each call's
asynchronous teardown (network namespaces, cgroups) fall on all paths alike;
then the breakdowns of a pool-off bwrap call and of the pool-on bwrap and
runc calls, throughput, the idle cost of a
prepared sandbox, start-up, a capped 1 GB flood and the server's RSS, and
the targets, each held or missed. It installs what it needs
(Debian packages, the two npm peers at pinned versions under
` + "`/var/cache/toolgate/bench`" + `, a local podman image; no registry) and also writes
` + "`bench.md`" + ` and ` + "`bench.json`" + ` under its work directory. ` + "`scripts/soak.sh`" + ` runs
10,000 mixed calls (` + "`SOAK_CALLS`" + `; CI runs 1,000) and exits non-zero unless the
server comes back to where it started.

` + "```sh" + `
scripts/bench.sh                       # about 22 minutes; loads every core
BENCH_BASELINE=<rev> scripts/bench.sh  # also toolgate built from <rev>, in the same rounds
scripts/soak.sh                        # about 2 minutes
` + "```" + `

On a shared VM, ratios and differences between rows of one run say more
than absolute times.
`

func docBegin(name string) string { return "<!-- " + name + ": written by e2e/bench -->\n" }
func docEnd(name string) string   { return "<!-- end of " + name + " -->\n" }

// renderDoc renders the page from its sections' bodies (a missing one
// says so).
func renderDoc(bodies map[string]string) string {
	var w strings.Builder
	w.WriteString(docHeader)
	for _, s := range docSections {
		body, ok := bodies[s.name]
		if !ok {
			fmt.Fprintf(&w, "\n%s\n\n%s\n", s.title, s.missing)
			continue
		}
		fmt.Fprintf(&w, "\n%s\n\n%s%s%s", s.title, docBegin(s.name), strings.TrimRight(body, "\n")+"\n", docEnd(s.name))
	}
	return w.String()
}

// parseDoc returns the bodies of the sections of a page renderDoc wrote.
func parseDoc(text string) map[string]string {
	out := map[string]string{}
	for _, s := range docSections {
		_, rest, ok := strings.Cut(text, docBegin(s.name))
		if !ok {
			continue
		}
		if body, _, ok := strings.Cut(rest, docEnd(s.name)); ok {
			out[s.name] = body
		}
	}
	return out
}

// writeDoc writes the page at path with section name's body replaced and
// every other section kept from the page there (if any).
func writeDoc(path, name, body string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	bodies := parseDoc(string(old))
	bodies[name] = body
	return os.WriteFile(path, []byte(renderDoc(bodies)), 0o644)
}
