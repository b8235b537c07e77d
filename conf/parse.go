package conf

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/toolgate/toolgate/egress/allowlist"
)

// line is one non-empty, comment-stripped line of tools.conf.
type line struct {
	num    int
	text   string
	tokens []string
}

// Parse validates the bytes of a tools.conf named path. It is Load without
// the file access, for tests and fuzzing; it still stats the executables and
// directories the lines name.
func Parse(path string, data []byte, opts Options) *Config {
	cfg := &Config{Path: path}
	lines, errs := decode(path, data)
	if len(errs) > 0 {
		cfg.refuse(errs)
		return cfg
	}
	builtins := make(map[string]bool, len(opts.Builtins))
	for _, b := range opts.Builtins {
		builtins[b] = true
	}

	var (
		tools    []Tool
		exposes  []Expose
		egresses []egressLine
		creds    []credentialLine
		envs     []envLine
		declared = map[string]int{} // external name → line
		fs       = newFSCache()
	)
	for _, l := range lines {
		switch l.tokens[0] {
		case "tool":
			t, lerrs := validateTool(l, builtins, declared, fs)
			if len(lerrs) == 0 && opts.Check != nil {
				if err := opts.Check(t); err != nil {
					lerrs = append(lerrs, fieldErr("tool", err))
				}
			}
			errs = append(errs, lineErrors(path, l, lerrs)...)
			tools = append(tools, t)
		case "expose":
			e, err := decodeExpose(l)
			if err != nil {
				errs = append(errs, lineErrors(path, l, []error{err})...)
				continue
			}
			exposes = append(exposes, e)
		case "egress":
			e, lerrs := decodeEgress(l)
			errs = append(errs, lineErrors(path, l, lerrs)...)
			if len(lerrs) == 0 {
				egresses = append(egresses, e)
			}
		case "credential":
			c, lerrs := decodeCredential(l)
			errs = append(errs, lineErrors(path, l, lerrs)...)
			if len(lerrs) == 0 {
				creds = append(creds, c)
			}
		case "env":
			e, lerrs := decodeEnv(l)
			errs = append(errs, lineErrors(path, l, lerrs)...)
			if len(lerrs) == 0 {
				envs = append(envs, e)
			}
		default:
			errs = append(errs, &Error{
				File: path, Line: l.num, Text: l.text, Field: "directive",
				Err: fmt.Errorf("unknown directive %q: want tool, expose, egress, credential or env", l.tokens[0]),
			})
		}
	}
	errs = append(errs, validateExposes(path, lines, exposes, builtins, declared)...)
	errs = append(errs, attachEgress(path, lines, egresses, tools)...)
	errs = append(errs, attachEnv(path, lines, envs, tools)...)
	if len(errs) == 0 { // a secret is read only from an otherwise valid file
		errs = append(errs, attachCredentials(path, lines, creds, tools, opts)...)
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b error) int { return errLine(a) - errLine(b) })
		cfg.refuse(errs)
		return cfg
	}
	cfg.State = StateLoaded
	cfg.Tools = tools
	cfg.Exposes = exposes
	return cfg
}

// decode checks the file as a whole (size, encoding, line endings, control
// characters) and splits it into tokenized lines.
func decode(path string, data []byte) ([]line, []error) {
	fileErr := func(n int, text, format string, a ...any) error {
		return &Error{File: path, Line: n, Text: text, Field: "file", Err: fmt.Errorf(format, a...)}
	}
	if len(data) > MaxFileSize {
		return nil, []error{fileErr(0, "", "larger than %d bytes", MaxFileSize)}
	}
	var (
		lines []line
		errs  []error
	)
	for i, raw := range bytes.Split(data, []byte("\n")) {
		n := i + 1
		switch {
		case bytes.IndexByte(raw, 0) >= 0:
			errs = append(errs, fileErr(n, "", "NUL byte at column %d", bytes.IndexByte(raw, 0)+1))
			continue
		case !utf8.Valid(raw):
			errs = append(errs, fileErr(n, "", "invalid UTF-8"))
			continue
		case bytes.IndexByte(raw, '\r') >= 0:
			errs = append(errs, fileErr(n, string(raw), "CR (\\r) in line: tools.conf uses LF line endings only; convert with dos2unix"))
			continue
		}
		text := string(raw)
		if c, col, ok := controlChar(text); ok {
			errs = append(errs, fileErr(n, text, "control character %U at column %d", c, col))
			continue
		}
		toks := tokenize(text)
		if len(toks) == 0 {
			continue
		}
		lines = append(lines, line{num: n, text: text, tokens: toks})
	}
	return lines, errs
}

// controlChar finds a control character other than tab.
func controlChar(s string) (rune, int, bool) {
	col := 0
	for _, r := range s {
		col++
		if r == '\t' {
			continue
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return r, col, true
		}
	}
	return 0, 0, false
}

// tokenize splits a line on spaces and tabs. A token that starts with '#'
// starts a comment: it and the rest of the line are dropped. So "#" at the
// start of a line or after whitespace starts a comment, and "a#b" is one
// token.
func tokenize(s string) []string {
	var toks []string
	for tok := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ' ' || r == '\t' }) {
		if strings.HasPrefix(tok, "#") {
			break
		}
		toks = append(toks, tok)
	}
	return toks
}

// fieldError is a reason tied to one field of a line.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.field + ": " + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

func fieldErr(field string, err error) error { return &fieldError{field: field, err: err} }

func fieldErrf(field, format string, a ...any) error {
	return &fieldError{field: field, err: fmt.Errorf(format, a...)}
}

// lineErrors wraps reasons in *Error values carrying the line.
func lineErrors(path string, l line, errs []error) []error {
	out := make([]error, 0, len(errs))
	for _, err := range errs {
		e := &Error{File: path, Line: l.num, Text: l.text, Err: err}
		if fe, ok := errors.AsType[*fieldError](err); ok {
			e.Field, e.Err = fe.field, fe.err
		}
		out = append(out, e)
	}
	return out
}

func decodeExpose(l line) (Expose, error) {
	if len(l.tokens) != 3 {
		return Expose{}, fieldErrf("expose", "want `expose <name> on|off`, got %d fields", len(l.tokens))
	}
	e := Expose{Name: l.tokens[1], Line: l.num}
	switch l.tokens[2] {
	case "on":
		e.On = true
	case "off":
	default:
		return Expose{}, fieldErrf("expose", "state %q: want on or off", l.tokens[2])
	}
	return e, nil
}

// validateExposes checks the expose directives against every name the file
// and the built-ins define: unknown names, duplicates and protected built-ins
// are refused.
func validateExposes(path string, lines []line, exposes []Expose, builtins map[string]bool, declared map[string]int) []error {
	byNum := make(map[int]line, len(lines))
	for _, l := range lines {
		byNum[l.num] = l
	}
	seen := map[string]int{}
	var errs []error
	for _, e := range exposes {
		var err error
		switch {
		case seen[e.Name] != 0:
			err = fieldErrf("expose", "%q already exposed on line %d", e.Name, seen[e.Name])
		case !builtins[e.Name] && declared[e.Name] == 0:
			err = fieldErrf("expose", "unknown tool %q: not a built-in and not declared by a tool line", e.Name)
		case !e.On && strings.HasPrefix(e.Name, ProtectedPrefix):
			err = fieldErrf("expose", "%q can never be switched off (%s* tools are always on)", e.Name, ProtectedPrefix)
		}
		if seen[e.Name] == 0 {
			seen[e.Name] = e.Line
		}
		if err != nil {
			errs = append(errs, lineErrors(path, byNum[e.Line], []error{err})...)
		}
	}
	return errs
}

// egressLine is one egress directive: egress <name> <host:port>...
type egressLine struct {
	name  string
	allow allowlist.List
	line  int
}

func decodeEgress(l line) (egressLine, []error) {
	if len(l.tokens) < 3 {
		return egressLine{}, []error{fieldErrf("egress", "want `egress <name> <host:port>...`, got %d fields", len(l.tokens))}
	}
	allow, err := allowlist.ParseList(l.tokens[2:])
	if err != nil {
		return egressLine{}, []error{fieldErr("egress", err)}
	}
	return egressLine{name: l.tokens[1], allow: allow, line: l.num}, nil
}

// attachEgress gives each egress line's allowlist to the tool it names: a
// test-class tool (sandboxed: a read-class tool has the host's network
// anyway) that a tool line defines, with one egress line at most.
func attachEgress(path string, lines []line, egresses []egressLine, tools []Tool) []error {
	byNum := lineIndex(lines)
	byName := toolIndex(tools)
	var errs []error
	for _, e := range egresses {
		i, ok := byName[e.name]
		var err error
		switch {
		case !ok:
			err = fieldErrf("egress", "unknown tool %q: egress names a tool that a tool line defines", e.name)
		case tools[i].Class != ClassTest:
			err = fieldErrf("egress", "%q is a %s-class tool: egress is for a test-class tool (sandboxed); a read-class tool runs on the host with its network", e.name, tools[i].Class)
		case tools[i].EgressLine != 0:
			err = fieldErrf("egress", "%q has an egress line already, line %d: list every destination on one line", e.name, tools[i].EgressLine)
		default:
			tools[i].Egress, tools[i].EgressLine = e.allow, e.line
		}
		if err != nil {
			errs = append(errs, lineErrors(path, byNum[e.line], []error{err})...)
		}
	}
	return errs
}

func errLine(err error) int {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Line
	}
	return 0
}
