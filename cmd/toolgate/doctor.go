package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/conf"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/direct"
)

// doctor reports what works on this host and the exact fix for what does
// not. It exits 1 when the chosen sandbox backend cannot run.
func doctor(args []string, stdout, stderr io.Writer) int {
	var s settings
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	s.register(fs)
	if !parse(fs, args, stderr) {
		return 2
	}
	d := &doctorReport{w: stdout}
	fmt.Fprintf(stdout, "toolgate %s\n", version)

	self, _ := os.Executable()
	shim, err := rt.FindShim()
	d.item("binary", err == nil, self, err)
	if err == nil {
		d.item("shim", true, shim, nil)
	}
	switch ids := s.sandbox.ids(); {
	case ids.Count == 0:
		d.line("user: uid %d (not root); sandboxes run as this uid, mapped to %d inside: they are only as apart from each other as this account is from them", os.Geteuid(), rt.SandboxUID)
	case ids.Shared:
		d.line("user: root; every sandbox runs as uid %d gid %d (--sandbox-uid): they share it%s", ids.UID, ids.GID, accountNote(int(ids.UID)))
	default:
		d.line("user: root; each sandbox runs as ids of its own: %s (--sandbox-id-range)", ids)
	}

	cg := cgroup.Setup()
	defer cg.Close()
	d.line("cgroups: %s", cg)
	for _, n := range cg.Notes {
		d.line("  note: %s", n)
	}
	dr := &direct.Runner{Cgroups: cg, Shim: shim}
	d.line("direct backend (read class): tracks each call by %s", map[string]string{
		"cgroup2": "a cgroup2 group, killed as one",
		"reap":    "the reap shim (a child subreaper); no writable cgroup2 hierarchy",
	}[dr.Tracking()])

	ok := true
	var chosenBackend startedSandbox // runs the built-ins' helpers
	defer func() { chosenBackend.release() }()
	for _, b := range rt.KnownBackends() {
		chosen := string(b) == s.backend
		mark := ""
		if chosen {
			mark = " (chosen: --backend " + s.backend + ")"
		}
		r, err := s.newSandboxBackend(b, shim, cg, nil)
		if err != nil {
			d.item("sandbox "+string(b)+mark, false, "", err)
			ok = ok && !chosen
			continue
		}
		d.item("sandbox "+string(b)+mark, true, r.about(), nil)
		if chosen {
			chosenBackend = r
		} else {
			r.release()
		}
	}

	c := conf.Load(s.confPath, s.confOptions())
	writePool(d, &s.sandbox, c, chosenBackend.runner)
	switch c.State {
	case conf.StateRefused:
		d.line("tools.conf %s: refused (%d errors): run `toolgate check` for the lines", c.Path, len(c.Errors))
	case conf.StateAbsent:
		d.line("tools.conf %s: absent (%s): built-ins only", c.Path, c.Reason)
	default:
		d.line("tools.conf %s: loaded, %d tools", c.Path, len(c.Tools))
	}
	d.line("helpers of the workspace built-ins (root %s; they run only sandboxed, under --backend %s):", s.root, s.backend)
	helpersOK := writeHelpers(stdout, &s.builtins, s.root, chosenBackend.runner)
	if !ok {
		fmt.Fprintln(stdout, "\nthe chosen sandbox backend cannot run here: test-class tools would answer isError (never run unsandboxed)")
		return 1
	}
	fmt.Fprintln(stdout, "\nrun `toolgate selftest` to prove each sandbox guarantee on this host")
	if !helpersOK {
		fmt.Fprintln(stdout, "\na helper given by flag does not work: serve would refuse to start")
		return 1
	}
	return 0
}

// writePool is doctor's pool section: the settings, how many sandboxes the
// conf would keep prepared, and what one prepared sandbox of the chosen
// backend holds here, measured.
func writePool(d *doctorReport, f *sandboxFlags, c *conf.Config, r rt.Runner) {
	p := f.pool
	if p.Depth == 0 {
		d.line("sandbox pool: off (--sandbox-pool 0): every sandboxed call prepares its sandbox on its path")
		return
	}
	// An egress tool's sandbox is prepared only where it takes its proxy
	// at release (bwrap); elsewhere it is made on the call's path.
	_, attaches := r.(rt.EgressAttacher)
	tools := 0
	for _, t := range c.Tools {
		if t.Class == conf.ClassTest && (len(t.Egress) == 0 || attaches) {
			tools++
		}
	}
	held := tools * p.Depth
	if p.Max > 0 {
		held = min(held, p.Max)
	}
	d.line("sandbox pool: %d prepared per test-class tool and one per sandboxed stdio downstream server, at most %d held, replaced after %s; the conf's %d test-class tools would hold %d",
		p.Depth, p.Max, p.MaxAge, tools, held)
	prep, ok := r.(rt.Preparer)
	if !ok {
		d.line("  the chosen backend is not available: nothing to measure")
		return
	}
	cost, err := measurePrepared(prep)
	if err != nil {
		d.item("pool: one prepared sandbox", false, "", err)
		return
	}
	d.line("  one prepared sandbox here holds %d processes, %.1f MiB RSS (%.1f MiB PSS), %d cgroups", cost.Processes,
		float64(cost.RSSKiB)/1024, float64(cost.PSSKiB)/1024, cost.Cgroups)
}

// measurePrepared prepares one sandbox for /usr/bin/true, measures it once
// it is ready and discards it.
func measurePrepared(p rt.Preparer) (rt.Cost, error) {
	exe := "/usr/bin/true"
	if _, err := os.Stat(exe); err != nil {
		exe = "/bin/true"
	}
	dir, err := rt.SelfTestDir()
	if err != nil {
		return rt.Cost{}, err
	}
	defer os.Remove(dir)
	sb, err := p.Prepare(rt.Template{Name: "doctor", Path: exe, Argv: []string{exe}, Dir: dir})
	if err != nil {
		return rt.Cost{}, err
	}
	defer func() {
		sb.Discard()
		sb.Cleanup()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.WaitReady(ctx); err != nil {
		return rt.Cost{}, err
	}
	return sb.Cost(), nil
}

type doctorReport struct{ w io.Writer }

func (d *doctorReport) line(format string, a ...any) { fmt.Fprintf(d.w, format+"\n", a...) }

func (d *doctorReport) item(what string, ok bool, detail string, err error) {
	if ok {
		d.line("[ok]   %s: %s", what, detail)
		return
	}
	d.line("[FAIL] %s: %s", what, strings.ReplaceAll(err.Error(), "; ", ";\n         "))
}

// accountNote says which account of /etc/passwd has uid, if any: the
// processes of that account on the host can signal the sandboxes'
// processes and connect to a call's egress socket (owned by the sandbox
// uid; its path is in the sandbox's mountinfo), so a uid no account uses
// is better.
func accountNote(uid int) string {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return ""
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		f := strings.Split(l, ":")
		if len(f) > 2 && f[2] == strconv.Itoa(uid) {
			return fmt.Sprintf(" (warning: the account %q has it: its processes on this host can enter, signal and read the sandboxes and connect to their egress proxies; --sandbox-id-range gives each sandbox ids no account uses)", f[0])
		}
	}
	return " (no account in /etc/passwd has it)"
}
