package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/toolgate/toolgate/internal/golden"
)

// flagsDoc is the page of every subcommand's flags, from this package.
const flagsDoc = "../../docs/flags.md"

// flagDocCommands are the subcommands whose flags docs/flags.md lists, in
// its order, each with the line it is introduced by.
var flagDocCommands = []struct {
	args []string
	what string
}{
	{[]string{"serve"}, "serve MCP over stdio (the default command), or over streamable HTTP with `--listen`"},
	{[]string{"check"}, "print what serve would serve, or the refused lines and why; exit 1 when refused (`toolgate --list-tools` is the same)"},
	{[]string{"doctor"}, "what backends and helpers work here, and the fix for what does not"},
	{[]string{"selftest"}, "run the sandbox escape battery against the chosen backend (every backend with `--all`)"},
	{[]string{"spec"}, "print the OCI runtime spec a call of TOOL would use: `toolgate spec [flags] TOOL`"},
	{[]string{"registry", "list"}, "list the tool-MCP registry's servers without launching any"},
	{[]string{"registry", "show"}, "show one server's entry: `toolgate registry show [flags] ID`"},
	{[]string{"registry", "validate"}, "check the registry and its pins; with `--live`, list every server and compare with the pins"},
	{[]string{"registry", "pin"}, "list each downstream server and pin each enabled tool's definition: `toolgate registry pin [flags] [SERVER...]`"},
	{[]string{"policy", "check"}, "explain what a `--policy` file decides for one principal and tool, without serving ([policy.md](policy.md)); exit 1 when an action asked is denied"},
}

// machineDefaults are the defaults computed from the machine, written in
// docs/flags.md as what they are computed from.
var machineDefaults = map[string]struct {
	value int
	doc   string
}{
	"max-concurrent":               {goruntime.NumCPU() * 4, "CPUs × 4"},
	"max-concurrent-per-principal": {goruntime.NumCPU() * 2, "CPUs × 2"},
}

// flagEntry is one flag as `toolgate CMD -h` prints it.
type flagEntry struct {
	name, arg, def, usage string
}

var defaultRE = regexp.MustCompile(`(?s)^(.*) \(default ("(?:[^"\\]|\\.)*"|[^()]*)\)$`)

// helpFlags runs `toolgate ARGS -h` and parses the flag list it prints
// (flag.PrintDefaults: "  -name arg" lines, each followed by its usage on
// lines indented "    \t", the default last).
func helpFlags(t *testing.T, args []string) []flagEntry {
	t.Helper()
	var stdout, stderr bytes.Buffer
	run(append(append([]string(nil), args...), "-h"), strings.NewReader(""), &stdout, &stderr)
	var out []flagEntry
	for l := range strings.SplitSeq(stderr.String(), "\n") {
		switch {
		case strings.HasPrefix(l, "  -"):
			head, usage, _ := strings.Cut(strings.TrimPrefix(l, "  -"), "\t")
			name, arg, _ := strings.Cut(head, " ")
			out = append(out, flagEntry{name: name, arg: arg, usage: usage})
		case strings.HasPrefix(l, "    \t") && len(out) > 0:
			e := &out[len(out)-1]
			e.usage = strings.TrimSpace(e.usage + "\n" + strings.TrimPrefix(l, "    \t"))
		}
	}
	if len(out) == 0 {
		t.Fatalf("toolgate %s -h printed no flags:\n%s", strings.Join(args, " "), stderr.String())
	}
	for i := range out {
		e := &out[i]
		if m := defaultRE.FindStringSubmatch(e.usage); m != nil {
			e.usage, e.def = m[1], m[2]
			if s, err := strconv.Unquote(e.def); err == nil {
				e.def = s
			}
		}
		if md, ok := machineDefaults[e.name]; ok {
			if e.def != strconv.Itoa(md.value) {
				t.Errorf("--%s: default %q, want %d (%s): update machineDefaults", e.name, e.def, md.value, md.doc)
			}
			e.def = md.doc
		}
	}
	return out
}

// renderFlagsDoc renders docs/flags.md from the flag sets.
func renderFlagsDoc(t *testing.T) string {
	var w strings.Builder
	w.WriteString(`# toolgate's flags

Generated from the flag sets of ` + "`cmd/toolgate`" + ` (what ` + "`toolgate CMD -h`" + ` prints) by
` + "`go test ./cmd/toolgate -run TestFlagsDoc -update`" + `: do not edit it by hand. The test
fails when a flag changes and this page was not regenerated
([development.md](development.md#the-generated-pages)). A flag takes one dash or two
(` + "`-root`" + ` or ` + "`--root`" + `); a duration is Go's (` + "`90s`" + `, ` + "`10m`" + `). Every setting but the
tools.conf path (` + "`$SBM_TOOLS_CONF`" + `) is a flag. What the flags do is explained
where their subject is: [tools-conf.md](tools-conf.md), [calls.md](calls.md),
[sandbox.md](sandbox.md), [http.md](http.md), [registry.md](registry.md),
[builtins.md](builtins.md), [backends-oci.md](backends-oci.md).
`)
	cell := func(s string) string {
		return strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", `\|`)
	}
	flagCell := func(e flagEntry) string {
		if e.arg == "" {
			return "`--" + e.name + "`"
		}
		return "`--" + e.name + " " + e.arg + "`"
	}
	serve := map[string]flagEntry{}
	var sharedList, sharedBy string // the last list of serve's flags written out
	for i, c := range flagDocCommands {
		entries := helpFlags(t, c.args)
		fmt.Fprintf(&w, "\n## toolgate %s\n\n%s.\n", strings.Join(c.args, " "), upperFirst(c.what))
		var same []string
		var own []flagEntry
		for _, e := range entries {
			if i == 0 {
				serve[e.name] = e
			}
			if s, ok := serve[e.name]; ok && i > 0 && s == e {
				same = append(same, "`--"+e.name+"`")
				continue
			}
			own = append(own, e)
		}
		if list := strings.Join(same, ", "); list == sharedList {
			fmt.Fprintf(&w, "\nThe flags of serve that `toolgate %s` takes, alike.\n", sharedBy)
		} else if list != "" {
			fmt.Fprintf(&w, "\nThe flags of serve it takes, alike: %s.\n", list)
			sharedList, sharedBy = list, strings.Join(c.args, " ")
		}
		if len(own) > 0 {
			if i > 0 {
				w.WriteString("\nIts own, or unlike serve's:\n")
			}
			w.WriteString("\n| flag | default | meaning |\n|---|---|---|\n")
			for _, e := range own {
				def := ""
				if e.def != "" {
					def = "`" + e.def + "`"
				}
				fmt.Fprintf(&w, "| %s | %s | %s |\n", flagCell(e), def, cell(e.usage))
			}
		}
	}
	return w.String()
}

func upperFirst(s string) string {
	for i, r := range s {
		return string(unicode.ToUpper(r)) + s[i+len(string(r)):]
	}
	return s
}

// TestFlagsDoc: docs/flags.md is what the flag sets say (`toolgate CMD -h`
// of every subcommand), so that a flag added, changed or removed without
// regenerating it fails here. -update rewrites it.
func TestFlagsDoc(t *testing.T) {
	t.Setenv("SBM_TOOLS_CONF", "") // --conf's default is the seed's path
	got := renderFlagsDoc(t)
	if golden.Update() {
		if err := os.WriteFile(flagsDoc, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(flagsDoc)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/toolgate -run TestFlagsDoc -update)", err)
	}
	if got != string(want) {
		t.Errorf("docs/flags.md is not what the flag sets say: run go test ./cmd/toolgate -run TestFlagsDoc -update\n%s", lineDiff(string(want), got))
	}
	// Every flag serve takes is on the page.
	for _, e := range helpFlags(t, []string{"serve"}) {
		if !strings.Contains(string(want), "| `--"+e.name) {
			t.Errorf("docs/flags.md lacks serve's --%s", e.name)
		}
	}
}

// lineDiff names the first line where want and got differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n--- docs/flags.md\n%s\n--- the flag sets\n%s", i+1, wl, gl)
		}
	}
	return ""
}
