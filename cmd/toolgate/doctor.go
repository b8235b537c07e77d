package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf"
	rt "github.com/toolgate/toolgate/runtime"
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
	uid, gid := sandboxIDs()
	if uid >= 0 {
		d.line("user: root; sandboxes run as uid %d gid %d", uid, gid)
	} else {
		d.line("user: uid %d (not root); sandboxes run as this uid, mapped to 65534 inside", os.Geteuid())
	}

	cg := rt.DetectCgroups()
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

	c := conf.Load(s.confPath, conf.Options{Builtins: builtin.Names(), Check: sandboxToolCheck()})
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

type doctorReport struct{ w io.Writer }

func (d *doctorReport) line(format string, a ...any) { fmt.Fprintf(d.w, format+"\n", a...) }

func (d *doctorReport) item(what string, ok bool, detail string, err error) {
	if ok {
		d.line("[ok]   %s: %s", what, detail)
		return
	}
	d.line("[FAIL] %s: %s", what, strings.ReplaceAll(err.Error(), "; ", ";\n         "))
}
