package conf

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// toolFields is the number of fields before "--" on a tool line, counting
// the directive itself: tool name exe class timeout-s max-bytes sandbox dir.
const toolFields = 8

// nameRE is the rule for tool names: lowercase start, [a-z0-9_], at most 32.
var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// metachars may not appear in an exe or dir: the shell metacharacters of the
// seed, backtick, backslash and newline.
const metachars = ";|&$\"'*?~()<>`\\\n"

// validateTool decodes and validates one tool line. It returns every reason
// the line is refused, each as a fieldError, so an operator can fix them all
// in one pass.
func validateTool(l line, builtins map[string]bool, declared map[string]int, fs *fsCache) (Tool, []error) {
	toks := l.tokens
	t := Tool{Line: l.num}
	if len(toks) < toolFields+1 || toks[toolFields] != "--" {
		return t, []error{shapeError(toks)}
	}
	t.Name, t.Exe, t.Dir = toks[1], toks[2], toks[7]
	t.Args = append([]string{}, toks[toolFields+1:]...)

	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(checkName(t.Name, builtins, declared))
	if declared[t.Name] == 0 && nameRE.MatchString(t.Name) {
		declared[t.Name] = l.num
	}
	var err error
	t.ExeResolved, err = checkExe(t.Exe, fs)
	add(err)
	class, err := checkClass(toks[3])
	add(err)
	t.Class = class
	secs, err := checkInt("timeout-s", toks[4], MinTimeout, MaxTimeout)
	add(err)
	t.Timeout = time.Duration(secs) * time.Second
	t.MaxBytes, err = checkInt("max-bytes", toks[5], MinMaxBytes, MaxMaxBytes)
	add(err)
	t.Sandbox, err = checkSandbox(toks[6], class)
	add(err)
	t.DirResolved, err = checkDir(t.Dir, fs)
	add(err)
	for i, a := range t.Args {
		if d, bad := DeniedSubstring(a); bad {
			add(fieldErrf(fmt.Sprintf("args[%d]", i), "%q contains %q: %w (MCP-owned build and package state)", a, d, ErrDenied))
		}
	}
	return t, errs
}

// shapeError explains a tool line whose "--" is not the 9th token.
func shapeError(toks []string) error {
	const want = "want `tool <name> <abspath> <read|test> <timeout-s> <max-bytes> <on|off> <dir> -- <fixed args...>`"
	for i, tok := range toks {
		if tok == "--" {
			return fieldErrf("--", "%q is token %d, must be exactly the 9th (8 fields, then --): %s", "--", i+1, want)
		}
	}
	if len(toks) <= toolFields {
		return fieldErrf("--", "%d fields and no --: %s", len(toks), want)
	}
	return fieldErrf("--", "token 9 is %q, must be exactly --: %s", toks[toolFields], want)
}

func checkName(name string, builtins map[string]bool, declared map[string]int) error {
	switch {
	case !nameRE.MatchString(name):
		return fieldErrf("name", "%q: want a lowercase letter, then [a-z0-9_], 32 characters or fewer", name)
	case builtins[name]:
		return fieldErrf("name", "%q collides with a built-in tool", name)
	case declared[name] != 0:
		return fieldErrf("name", "%q already declared on line %d", name, declared[name])
	}
	return nil
}

// checkPathSyntax applies the lexical rules shared by exe and dir.
func checkPathSyntax(field, p string) error {
	switch {
	case len(p) > pathMax:
		return fieldErrf(field, "path of %d bytes: longer than %d", len(p), pathMax)
	case longComponent(p):
		return fieldErrf(field, "%q has a component longer than %d bytes", p, nameMax)
	case !filepath.IsAbs(p):
		return fieldErrf(field, "%q is not an absolute path", p)
	case hasDotDot(p):
		return fieldErrf(field, "%q contains a .. component", p)
	case strings.ContainsAny(p, metachars):
		i := strings.IndexAny(p, metachars)
		return fieldErrf(field, "%q contains the shell metacharacter %q", p, p[i:i+1])
	case filepath.Clean(p) != p:
		return fieldErrf(field, "%q is not clean: write %q", p, filepath.Clean(p))
	}
	if d, bad := DeniedSubstring(p); bad {
		return fieldErrf(field, "%q contains %q: %w (MCP-owned build and package state)", p, d, ErrDenied)
	}
	return nil
}

// Linux limits: PATH_MAX and NAME_MAX.
const (
	pathMax = 4096
	nameMax = 255
)

func longComponent(p string) bool {
	for c := range strings.SplitSeq(p, "/") {
		if len(c) > nameMax {
			return true
		}
	}
	return false
}

func hasDotDot(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

// checkExe validates the executable lexically, then on disk: it must exist,
// be a regular executable file, and neither its basename as written nor the
// basename of its fully resolved path may be denied. It returns the
// resolved path.
func checkExe(exe string, fs *fsCache) (string, error) {
	if err := checkPathSyntax("exe", exe); err != nil {
		return "", err
	}
	if err := checkDeniedExe(exe, ""); err != nil {
		return "", err
	}
	resolved, err := fs.evalSymlinks(exe)
	if err != nil {
		return "", fieldErrf("exe", "%q: %v", exe, UnwrapPathErr(err))
	}
	if resolved != exe {
		if err := checkDeniedExe(resolved, exe); err != nil {
			return "", err
		}
		if strings.ContainsAny(resolved, metachars) {
			return "", fieldErrf("exe", "%q resolves to %q, which contains a shell metacharacter", exe, resolved)
		}
		if d, bad := DeniedSubstring(resolved); bad {
			return "", fieldErrf("exe", "%q resolves to %q, which contains %q: %w", exe, resolved, d, ErrDenied)
		}
	}
	fi, err := fs.stat(resolved)
	if err != nil {
		return "", fieldErrf("exe", "%q: %v", exe, UnwrapPathErr(err))
	}
	if !fi.Mode().IsRegular() {
		return "", fieldErrf("exe", "%q is not a regular file (mode %s)", exe, fi.Mode().Type())
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return "", fieldErrf("exe", "%q is not executable (mode %04o)", exe, fi.Mode().Perm())
	}
	return resolved, nil
}

// checkDeniedExe refuses a denied basename. via, when set, is the path as
// written that resolved to p.
func checkDeniedExe(p, via string) error {
	base := filepath.Base(p)
	fam, entry, denied := DeniedExe(base)
	if !denied {
		return nil
	}
	if via != "" {
		return fieldErrf("exe", "%q resolves to %q, whose basename %q is a %s (denylist entry %q): %w", via, p, base, fam, entry, ErrDenied)
	}
	return fieldErrf("exe", "basename %q is a %s (denylist entry %q): %w", base, fam, entry, ErrDenied)
}

func checkClass(s string) (Class, error) {
	switch Class(s) {
	case ClassRead, ClassTest:
		return Class(s), nil
	}
	return "", fieldErrf("class", "%q: want read or test", s)
}

// checkInt parses a plain decimal integer (digits only, no sign, no leading
// zero) within [lo, hi].
func checkInt(field, s string, lo, hi int) (int, error) {
	plain := s != "" && strings.Trim(s, "0123456789") == "" && (s == "0" || s[0] != '0')
	if !plain {
		return 0, fieldErrf(field, "%q is not a plain decimal integer", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, fieldErrf(field, "%s out of range: want %d to %d", s, lo, hi)
	}
	return n, nil
}

// checkSandbox parses the sandbox field and checks it agrees with the class:
// read ⇔ off, test ⇔ on. The class states the operator's intent; the
// explicit sandbox field is the interlock.
func checkSandbox(s string, class Class) (bool, error) {
	var on bool
	switch s {
	case "on":
		on = true
	case "off":
	default:
		return false, fieldErrf("sandbox", "%q: want on or off", s)
	}
	switch {
	case class == ClassRead && on:
		return on, fieldErrf("sandbox", "class read runs unsandboxed: write off (or make the tool class test)")
	case class == ClassTest && !on:
		return on, fieldErrf("sandbox", "class test always runs sandboxed: write on (or make the tool class read)")
	}
	return on, nil
}

// checkDir validates the working directory: lexically, then on disk (it
// must exist and be a directory). It returns the resolved path.
func checkDir(dir string, fs *fsCache) (string, error) {
	if err := checkPathSyntax("dir", dir); err != nil {
		return "", err
	}
	resolved, err := fs.evalSymlinks(dir)
	if err != nil {
		return "", fieldErrf("dir", "%q: %v", dir, UnwrapPathErr(err))
	}
	if strings.ContainsAny(resolved, metachars) {
		return "", fieldErrf("dir", "%q resolves to %q, which contains a shell metacharacter", dir, resolved)
	}
	if d, bad := DeniedSubstring(resolved); bad {
		return "", fieldErrf("dir", "%q resolves to %q, which contains %q: %w", dir, resolved, d, ErrDenied)
	}
	fi, err := fs.stat(resolved)
	if err != nil {
		return "", fieldErrf("dir", "%q: %v", dir, UnwrapPathErr(err))
	}
	if !fi.IsDir() {
		return "", fieldErrf("dir", "%q is not a directory", dir)
	}
	return resolved, nil
}

// UnwrapPathErr drops the op and path of an *os.PathError: the message
// already names the path.
func UnwrapPathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok { //nolint:errorlint // only the top-level PathError carries the redundant path
		return pe.Err
	}
	return err
}

// fsCache remembers, for one Parse, what the filesystem said about a path:
// a conf that names the same exe and dir on 500 lines resolves them once.
type fsCache struct {
	links map[string]resolved
	stats map[string]statResult
}

type resolved struct {
	path string
	err  error
}

type statResult struct {
	fi  os.FileInfo
	err error
}

func newFSCache() *fsCache {
	return &fsCache{links: map[string]resolved{}, stats: map[string]statResult{}}
}

func (c *fsCache) evalSymlinks(p string) (string, error) {
	if r, ok := c.links[p]; ok {
		return r.path, r.err
	}
	path, err := filepath.EvalSymlinks(p)
	c.links[p] = resolved{path, err}
	return path, err
}

func (c *fsCache) stat(p string) (os.FileInfo, error) {
	if r, ok := c.stats[p]; ok {
		return r.fi, r.err
	}
	fi, err := os.Stat(p)
	c.stats[p] = statResult{fi, err}
	return fi, err
}
