package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/conf"
)

// The manual: README.md (the front door) and docs/*.md, from this package.
const (
	readmePath = "../../README.md"
	docsDir    = "../../docs"
)

// mdLinkRE matches an inline markdown link or image: [text](target).
var mdLinkRE = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)

// inlineCodeRE matches a code span, whose brackets are no link.
var inlineCodeRE = regexp.MustCompile("`[^`]*`")

// manualFiles returns README.md and every docs/*.md.
func manualFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("docs/*.md: %v (%d files)", err, len(docs))
	}
	return append([]string{readmePath}, docs...)
}

// links returns the targets of the inline links of a markdown text, with
// the line each is on; code blocks and code spans are skipped.
func links(text string) (targets []string, lines []int) {
	inCode := false
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		for _, m := range mdLinkRE.FindAllStringSubmatch(inlineCodeRE.ReplaceAllString(l, ""), -1) {
			targets = append(targets, m[1])
			lines = append(lines, i+1)
		}
	}
	return targets, lines
}

// anchors returns the anchors GitHub gives the headings of a markdown
// text: lowercased, every character but a letter, digit, space, '-' or
// '_' dropped, spaces made '-', and a repeated one suffixed -1, -2, ...
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	inCode := false
	for l := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		for n, base := 1, a; out[a]; n++ {
			a = fmt.Sprintf("%s-%d", base, n)
		}
		out[a] = true
	}
	return out
}

// TestDocLinks: every relative link of README.md and docs/*.md names a
// file of the repository that exists, and a #anchor names a heading of
// the page it points to.
func TestDocLinks(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range manualFiles(t) {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		targets, lines := links(string(text))
		for i, target := range targets {
			if regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`).MatchString(target) {
				continue // https:, mailto:: not a file of the repository
			}
			checked++
			if err := checkLink(repo, f, target); err != nil {
				t.Errorf("%s:%d: link %q: %v", strings.TrimPrefix(f, "../../"), lines[i], target, err)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the parser is broken")
	}
	t.Logf("%d relative links checked", checked)
}

// checkLink says what is wrong with a relative link target of the page
// f: a path outside the repository or to no file, or an anchor that no
// heading of the markdown page it points to makes.
func checkLink(repo, f, target string) error {
	path, anchor, _ := strings.Cut(target, "#")
	dest := f
	if path != "" {
		dest = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
		abs, err := filepath.Abs(dest)
		if err != nil || !strings.HasPrefix(abs, repo+string(filepath.Separator)) {
			return errors.New("outside the repository")
		}
		if _, err := os.Stat(dest); err != nil {
			return err
		}
	}
	if anchor == "" {
		return nil
	}
	if !strings.HasSuffix(dest, ".md") {
		return errors.New("an anchor into a file that is not markdown")
	}
	body, err := os.ReadFile(dest)
	if err != nil {
		return err
	}
	if !anchors(string(body))[anchor] {
		return fmt.Errorf("%s has no heading #%s", strings.TrimPrefix(dest, "../../"), anchor)
	}
	return nil
}

// TestDocLinksParse: the checker's own rules, on made-up text.
func TestDocLinksParse(t *testing.T) {
	text := "# A title: `x` (y)\n\n[a](b.md#c) `[no](link.md)`\n```\n[no](code.md)\n```\n## A title: x y\n[d](#e) [f](https://g)\n"
	targets, _ := links(text)
	if want := []string{"b.md#c", "#e", "https://g"}; fmt.Sprint(targets) != fmt.Sprint(want) {
		t.Errorf("links = %q, want %q", targets, want)
	}
	got := anchors(text)
	for _, a := range []string{"a-title-x-y", "a-title-x-y-1"} {
		if !got[a] {
			t.Errorf("anchors = %v, want %q among them", got, a)
		}
	}
	if len(got) != 2 {
		t.Errorf("anchors = %v, want 2", got)
	}
}

// TestReadmeConf: the README's tools.conf is one serve loads, its tool
// lines as written, with their executables and dir made real (same
// basenames, so the denylist judges the same names).
func TestReadmeConf(t *testing.T) {
	text, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## tools.conf\n\n```\n(.*?)```\n").FindSubmatch(text)
	if m == nil {
		t.Fatal("README.md has no tools.conf block under ## tools.conf")
	}
	block := string(m[1])
	if n := strings.Count(block, "\n"); n != 5 {
		t.Errorf("the README's tools.conf has %d lines, want 5", n)
	}
	root := t.TempDir()
	var pairs []string
	for _, exe := range regexp.MustCompile(`(?m)^tool \S+ (\S+)`).FindAllStringSubmatch(block, -1) {
		p := filepath.Join(root, "bin", strings.TrimPrefix(exe[1], "/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
		pairs = append(pairs, " "+exe[1]+" ", " "+p+" ")
	}
	dir := filepath.Join(root, "srv", "repo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pairs = append(pairs, " /srv/repo ", " "+dir+" ")
	c := conf.Parse("README.md", []byte(strings.NewReplacer(pairs...).Replace(block)), conf.Options{Builtins: builtin.Names()})
	if c.State != conf.StateLoaded {
		t.Fatalf("the README's tools.conf is %s: %v", c.State, c.Err())
	}
	if len(c.Tools) != 3 || len(c.Exposes) != 1 {
		t.Errorf("the README's tools.conf: %d tools, %d exposes; want 3 and 1", len(c.Tools), len(c.Exposes))
	}
	if w := c.Warnings(); len(w) > 0 {
		t.Errorf("the README's tools.conf draws warnings: %v", w)
	}
}
