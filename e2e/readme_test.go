//go:build e2e

package e2e

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The client entries of docs/clients.md are what the agents suite gives
// the clients: each block marked `<!-- e2e: CLIENT TARGET -->` is read from
// that page at test time and only its placeholder paths are replaced, so
// that the page and the test cannot drift. The README's one entry is held
// to the page's of the same key.

// clientsDoc is the page of the client entries.
const clientsDoc = "../docs/clients.md"

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

// markedEntries returns the entries of a page by key, failing on a key
// marked twice.
func markedEntries(t *testing.T, page string) map[string]string {
	t.Helper()
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range readmeEntryRE.FindAllStringSubmatch(string(text), -1) {
		if _, dup := out[m[1]]; dup {
			t.Fatalf("%s has two entries marked <!-- e2e: %s --> (want exactly one, right before its code block)", page, m[1])
		}
		out[m[1]] = m[2]
	}
	return out
}

// readmeEntry returns the entry of docs/clients.md for key ("codex
// image", ...) with the placeholders replaced by p.
func readmeEntry(t *testing.T, key string, p readmePaths) string {
	t.Helper()
	entry, ok := markedEntries(t, clientsDoc)[key]
	if !ok {
		t.Fatalf("%s has no entry marked <!-- e2e: %s --> (want exactly one, right before its code block)", clientsDoc, key)
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
			t.Fatalf("client entry %q still holds %q after substitution: a placeholder the suite does not know:\n%s", key, ph, out)
		}
	}
	return out
}

// TestReadmeEntries: every client entry is on docs/clients.md once, the
// image entries carry the same podman argv, so that one tested entry
// vouches for the others' flags, and each entry the README shows is the
// page's entry of its key, byte for byte.
func TestReadmeEntries(t *testing.T) {
	page := markedEntries(t, clientsDoc)
	readme := markedEntries(t, "../README.md")
	if len(readme) == 0 {
		t.Error("README.md shows no client entry marked <!-- e2e: CLIENT TARGET -->")
	}
	for key, e := range readme {
		if page[key] != e {
			t.Errorf("README.md's entry %q differs from %s's:\n%s\nwant\n%s", key, clientsDoc, e, page[key])
		}
	}
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
