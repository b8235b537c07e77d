package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/telemetry"
	rt "github.com/toolgate/toolgate/runtime"
)

// The helper programs.
const (
	HelperGit   = "git"
	HelperTokei = "tokei"
	HelperCtags = "ctags"
)

// helperSpec says how to find and probe one helper.
type helperSpec struct {
	name    string
	flag    string         // the serve flag that overrides it
	probe   []string       // arguments that print the version
	version *regexp.Regexp // what the first line of the version output must match
	fix     string         // how to install it
}

var helperSpecs = []helperSpec{
	{
		HelperGit, "--git",
		[]string{"--version"},
		regexp.MustCompile(`^git version \d`),
		"apt-get install -y git",
	},
	{
		HelperTokei, "--tokei",
		[]string{"--version"},
		regexp.MustCompile(`^tokei \d`),
		"cargo install tokei (not packaged for Debian 12), or brew install tokei",
	},
	// Exuberant Ctags lacks --options=NONE and JSON output: only Universal
	// Ctags will do.
	{
		HelperCtags, "--ctags",
		[]string{"--version"},
		regexp.MustCompile(`^Universal Ctags \d`),
		"apt-get install -y universal-ctags",
	},
}

// Helper is the state of one helper program on this host.
type Helper struct {
	// Name is git, tokei or ctags.
	Name string
	// Path is the canonical absolute path, when found.
	Path string
	// Source says where Path came from: "flag" or "PATH".
	Source string
	// Version is the first line of its version output, when it works.
	Version string
	// Err says why it is unusable; nil when it works.
	Err error
	// SandboxErr says why it cannot run sandboxed over the workspace (no
	// sandbox backend, or one the workspace or the helper cannot be
	// bound into): a helper never runs over workspace content on the
	// host, so it is then unusable too.
	SandboxErr error
	// Enables lists the tools it makes available.
	Enables []string
	// Flag overrides the PATH search; Fix says how to install it.
	Flag, Fix string
}

// Available reports whether the helper was found, answered its probe and
// can run sandboxed.
func (h Helper) Available() bool { return h.Path != "" && h.Err == nil && h.SandboxErr == nil }

// Reason says why the helper is unavailable.
func (h Helper) Reason() error {
	if h.Err != nil {
		return h.Err
	}
	return h.SandboxErr
}

// Helper timeouts and stream limits.
const (
	probeTimeout    = 5 * time.Second
	probeMaxStream  = 16 << 10
	helperMaxStderr = 64 << 10
)

// ResolveHelpers finds and probes every helper, once, at start-up. A
// helper overridden by an absolute path in cfg must exist and answer its
// version probe, or it is an error; one searched for on PATH is simply
// unavailable when missing or broken.
func ResolveHelpers(cfg Config) ([]Helper, error) {
	overrides := map[string]string{HelperGit: cfg.Git, HelperTokei: cfg.Tokei, HelperCtags: cfg.Ctags}
	search := cfg.SearchPath
	if search == "" {
		search = rt.DefaultPath
	}
	var root string
	ws, rootErr := NewWorkspace(cfg.Root)
	if rootErr == nil {
		root = ws.Root()
	}
	var out []Helper
	var errs []error
	for _, s := range helperSpecs {
		h := Helper{Name: s.name, Enables: enables(s.name), Flag: s.flag, Fix: s.fix}
		if o := overrides[s.name]; o != "" {
			h.Source = "flag"
			h.Path, h.Err = canonicalExecutable(o)
			if h.Err == nil {
				h.Version, h.Err = probe(h.Path, s)
			}
			if h.Err != nil {
				errs = append(errs, fmt.Errorf("%s %q: %w", s.flag, o, h.Err))
			}
		} else {
			h.Source = "PATH"
			h.Path, h.Err = lookPath(s.name, search)
			if h.Err == nil {
				h.Version, h.Err = probe(h.Path, s)
			}
		}
		if h.Err == nil {
			switch {
			case cfg.Sandbox == nil:
				h.SandboxErr = errors.New("it runs only sandboxed, and no sandbox backend can run here")
			case rootErr != nil:
				h.SandboxErr = rootErr
			case cfg.SandboxCheck != nil:
				if err := cfg.SandboxCheck(root, h.Path); err != nil {
					h.SandboxErr = fmt.Errorf("it runs only sandboxed over the workspace root, and cannot: %w", err)
				}
			}
		}
		out = append(out, h)
	}
	return out, errors.Join(errs...)
}

// lookPath searches the absolute entries of search for an executable
// name and returns its canonical path. Relative and empty entries are
// skipped: they would make the result depend on the working directory.
func lookPath(name, search string) (string, error) {
	for _, dir := range filepath.SplitList(search) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p, err := canonicalExecutable(filepath.Join(dir, name))
		if err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in the absolute entries of PATH %q", name, search)
}

// canonicalExecutable checks that p is an absolute path to an executable
// regular file and returns it with symlinks resolved.
func canonicalExecutable(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("path %q is not absolute", p)
	}
	c, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(c)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%q is not a regular file", c)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%q is not executable", c)
	}
	return c, nil
}

// probe runs the helper's version command and checks its first line.
func probe(path string, s helperSpec) (string, error) {
	res, err := rt.RunHelper(context.Background(), rt.HelperCmd{
		Path: path, Args: s.probe, Dir: "/", Timeout: probeTimeout,
		MaxStdout: probeMaxStream, MaxStderr: probeMaxStream,
	})
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(bytes.TrimSpace(res.Stdout)), "\n")
	line = strings.TrimSpace(line)
	if res.Failed() {
		return "", fmt.Errorf("%s %s failed (exit %d%s): %s", s.name, strings.Join(s.probe, " "), res.ExitCode,
			timedOut(res.TimedOut), firstLine(res.Stderr))
	}
	if !s.version.MatchString(line) {
		return "", fmt.Errorf("%s %s printed %q, want a line matching %q", s.name, strings.Join(s.probe, " "), line, s.version.String())
	}
	if short, _, ok := strings.Cut(line, ", "); ok {
		line = short // "Universal Ctags 5.9.0, Copyright ..."
	}
	return line, nil
}

func timedOut(t bool) string {
	if t {
		return ", timed out"
	}
	return ""
}

func firstLine(b []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(line) > 200 {
		line = line[:200] + "..."
	}
	return line
}

// runHelper runs a resolved helper in the sandbox, with the workspace root
// bound read-only as its working directory and stdin (nil: /dev/null). An
// error means it could not run at all (the sandbox backend is unavailable,
// say): the tool answers it as a failure.
func (e *env) runHelper(ctx context.Context, name string, args []string, timeout time.Duration, maxStdout int, stdin []byte) (rt.HelperResult, error) {
	h := e.helpers[name]
	if !h.Available() {
		return rt.HelperResult{}, fmt.Errorf("helper %s is not available", name)
	}
	ctx, span := telemetry.Start(ctx, "helper "+name, trace.WithAttributes(attribute.String("toolgate.helper", name)))
	defer span.End()
	res, err := e.sandbox.Run(ctx, rt.Invocation{
		ID:       "h" + strconv.FormatUint(e.runs.Add(1), 10),
		Template: helperTemplate(h, args, e.ws.Root(), stdin != nil),
		Call:     rt.Call{Timeout: timeout, MaxBytes: maxStdout, StderrMax: helperMaxStderr, Input: stdin},
	})
	return helperOutcome(span, name, res, err)
}

// helperSession is a built-in call's runs of one helper: one sandbox for
// all of them (rt.Session), whose every command is the helper's fixed
// prefix (sessionShapes) and the call's further words.
type helperSession struct {
	e    *env
	name string
	sess rt.Session
}

// sessionShape is how a helper's commands begin: the words after its exe
// that every run gives it, and the words one of which comes next (none:
// any).
type sessionShape struct {
	prefix func(root string) []string
	verbs  []string
}

// sessionShapes are the helpers whose runs go through a session: git
// (git_diff_input's rev-parse, merge-base and diff, each argv chosen per
// call) and tokei (sloc's paths). ctags (outline) runs once with a fixed
// argv, prepared ahead as it is (PoolTemplates).
var sessionShapes = map[string]sessionShape{
	HelperGit:   {prefix: gitPrefix, verbs: []string{"rev-parse", "merge-base", "diff"}},
	HelperTokei: {prefix: func(string) []string { return tokeiPrefix }},
}

// sessionTemplate is the session of helper h over the workspace root: the
// sandbox of its runs, prepared ahead by the pool (PoolTemplates) or on
// the call's path (openHelper), its argv's fixed prefix and verbs.
func sessionTemplate(h Helper, root string) rt.Template {
	shape := sessionShapes[h.Name]
	return rt.Template{
		Name: h.Name, Path: h.Path, Argv: append([]string{h.Path}, shape.prefix(root)...), Dir: root,
		Session: true, Verbs: shape.verbs,
	}
}

// openHelper opens the session of helper name for one call: its runs
// share one sandbox, made ahead of the call when the pool keeps it.
func (e *env) openHelper(ctx context.Context, name string) (*helperSession, error) {
	h := e.helpers[name]
	if !h.Available() {
		return nil, fmt.Errorf("helper %s is not available", name)
	}
	sess, err := rt.OpenSession(ctx, e.sandbox, sessionTemplate(h, e.ws.Root()))
	if err != nil {
		return nil, fmt.Errorf("%s could not run sandboxed: %w", name, err)
	}
	return &helperSession{e: e, name: name, sess: sess}, nil
}

// run runs the helper with args (its fixed prefix first) in the session's
// sandbox, with the workspace root as its working directory and stdin
// /dev/null. An error means it could not run at all: the tool answers it
// as a failure.
func (s *helperSession) run(ctx context.Context, args []string, timeout time.Duration, maxStdout int) (rt.HelperResult, error) {
	ctx, span := telemetry.Start(ctx, "helper "+s.name, trace.WithAttributes(attribute.String("toolgate.helper", s.name)))
	defer span.End()
	res, err := s.sess.Run(ctx, append([]string{s.e.helpers[s.name].Path}, args...),
		rt.Call{Timeout: timeout, MaxBytes: maxStdout, StderrMax: helperMaxStderr})
	return helperOutcome(span, s.name, res, err)
}

// close ends the session; its sandbox goes off the call's path.
func (s *helperSession) close() { s.sess.Close() }

// helperOutcome is a helper run's HelperResult, with its span's outcome.
func helperOutcome(span trace.Span, name string, res rt.Result, err error) (rt.HelperResult, error) {
	if err != nil {
		telemetry.Fail(span, "failed", "could not run sandboxed")
		return rt.HelperResult{}, fmt.Errorf("%s could not run sandboxed: %w", name, err)
	}
	telemetry.Attrs(span, semconv.ProcessExitCode(res.ExitCode))
	if res.Limit != rt.LimitNone {
		// A non-zero exit is the built-in's to judge (git diff's 1).
		telemetry.Fail(span, string(res.Limit), "the helper was ended by its "+string(res.Limit))
	}
	return rt.HelperResultOf(res), nil
}

// PoolTemplates are the helper sandboxes of the served tools, for the
// sandbox pool (rt.Pool) to prepare ahead of their calls: outline's ctags
// (a fixed argv, the file on stdin: exactly runHelper's invocation), and
// the sessions of git (git_diff_input) and tokei (sloc), whose argv the
// call completes at each run.
func PoolTemplates(root string, tools []Tool, helpers []Helper) []rt.Template {
	ws, err := NewWorkspace(root)
	if err != nil {
		return nil
	}
	byName := map[string]Helper{}
	for _, h := range helpers {
		if h.Available() {
			byName[h.Name] = h
		}
	}
	var out []rt.Template
	for _, t := range tools {
		var helper string
		for _, c := range catalogue {
			if c.name == t.Name {
				helper = c.helper
			}
		}
		h, ok := byName[helper]
		switch {
		case !ok:
		case helper == HelperCtags:
			out = append(out, helperTemplate(h, ctagsArgs, ws.Root(), true))
		default:
			out = append(out, sessionTemplate(h, ws.Root()))
		}
	}
	return out
}

// helperTemplate is what a run of helper h with args over the workspace
// root runs (stdin: it is given input), for runHelper and the pool alike:
// stderr kept apart (helperMaxStderr), the root its working directory.
func helperTemplate(h Helper, args []string, root string, stdin bool) rt.Template {
	return rt.Template{
		Name: h.Name, Path: h.Path, Argv: append([]string{h.Path}, args...), Dir: root,
		SplitStderr: true, Stdin: stdin,
	}
}

// helperFailure describes a helper run that failed, for an isError result.
func helperFailure(name string, res rt.HelperResult) string {
	switch {
	case res.TimedOut:
		return fmt.Sprintf("%s timed out after %s", name, res.Elapsed.Round(time.Millisecond))
	case res.Limit == rt.LimitCancelled:
		return name + " was cancelled"
	}
	msg := fmt.Sprintf("%s exited with status %d", name, res.ExitCode)
	if l := firstLine(res.Stderr); l != "" {
		msg += ": " + l
	}
	return msg
}
