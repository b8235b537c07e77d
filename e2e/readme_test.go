//go:build e2e

package e2e

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The README's "Wire it into MCP clients" entries are what the agents suite
// gives the clients: each block marked `<!-- e2e: CLIENT TARGET -->` is read
// from the README at test time and only its placeholder paths are replaced,
// so that the README and the test cannot drift.

// readmePaths are a test's values for the placeholders.
type readmePaths struct {
	Workspace      string // the workspace (/home/me/project)
	ConfDir        string // the host's /etc/saphira/mcp: tools.conf and tool-mcp.d
	Seccomp        string // images/seccomp.json of the checkout
	ContainersConf string // CONTAINERS_CONF
	Toolgate       string // the toolgate binary
	Image          string // the image
}

var readmeEntryRE = regexp.MustCompile("(?s)<!-- e2e: ([a-z]+ [a-z]+) -->\n```(?:toml|json)\n(.*?)```\n")

// readmeEntry returns the README's entry for key ("codex image", ...) with
// the placeholders replaced by p.
func readmeEntry(t *testing.T, key string, p readmePaths) string {
	t.Helper()
	text, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var entry string
	n := 0
	for _, m := range readmeEntryRE.FindAllStringSubmatch(string(text), -1) {
		if m[1] == key {
			entry = m[2]
			n++
		}
	}
	if n != 1 {
		t.Fatalf("README.md has %d entries marked <!-- e2e: %s --> (want exactly one, right before its code block)", n, key)
	}
	r := strings.NewReplacer(
		`"/home/me/project`, `"`+p.Workspace,
		`"/etc/saphira/mcp/`, `"`+p.ConfDir+"/",
		`"/etc/saphira/mcp:`, `"`+p.ConfDir+":",
		`seccomp=/etc/toolgate/seccomp.json"`, `seccomp=`+p.Seccomp+`"`,
		`"/root/.cache/toolgate/containers.conf"`, `"`+p.ContainersConf+`"`,
		`"/usr/local/bin/toolgate"`, `"`+p.Toolgate+`"`,
		`"localhost/toolgate:dev"`, `"`+p.Image+`"`,
	)
	out := r.Replace(entry)
	for _, ph := range []string{"/home/me/project", "/etc/toolgate/", "/root/.cache/", "/usr/local/bin/toolgate", "localhost/toolgate:dev"} {
		substituted := slices.ContainsFunc([]string{p.Workspace, p.ConfDir, p.Seccomp, p.ContainersConf, p.Toolgate, p.Image},
			func(v string) bool { return strings.Contains(v, ph) })
		if strings.Contains(out, ph) && !substituted {
			t.Fatalf("README entry %q still holds %q after substitution: a placeholder the suite does not know:\n%s", key, ph, out)
		}
	}
	return out
}

// TestReadmeEntries: every client entry is there once, and the image entries
// carry the same podman argv, so that one tested entry vouches for the
// others' flags.
func TestReadmeEntries(t *testing.T) {
	p := readmePaths{Workspace: "/W", ConfDir: "/C", Seccomp: "/S.json", ContainersConf: "/CC", Toolgate: "/T", Image: "I"}
	argv := regexp.MustCompile(`"run", "-i", [^\]]*"I"`)
	var first string
	for _, key := range []string{"codex image", "claude image", "opencode image"} {
		a := argv.FindString(readmeEntry(t, key, p))
		if a == "" {
			t.Fatalf("%s: no podman argv", key)
		}
		if first == "" {
			first = a
		} else if a != first {
			t.Errorf("%s podman argv differs:\n%s\nwant\n%s", key, a, first)
		}
	}
	for _, key := range []string{"codex binary", "claude binary", "opencode binary"} {
		if e := readmeEntry(t, key, p); !strings.Contains(e, `"/T"`) {
			t.Errorf("%s: does not run the toolgate binary:\n%s", key, e)
		}
	}
}
