package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/status"
)

// check prints what serve would serve, or the refused lines and why. It
// exits 1 when tools.conf is refused.
func check(args []string, stdout, stderr io.Writer) int {
	var s settings
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	s.register(fs)
	if !parse(fs, args, stderr) {
		return 2
	}
	s.logLevel = "panic" // check reports on stdout; nothing to log
	a, err := s.build(io.Discard, false)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate check: %v\n", err)
		return 2
	}
	srv := server.New(a.opts)
	writeCheck(stdout, a.conf, srv)
	if a.conf.State == conf.StateRefused {
		return 1
	}
	return 0
}

// writeCheck renders the check report: the conf state, then every tool in
// tools/list order.
func writeCheck(w io.Writer, c *conf.Config, srv *server.Server) {
	cs := status.FromConf(c)
	fmt.Fprintf(w, "tools.conf %s: %s\n", cs.Path, cs.State)
	fmt.Fprint(w, cs.Problems())
	for _, warn := range c.Warnings() {
		fmt.Fprintf(w, "  WARNING: line %d: %s\n", warn.Line, warn.Text)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tCLASS\tSANDBOX\tBACKEND\tTIMEOUT\tMAX-BYTES\tDIR\tARGV")
	for _, st := range srv.Served() {
		if st.Kind != status.KindExternal {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t%s\t-\t-\t-\t-\n", st.Name, st.Kind, st.Backend)
			continue
		}
		t, _ := c.Tool(st.Name)
		sandbox := "off"
		if t.Sandbox {
			sandbox = "on"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%ds\t%d\t%s\t%s\n", t.Name, st.Kind, t.Class, sandbox, st.Backend,
			int(t.Timeout/time.Second), t.MaxBytes, t.Dir, quoteArgv(t.Argv()))
	}
	tw.Flush()
	var egress []string
	for _, st := range srv.Served() {
		if len(st.Egress) > 0 {
			egress = append(egress, fmt.Sprintf("  %s: %s", st.Name, strings.Join(st.Egress, " ")))
		}
	}
	if len(egress) > 0 {
		fmt.Fprintf(w, "\negress (through toolgate's proxy; nothing else is reachable):\n%s\n", strings.Join(egress, "\n"))
	}
	var creds, env []string
	for _, st := range srv.Served() {
		t, ok := c.Tool(st.Name)
		if !ok || st.Kind != status.KindExternal {
			continue
		}
		for _, cr := range t.Credentials {
			creds = append(creds, fmt.Sprintf("  %s: %s %s (from %s)", t.Name, cr.Dest, cr.Header, cr.File))
		}
		if len(t.Env) > 0 {
			env = append(env, fmt.Sprintf("  %s: %s", t.Name, strings.Join(t.Env, " ")))
		}
	}
	if len(creds) > 0 {
		fmt.Fprintf(w, "\ncredentials (set by toolgate's proxy on the tool's requests; the sandbox never holds them):\n%s\n", strings.Join(creds, "\n"))
	}
	if len(env) > 0 {
		fmt.Fprintf(w, "\nenv (added to the sandboxed tool's four variables):\n%s\n", strings.Join(env, "\n"))
	}
}

// quoteArgv renders argv unambiguously: words with spaces or quotes are
// quoted Go-style.
func quoteArgv(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\"'\\") {
			a = fmt.Sprintf("%q", a)
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
