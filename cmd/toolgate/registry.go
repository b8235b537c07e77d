package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
)

const registryUsage = `usage:
  toolgate registry list [--tool-mcp-dir DIR]
  toolgate registry show [--tool-mcp-dir DIR] [--format toml|json] ID
  toolgate registry validate [--tool-mcp-dir DIR] [--live [--require-pins]] [ID]
  toolgate registry pin [--tool-mcp-dir DIR] [SERVER...]

list, show and validate read the tool-MCP registry (every *.toml fragment
of DIR, default ` + registry.DefaultDir + `) and its pins (DIR/` + registry.PinsFile + `)
without launching or connecting to any server, and print variable names,
never their values. validate exits 1 when the registry is refused, or when
ID is given and is not ready (command missing, cwd missing, a referenced
variable unset, a pin missing where pinned = true).

validate --live also starts each server (or ID) as serve does (sandboxed,
with serve's sandbox flags) or connects to it, lists its tools, compares
each enabled tool's definition with its pin and prints the diff of a
drift; it serves nothing. It exits 1 when a server cannot be listed or
serve would withhold an enabled tool it lists.

pin starts or connects to each server (or each SERVER) the same way, lists
it, and writes the SHA-256 and a readable copy of each enabled tool's
definition to DIR/` + registry.PinsFile + `, printing what it pinned and the diff of a
pin it changes. serve then serves a pinned tool only while its server
lists that very definition. pin refuses to pin a definition serve would
refuse (text a reviewer cannot see, a schema that is not an object, over
the size cap) and exits 1 then, or when a server cannot be listed; it keeps
the pins of those tools, and writes the others.
`

// registryCmd runs `toolgate registry list|show|validate`.
func registryCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, registryUsage)
		return 2
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "list", "show", "validate", "pin":
	case "help", "-h", "--help":
		fmt.Fprint(stdout, registryUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "toolgate registry: unknown command %q\n%s", sub, registryUsage)
		return 2
	}
	fs := flag.NewFlagSet("registry "+sub, flag.ContinueOnError)
	dir := fs.String("tool-mcp-dir", registry.DefaultDir, "directory of the registry's *.toml fragments")
	// validate --live and pin start the servers as serve does: with serve's
	// sandbox settings (and its --conf).
	var s settings
	confPath := &s.confPath
	var live, requirePins bool
	switch sub {
	case "validate", "pin":
		s.register(fs)
		if sub == "validate" {
			fs.BoolVar(&live, "live", false, "start (sandboxed, as serve does) or connect to each server, list its tools and compare them with their pins; serves nothing")
			fs.BoolVar(&requirePins, "require-pins", false, "with --live: judge as serve --require-pins does (a tool without a pin is not served)")
		}
	default:
		confPath = fs.String("conf", conf.PathFromEnv(os.Getenv), "tools.conf, whose tool names a served name may not take (as serve refuses)")
	}
	format := "toml"
	if sub == "show" {
		fs.StringVar(&format, "format", "toml", "output format: toml or json")
	}
	pos, code := parseInterspersed(fs, args, stdout, stderr)
	if code >= 0 {
		return code
	}
	want := map[string][2]int{"list": {0, 0}, "show": {1, 1}, "validate": {0, 1}, "pin": {0, 1 << 20}}[sub]
	if len(pos) < want[0] || len(pos) > want[1] {
		fmt.Fprintf(stderr, "toolgate registry %s: want %s\n", sub, map[string]string{"list": "no argument", "show": "one server ID", "validate": "at most one server ID"}[sub])
		return 2
	}
	if format != "toml" && format != "json" {
		fmt.Fprintf(stderr, "toolgate registry show: --format %q: want toml or json\n", format)
		return 2
	}
	if requirePins && !live {
		fmt.Fprintln(stderr, "toolgate registry validate: --require-pins goes with --live")
		return 2
	}
	// The registry is judged as serve judges it: with the names the
	// built-ins and tools.conf take. tools.conf's own refusal is check's
	// to report; a refused conf takes no name.
	c := conf.Load(*confPath, conf.Options{Builtins: builtin.Names()})
	r := registry.Load(*dir, registry.Options{Taken: registry.TakenNames(builtin.Names(), c), Visible: sandboxVisible, Conf: c})
	switch sub {
	case "list":
		return registryList(r, stdout)
	case "show":
		return registryShow(r, pos[0], format, stdout, stderr)
	case "pin":
		return registryPin(&s, *dir, r, pos, stdout, stderr)
	}
	id := ""
	if len(pos) == 1 {
		id = pos[0]
	}
	if live {
		return registryValidateLive(&s, *dir, r, id, requirePins, stdout, stderr)
	}
	return registryValidate(r, id, os.LookupEnv, stdout, stderr)
}

// parseInterspersed parses flags before, between and after the positional
// arguments. code is -1 to go on, else the exit code.
func parseInterspersed(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (pos []string, code int) {
	fs.SetOutput(stderr)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, registryUsage)
				return nil, 0
			}
			return nil, 2
		}
		if fs.NArg() == 0 {
			return pos, -1
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// writeRegistryState prints the registry's state line and, when refused,
// every refusal.
func writeRegistryState(w io.Writer, r *registry.Registry) {
	switch r.State {
	case conf.StateAbsent:
		fmt.Fprintf(w, "registry %s: absent (%s): no downstream servers\n", r.Dir, r.Reason)
	case conf.StateLoaded:
		fmt.Fprintf(w, "registry %s: loaded, %s from %s\n", r.Dir, plural(len(r.Servers), "server"), plural(len(r.Fragments), "fragment"))
		if r.Pins != nil {
			tools, servers := r.Pins.Count()
			fmt.Fprintf(w, "pins %s: %s of %s\n", r.Pins.Path, plural(tools, "tool"), plural(servers, "server"))
		}
	case conf.StateRefused:
		fmt.Fprintf(w, "registry %s: refused, %s\n", r.Dir, plural(len(r.Errors), "error"))
		for _, err := range r.Errors {
			fmt.Fprintf(w, "  %v\n", err)
		}
		fmt.Fprintln(w, "  refused: every downstream server is disabled; built-in and tools.conf tools are unaffected")
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// registryList prints the state and one row per server. It exits 1 when
// the registry is refused.
func registryList(r *registry.Registry, w io.Writer) int {
	writeRegistryState(w, r)
	if r.State == conf.StateRefused {
		return 1
	}
	if len(r.Servers) == 0 {
		return 0
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTRANSPORT\tTARGET\tSANDBOX\tAPPROVAL\tTIMEOUTS\tTOOLS\tDEFINED IN")
	for _, s := range r.Servers {
		target, sandbox := s.URL, s.SandboxState()
		if s.Transport == registry.TransportStdio {
			target = quoteArgv(append([]string{s.Command}, s.Args...))
		}
		tools := make([]string, len(s.EnabledTools))
		for i, t := range s.EnabledTools {
			tools[i] = t
			if m, ok := s.ToolApproval[t]; ok {
				tools[i] += "(" + string(m) + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s/%s\t%s\t%s\n", s.ID, s.Transport, target, sandbox, s.DefaultApproval,
			secs(s.StartupTimeout), secs(s.ToolTimeout), strings.Join(tools, ", "), definedIn(r, s))
	}
	tw.Flush()
	return 0
}

func secs(d time.Duration) string { return fmt.Sprintf("%ds", int(d/time.Second)) }

// definedIn names where an entry was defined, relative to the registry
// directory.
func definedIn(r *registry.Registry, s registry.ToolServer) string {
	name := s.Fragment
	if rel, err := filepath.Rel(r.Dir, s.Fragment); err == nil {
		name = rel
	}
	if s.Line > 0 {
		name += fmt.Sprintf(":%d", s.Line)
	}
	return name
}

// registryShow prints one server's normalised definition.
func registryShow(r *registry.Registry, id, format string, stdout, stderr io.Writer) int {
	if r.State != conf.StateLoaded {
		writeRegistryState(stdout, r)
		if r.State == conf.StateRefused {
			return 1
		}
	}
	s, ok := r.Server(id)
	if !ok {
		fmt.Fprintf(stderr, "toolgate registry show: no server %q in %s\n", id, r.Dir)
		return 1
	}
	render := registry.RenderServerTOML
	if format == "json" {
		render = registry.RenderServerJSON
	}
	out, err := render(s, r.Pins)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate registry show: %v\n", err)
		return 1
	}
	stdout.Write(out)
	return 0
}

// registryValidate prints the state and the readiness of every server (or
// of id alone). It exits 1 when the registry is refused, or when id is
// given and is unknown or not ready.
func registryValidate(r *registry.Registry, id string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	writeRegistryState(stdout, r)
	if r.State == conf.StateRefused {
		return 1
	}
	servers := r.Servers
	if id != "" {
		s, ok := r.Server(id)
		if !ok {
			fmt.Fprintf(stderr, "toolgate registry validate: no server %q in %s\n", id, r.Dir)
			return 1
		}
		servers = []registry.ToolServer{s}
	}
	notReady := 0
	for _, s := range servers {
		rd := s.Readiness(lookupEnv)
		pins := pinLines(r.Pins, s, false)
		for _, p := range pins {
			rd.Ready = rd.Ready && p.mark != "FAIL"
		}
		state := "ready"
		if !rd.Ready {
			state = "not ready"
			notReady++
		}
		fmt.Fprintf(stdout, "\n%s (%s): %s\n", s.ID, s.Transport, state)
		tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
		if s.Transport == registry.TransportStreamableHTTP {
			fmt.Fprintf(tw, "  -\turl\t%s\tnot contacted: validate never connects\n", s.URL)
		}
		for _, c := range rd.Checks {
			mark := "ok"
			if !c.OK {
				mark = "FAIL"
			}
			subject := c.Subject
			if c.Use != "" {
				subject += " (" + c.Use + ")"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", mark, c.Kind, subject, c.Detail)
		}
		for _, p := range pins {
			fmt.Fprintf(tw, "  %s\tpin\t%s\t%s\n", p.mark, p.tool, p.detail)
		}
		tw.Flush()
	}
	if len(servers) > 0 {
		fmt.Fprintf(stdout, "\n%s ready, %d not ready\n", plural(len(servers)-notReady, "server"), notReady)
	}
	if id != "" && notReady > 0 {
		return 1
	}
	return 0
}

// pinLine is one line of validate about an enabled tool's pin.
type pinLine struct{ mark, tool, detail string }

// pinLines are validate's lines about the pins of s's enabled tools:
// none without a pins file unless the entry (or requireAll:
// --require-pins) wants every tool pinned.
func pinLines(pins *registry.Pins, s registry.ToolServer, requireAll bool) []pinLine {
	if pins == nil && !s.RequiresPin(requireAll) {
		return nil
	}
	var out []pinLine
	for _, t := range s.EnabledTools {
		switch pin, ok := pins.Lookup(s.ID, t); {
		case ok:
			out = append(out, pinLine{"ok", t, "sha256 " + pin.SHA256})
		case s.RequiresPin(requireAll):
			out = append(out, pinLine{"FAIL", t, "no pin (" + s.UnpinnedPolicy(requireAll) + ")"})
		default:
			out = append(out, pinLine{"-", t, "no pin: served with a warning"})
		}
	}
	return out
}
