package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/golden"
)

const performanceDoc = "../../docs/performance.md"

// TestWriteDoc: each program writes its own section and keeps the other's;
// a page written twice with the same figures is the same page.
func TestWriteDoc(t *testing.T) {
	p := filepath.Join(t.TempDir(), "performance.md")
	if err := writeDoc(p, docRun, "### Benchmark (A)\n\n| a |\n"); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(p)
	if !strings.HasPrefix(string(first), docHeader) {
		t.Errorf("page does not open with docHeader:\n%s", first)
	}
	if got := parseDoc(string(first)); got[docRun] != "### Benchmark (A)\n\n| a |\n" || len(got) != 1 {
		t.Errorf("after the run: sections %q, want the run's only", got)
	}
	if !strings.Contains(string(first), docSections[1].missing) {
		t.Errorf("a soak never run is not said so:\n%s", first)
	}
	if err := writeDoc(p, docSoak, "### Soak (B)\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeDoc(p, docRun, "### Benchmark (C)\n"); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(p)
	got := parseDoc(string(page))
	if got[docRun] != "### Benchmark (C)\n" || got[docSoak] != "### Soak (B)\n" {
		t.Errorf("sections %q: want the second run's and the soak's", got)
	}
	if strings.Contains(string(page), "(A)") || strings.Contains(string(page), docSections[1].missing) {
		t.Errorf("the page keeps what was replaced:\n%s", page)
	}
	if again := renderDoc(got); again != string(page) {
		t.Errorf("renderDoc(parseDoc(page)) differs from the page:\n%s\n---\n%s", again, page)
	}
}

// TestPerformanceDoc: docs/performance.md is what writeDoc writes (the
// header of this program, the two sections it fills), so that a hand edit
// outside the figures fails here. -update renders the header again.
func TestPerformanceDoc(t *testing.T) {
	page, err := os.ReadFile(performanceDoc)
	if err != nil {
		t.Fatal(err)
	}
	bodies := parseDoc(string(page))
	for _, s := range docSections {
		if _, ok := bodies[s.name]; !ok {
			t.Errorf("docs/performance.md has no %s section (%s ... %s)", s.name, strings.TrimSpace(docBegin(s.name)), strings.TrimSpace(docEnd(s.name)))
		}
	}
	want := renderDoc(bodies)
	if golden.Update() {
		if err := os.WriteFile(performanceDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if string(page) != want {
		t.Errorf("docs/performance.md is not as scripts/bench.sh writes it (go test ./e2e/bench -run TestPerformanceDoc -update renders the header again)")
	}
	if !strings.Contains(bodies[docRun], "### Benchmark (") || !strings.Contains(bodies[docRun], "Machine: ") {
		t.Errorf("the benchmark section has no date or machine line")
	}
}
