package builtin

import (
	"bytes"
	"path"
	"regexp"
	"strings"
)

// This file is a .gitignore matcher covering the syntax of gitignore(5):
// comments, blank lines, escaped leading '#' and '!', trailing spaces
// (kept when escaped), negation, directory-only patterns (trailing '/'),
// anchored patterns (a '/' at the start or in the middle), '*', '?',
// bracket expressions, backslash escapes, and '**' in its three forms
// (leading "**/", inner "/**/", trailing "/**"). The precedence is git's:
// within one file the last matching pattern wins, a deeper .gitignore
// overrides a shallower one, and .git/info/exclude is below them all. A
// file inside an ignored directory stays ignored, since the collector
// never descends into one.
//
// What it does not consult: core.excludesFile and the user's global
// ignore file (they depend on who runs the server, and the result must
// depend on the workspace alone), and the index: a tracked file that
// matches a pattern is skipped like an untracked one.

// ignorePattern is one compiled pattern line.
type ignorePattern struct {
	re       *regexp.Regexp
	negate   bool
	dirOnly  bool
	basename bool // no '/' in the pattern: match the last path element
}

// parseGitignore compiles the patterns of one ignore file.
func parseGitignore(data []byte) []ignorePattern {
	var out []ignorePattern
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if p, ok := parseIgnoreLine(string(line)); ok {
			out = append(out, p)
		}
	}
	return out
}

func parseIgnoreLine(line string) (ignorePattern, bool) {
	line = strings.TrimSuffix(line, "\r")
	line = trimTrailingSpaces(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return ignorePattern{}, false
	}
	var p ignorePattern
	if strings.HasPrefix(line, "!") {
		p.negate = true
		line = line[1:]
	}
	if strings.HasSuffix(line, "/") && !strings.HasSuffix(line, "\\/") {
		p.dirOnly = true
		line = strings.TrimRight(line, "/")
	}
	if line == "" {
		return ignorePattern{}, false
	}
	if !strings.Contains(line, "/") {
		p.basename = true
	} else {
		line = strings.TrimPrefix(line, "/")
	}
	re, err := regexp.Compile(globRegexp(line))
	if err != nil {
		return ignorePattern{}, false
	}
	p.re = re
	return p, true
}

// trimTrailingSpaces removes trailing spaces unless escaped with '\'.
func trimTrailingSpaces(s string) string {
	for strings.HasSuffix(s, " ") {
		i := len(s) - 1
		bs := 0
		for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
			bs++
		}
		if bs%2 == 1 {
			return s[:i-1] + " " // the escaped space stays, unescaped
		}
		s = s[:i]
	}
	return s
}

// globRegexp translates a gitignore glob (fnmatch with FNM_PATHNAME) into
// an anchored regular expression over a slash-separated path.
func globRegexp(g string) string {
	var b strings.Builder
	b.WriteString("^")
	n := len(g)
	for i := 0; i < n; {
		c := g[i]
		switch {
		case c == '*' && i+1 < n && g[i+1] == '*':
			atStart := i == 0 || g[i-1] == '/'
			j := i + 2
			switch {
			case atStart && j == n:
				// "**" alone or a trailing "/**": everything below.
				b.WriteString(".*")
				i = j
			case atStart && g[j] == '/':
				// "**/" leading or inner: zero or more directories.
				b.WriteString("(?:.*/)?")
				i = j + 1
			default:
				// Any other "**" is two ordinary stars.
				b.WriteString("[^/]*")
				for i < n && g[i] == '*' {
					i++
				}
			}
		case c == '*':
			b.WriteString("[^/]*")
			i++
		case c == '?':
			b.WriteString("[^/]")
			i++
		case c == '[':
			cls, next, ok := bracket(g, i)
			if ok {
				b.WriteString(cls)
				i = next
			} else {
				b.WriteString(regexp.QuoteMeta("["))
				i++
			}
		case c == '\\' && i+1 < n:
			b.WriteString(regexp.QuoteMeta(g[i+1 : i+2]))
			i += 2
		default:
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
			i++
		}
	}
	b.WriteString("$")
	return b.String()
}

// bracket translates the bracket expression starting at g[i] == '['. It
// never matches '/'. ok is false when the bracket is not closed, in which
// case '[' is literal.
func bracket(g string, i int) (cls string, next int, ok bool) {
	j := i + 1
	negate := false
	if j < len(g) && (g[j] == '!' || g[j] == '^') {
		negate = true
		j++
	}
	var items strings.Builder
	first := true
	for j < len(g) {
		c := g[j]
		if c == ']' && !first {
			var b strings.Builder
			b.WriteString("[")
			if negate {
				b.WriteString("^/")
			}
			b.WriteString(items.String())
			b.WriteString("]")
			return b.String(), j + 1, true
		}
		first = false
		escaped := false
		if c == '\\' && j+1 < len(g) {
			j++
			c = g[j]
			escaped = true
		}
		if !escaped && c == '[' && j+1 < len(g) && g[j+1] == ':' {
			// A POSIX class such as [:alpha:].
			if end := strings.Index(g[j+2:], ":]"); end >= 0 {
				items.WriteString(g[j : j+2+end+2])
				j += 2 + end + 2
				continue
			}
		}
		if !escaped && c == '-' && items.Len() > 0 && j+1 < len(g) && g[j+1] != ']' {
			items.WriteString("-")
			j++
			continue
		}
		if c == '/' {
			// Under FNM_PATHNAME a bracket never matches '/'. (A range
			// spanning '/', such as "+-0", still does here.)
			j++
			continue
		}
		items.WriteString(quoteClassChar(c))
		j++
	}
	return "", 0, false
}

func quoteClassChar(c byte) string {
	switch c {
	case '\\', ']', '[', '^', '-':
		return "\\" + string(c)
	}
	return string(c)
}

// ignoreSet holds the patterns of every ignore file found so far, by the
// slash-separated directory they apply to ("" for the root).
type ignoreSet struct {
	byDir map[string][]ignorePattern
}

func newIgnoreSet() *ignoreSet { return &ignoreSet{byDir: map[string][]ignorePattern{}} }

// add appends the patterns of an ignore file in dir; later additions for
// the same dir take precedence (.gitignore after info/exclude).
func (s *ignoreSet) add(dir string, pats []ignorePattern) {
	if len(pats) > 0 {
		s.byDir[dir] = append(s.byDir[dir], pats...)
	}
}

// ignored reports whether rel (slash-separated, relative to the root) is
// ignored. Patterns of shallower directories are tried first, so those of
// deeper ones, tried later, win.
func (s *ignoreSet) ignored(rel string, isDir bool) bool {
	result := false
	dir := ""
	rest := rel
	for {
		if pats := s.byDir[dir]; len(pats) > 0 {
			for _, p := range pats {
				if p.dirOnly && !isDir {
					continue
				}
				subject := rest
				if p.basename {
					subject = path.Base(rest)
				}
				if p.re.MatchString(subject) {
					result = !p.negate
				}
			}
		}
		first, tail, more := strings.Cut(rest, "/")
		if !more {
			return result
		}
		if dir == "" {
			dir = first
		} else {
			dir = dir + "/" + first
		}
		rest = tail
	}
}
