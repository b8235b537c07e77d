package main

// The registry subcommands that start the servers: `registry pin` and
// `registry validate --live`. Both start (sandboxed, with serve's sandbox
// settings) or connect to each server exactly as serve does, list it, and
// stop it; neither serves anything.

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/gateway"
)

// listLive builds serve's backends from s and lists the servers ids names
// (every server when none). It returns nil, and has said why on stderr,
// when it could not start.
func listLive(s *settings, dir string, r *registry.Registry, ids []string, requirePins bool, cmd string, stderr io.Writer) []gateway.LiveServer {
	if r.State != conf.StateLoaded {
		return nil
	}
	if err := s.sandbox.check(); err != nil {
		fmt.Fprintf(stderr, "toolgate registry %s: %v\n", cmd, err)
		return nil
	}
	a, err := s.build(stderr, true)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate registry %s: %v\n", cmd, err)
		return nil
	}
	defer a.close()
	down := downstreamFlags{dir: dir, maxBytes: gateway.DefaultMaxBytes}
	dopts := down.options(a, s.backend)
	dopts.Registry = r // the registry this command judged and prints
	dopts.RequirePins = requirePins
	ctx, cancel := signalContext(syscall.SIGHUP)
	defer cancel()
	live, err := gateway.ListLive(ctx, gateway.LiveOptions{
		Downstream: dopts, Sandbox: a.opts.Sandbox.Name(), Version: version,
		Log: a.log, Audit: a.opts.Audit,
	}, ids)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate registry %s: %v\n", cmd, err)
		return nil
	}
	return live
}

// registryValidateLive is `registry validate --live [ID]`: the readiness
// of validate, then each server listed and each enabled tool compared
// with its pin. It exits 1 when the registry is refused, a server cannot
// be listed, or serve would withhold a tool it lists.
func registryValidateLive(s *settings, dir string, r *registry.Registry, id string, requirePins bool, stdout, stderr io.Writer) int {
	writeRegistryState(stdout, r)
	if r.State == conf.StateRefused {
		return 1
	}
	var ids []string
	if id != "" {
		if _, ok := r.Server(id); !ok {
			fmt.Fprintf(stderr, "toolgate registry validate: no server %q in %s\n", id, r.Dir)
			return 1
		}
		ids = []string{id}
	}
	if len(r.Servers) == 0 {
		return 0
	}
	live := listLive(s, dir, r, ids, requirePins, "validate", stderr)
	if live == nil {
		return 1
	}
	failed := 0
	for _, ls := range live {
		fmt.Fprintf(stdout, "\n%s (%s, %s): ", ls.Server.ID, ls.Server.Transport, ls.Backend)
		if ls.Err != nil {
			fmt.Fprintf(stdout, "not listed: %v\n", ls.Err)
			failed++
			continue
		}
		fmt.Fprintf(stdout, "listed, %s offered\n", plural(ls.Offered, "tool"))
		tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
		var diffs []string
		bad := false
		for _, lt := range ls.Tools {
			mark, what := "ok", ""
			switch {
			case !lt.Offered:
				mark, what = "-", lt.Reason+": not served"
			case lt.Refused != "":
				mark, what = "FAIL", lt.Refused
			case !lt.Serve:
				mark, what = "FAIL", lt.Reason
			case lt.Pin.State == registry.PinMatch:
				what = "sha256 " + lt.SHA256 + ": matches its pin"
			default:
				mark, what = "-", "sha256 "+lt.SHA256+": no pin: served with a warning"
				if r.Pins == nil {
					mark, what = "ok", "sha256 "+lt.SHA256+": no pins file"
				}
			}
			if mark == "FAIL" {
				bad = true
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark, lt.Name, what)
			if lt.Pin.Diff != "" {
				diffs = append(diffs, lt.Pin.Diff)
			}
		}
		tw.Flush()
		for _, d := range diffs {
			fmt.Fprintf(stdout, "\n%s", indent(d, "    "))
		}
		if bad {
			failed++
		}
	}
	fmt.Fprintf(stdout, "\n%s served as listed, %d not (a tool withheld, or not listed)\n", plural(len(live)-failed, "server"), failed)
	if failed > 0 {
		return 1
	}
	return 0
}

// pinned is what registry pin did with one enabled tool.
type pinned struct {
	tool, action, detail, diff string
	failed                     bool
}

// pinServer merges the listing of one server into pins (its pins replaced
// by those of its enabled tools: new ones pinned, changed ones re-pinned,
// a tool that could not be pinned keeping its pin), and says what it did.
func pinServer(pins *registry.Pins, ls gateway.LiveServer) []pinned {
	id := ls.Server.ID
	old := pins.Servers[id]
	now := map[string]registry.Pin{}
	var out []pinned
	for _, lt := range ls.Tools {
		prev, had := old[lt.Name]
		keep := func(action, why string, failed bool) {
			if had {
				now[lt.Name] = prev
				why += "; its pin (sha256 " + prev.SHA256[:12] + ") is kept"
			}
			out = append(out, pinned{tool: lt.Name, action: action, detail: why, failed: failed})
		}
		switch {
		case !lt.Offered:
			keep("absent", lt.Reason+": not pinned", false)
		case lt.Refused != "":
			keep("REFUSED", "not pinned: "+lt.Refused, true)
		default:
			now[lt.Name] = registry.Pin{SHA256: lt.SHA256, Definition: lt.Definition}
			p := pinned{tool: lt.Name, action: "pinned", detail: "sha256 " + lt.SHA256}
			switch {
			case had && prev.SHA256 == lt.SHA256:
				p.action = "unchanged"
			case had:
				p.action = "re-pinned"
				p.detail += " (was " + prev.SHA256 + ")"
				p.diff = registry.DefinitionDiff("pinned "+lt.Name+" (sha256 "+prev.SHA256[:12]+")", prev.Definition,
					"listed "+lt.Name+" (sha256 "+lt.SHA256[:12]+")", lt.Definition)
			}
			out = append(out, p)
		}
	}
	pins.Servers[id] = now
	return out
}

// registryPin is `registry pin [SERVER...]`.
func registryPin(s *settings, dir string, r *registry.Registry, ids []string, stdout, stderr io.Writer) int {
	writeRegistryState(stdout, r)
	if r.State != conf.StateLoaded {
		if r.State == conf.StateAbsent {
			fmt.Fprintf(stderr, "toolgate registry pin: no registry at %s\n", r.Dir)
		}
		return 1
	}
	for _, id := range ids {
		if _, ok := r.Server(id); !ok {
			fmt.Fprintf(stderr, "toolgate registry pin: no server %q in %s\n", id, r.Dir)
			return 1
		}
	}
	if len(r.Servers) == 0 {
		fmt.Fprintln(stderr, "toolgate registry pin: the registry has no servers")
		return 1
	}
	live := listLive(s, dir, r, ids, false, "pin", stderr)
	if live == nil {
		return 1
	}
	pins := &registry.Pins{Path: filepath.Join(r.Dir, registry.PinsFile), Servers: map[string]map[string]registry.Pin{}}
	if r.Pins != nil {
		for id, tools := range r.Pins.Servers {
			// A full pin drops the pins of servers no longer in the registry.
			if _, ok := r.Server(id); ok || len(ids) > 0 {
				pins.Servers[id] = tools
			}
		}
	}
	failed := false
	for _, ls := range live {
		fmt.Fprintf(stdout, "\n%s (%s, %s): ", ls.Server.ID, ls.Server.Transport, ls.Backend)
		if ls.Err != nil {
			fmt.Fprintf(stdout, "not listed: %v; its pins are kept\n", ls.Err)
			failed = true
			continue
		}
		fmt.Fprintf(stdout, "listed, %s offered\n", plural(ls.Offered, "tool"))
		tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
		results := pinServer(pins, ls)
		for _, p := range results {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", p.action, p.tool, p.detail)
			failed = failed || p.failed
		}
		tw.Flush()
		for _, p := range results {
			if p.diff != "" {
				fmt.Fprintf(stdout, "\n%s", indent(p.diff, "    "))
			}
		}
	}
	out, err := registry.RenderPins(pins)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate registry pin: %v\n", err)
		return 1
	}
	tools, servers := pins.Count()
	if old, err := os.ReadFile(pins.Path); err == nil && bytes.Equal(old, out) {
		fmt.Fprintf(stdout, "\n%s unchanged: %s of %s pinned\n", pins.Path, plural(tools, "tool"), plural(servers, "server"))
	} else if err := writePins(pins.Path, out); err != nil {
		fmt.Fprintf(stderr, "toolgate registry pin: %v\n", err)
		return 1
	} else {
		fmt.Fprintf(stdout, "\nwrote %s: %s of %s pinned\n", pins.Path, plural(tools, "tool"), plural(servers, "server"))
	}
	if failed {
		fmt.Fprintln(stderr, "toolgate registry pin: some tools were not pinned (above)")
		return 1
	}
	return 0
}

// writePins replaces the pins file at path with data at once (a new file
// in the same directory, synced, renamed over it), mode 0644, owned by
// toolgate's user: trusted as the fragments are.
func writePins(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".pins-*.json")
	if err != nil {
		return fmt.Errorf("write the pins: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // gone once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write the pins: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// indent prefixes each line of text.
func indent(text, prefix string) string {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(slices.Clip(lines), "\n") + "\n"
}
