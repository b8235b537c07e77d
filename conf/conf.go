package conf

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/toolgate/toolgate/egress/allowlist"
)

// EnvPath names the environment variable that locates tools.conf.
const EnvPath = "SBM_TOOLS_CONF"

// DefaultPath is where tools.conf is read from when SBM_TOOLS_CONF is unset.
const DefaultPath = "/etc/saphira/mcp/tools.conf"

// MaxFileSize is the largest tools.conf accepted (1 MiB).
const MaxFileSize = 1 << 20

// Limits of the numeric fields of a tool line.
const (
	MinTimeout  = 1
	MaxTimeout  = 3600
	MinMaxBytes = 1
	MaxMaxBytes = 1 << 20
)

// ProtectedPrefix marks built-ins that expose can never switch off.
const ProtectedPrefix = "checkpoint_"

// Class is the operator's statement of a tool's intent.
type Class string

// The two classes. A read tool runs directly (unsandboxed); a test tool runs
// sandboxed.
const (
	ClassRead Class = "read"
	ClassTest Class = "test"
)

// State is the outcome of loading tools.conf.
type State string

// The three load outcomes.
const (
	// StateAbsent: no file, or an unreadable one. Built-ins only.
	StateAbsent State = "absent"
	// StateLoaded: every line accepted.
	StateLoaded State = "loaded"
	// StateRefused: at least one line refused. Built-ins only: no external
	// tool and no expose subtraction is in effect.
	StateRefused State = "refused"
)

// RefusedEffect says what a refused tools.conf does, in the words every
// report uses (the log, check, checkpoint_status).
const RefusedEffect = "every external tool and expose subtraction is disabled; built-ins stay on"

// Tool is one validated tool line. It is immutable after Load.
type Tool struct {
	// Name is the MCP tool name.
	Name string
	// Exe is the executable as written in tools.conf.
	Exe string
	// ExeResolved is Exe with every symlink resolved, as checked at load.
	ExeResolved string
	// Class is read or test.
	Class Class
	// Timeout is the hard wall-clock limit of one call.
	Timeout time.Duration
	// MaxBytes caps the combined stdout+stderr kept from one call.
	MaxBytes int
	// Sandbox is the explicit sandbox field: on for test, off for read.
	Sandbox bool
	// Dir is the working directory as written.
	Dir string
	// DirResolved is Dir with every symlink resolved: what a sandbox binds.
	DirResolved string
	// Args are the fixed arguments after "--".
	Args []string
	// Line is the 1-based line number in tools.conf.
	Line int
	// Egress is the tool's network allowlist, from its egress line: nil
	// for no network at all (every tool without one). Only a test-class
	// tool has one; its sandbox reaches the listed destinations through
	// toolgate's egress proxy, and nothing else.
	Egress allowlist.List
	// EgressLine is the egress line's number, when there is one.
	EgressLine int
	// Credentials are the tool's credential lines: headers the egress
	// proxy sets on its requests to listed destinations.
	Credentials []Credential
	// Env are the tool's env line's KEY=VALUE variables (non-secret),
	// added to a sandboxed tool's four; EnvLine is the line's number.
	Env     []string
	EnvLine int
}

// Argv returns the full argument vector: the executable as written, then the
// fixed arguments.
func (t Tool) Argv() []string {
	return append([]string{t.Exe}, t.Args...)
}

// Expose is one expose directive.
type Expose struct {
	Name string
	On   bool
	Line int
}

// Config is the result of loading tools.conf. Tools and Exposes are empty
// unless State is StateLoaded.
type Config struct {
	// Path is the file that was (or would have been) read.
	Path string
	// State is absent, loaded or refused.
	State State
	// Reason says why the state is absent (file missing or unreadable).
	Reason string
	// SHA256 is the hex digest of the file's bytes, when it could be read.
	SHA256 string
	// Tools are the external tools in conf order.
	Tools []Tool
	// Exposes are the expose directives in conf order.
	Exposes []Expose
	// Errors are the refusals, each an *Error, in line order. Non-empty
	// exactly when State is StateRefused.
	Errors []error
}

// Err returns every refusal joined, or nil.
func (c *Config) Err() error {
	return errors.Join(c.Errors...)
}

// Hidden reports whether an `expose <name> off` removes name.
func (c *Config) Hidden(name string) bool {
	for _, e := range c.Exposes {
		if e.Name == name {
			return !e.On
		}
	}
	return false
}

// Tool returns the external tool with this name.
func (c *Config) Tool(name string) (Tool, bool) {
	for _, t := range c.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Options are what Load needs to know beyond the file itself.
type Options struct {
	// Builtins are the names of every built-in tool toolgate can serve,
	// whether or not a helper makes it available here. An external may not
	// take one of these names; expose may name them.
	Builtins []string
	// Check, when set, is applied to every otherwise valid tool line; an
	// error refuses the line (and so the file) with field "tool". The server
	// uses it to ask the sandbox backend whether it can run the tool.
	Check func(Tool) error
	// Visible, when set, reports whether a canonical host path is one
	// that sandboxes see (the host view every sandbox binds): a credential's
	// secret file there is refused.
	Visible func(path string) bool
}

// Error is one refused line, or a refusal of the whole file (Line 0).
type Error struct {
	// File is the tools.conf path.
	File string
	// Line is 1-based; 0 when the whole file is refused.
	Line int
	// Text is the line as written (comments included), when Line > 0.
	Text string
	// Field names the offending field ("exe", "timeout-s", "expose", ...).
	Field string
	// Err is the reason.
	Err error
}

func (e *Error) Error() string { return Positioned(e.File, e.Line, e.Field, e.Err) }

// Positioned renders "file:line: where: reason", leaving out a zero line
// and an empty where: the form of every refusal in this package.
func Positioned(file string, line int, where string, err error) string {
	var b strings.Builder
	b.WriteString(file)
	if line > 0 {
		fmt.Fprintf(&b, ":%d", line)
	}
	if where != "" {
		b.WriteString(": ")
		b.WriteString(where)
	}
	b.WriteString(": ")
	b.WriteString(err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Sentinels callers branch on.
var (
	// ErrDenied marks a refusal by one of the three denylists.
	ErrDenied = errors.New("denied by policy")
)

// PathFromEnv returns the tools.conf path the seed prescribes:
// SBM_TOOLS_CONF when set and non-empty, else DefaultPath.
func PathFromEnv(getenv func(string) string) string {
	if p := getenv(EnvPath); p != "" {
		return p
	}
	return DefaultPath
}

// Load reads and validates tools.conf at path. It never returns a
// half-loaded Config: either every line is accepted (StateLoaded), or the
// Config is refused and carries no tools and no exposes, or the file is
// absent or unreadable (StateAbsent, built-ins only).
func Load(path string, opts Options) *Config {
	cfg := &Config{Path: path}
	f, err := OpenFile(path, 0)
	if err != nil {
		cfg.State = StateAbsent
		if errors.Is(err, fs.ErrNotExist) {
			cfg.Reason = "no file at " + path
		} else {
			cfg.Reason = "unreadable: " + err.Error()
		}
		return cfg
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		cfg.State = StateAbsent
		cfg.Reason = "unreadable: " + err.Error()
		return cfg
	}
	if fi.IsDir() {
		cfg.State = StateAbsent
		cfg.Reason = "unreadable: " + path + " is a directory"
		return cfg
	}
	if !fi.Mode().IsRegular() {
		cfg.State = StateRefused
		cfg.Errors = []error{&Error{File: path, Field: "file", Err: fmt.Errorf("not a regular file (mode %s)", fi.Mode().Type())}}
		return cfg
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		cfg.State = StateAbsent
		cfg.Reason = "unreadable: " + err.Error()
		return cfg
	}
	sum := sha256.Sum256(data)
	cfg.SHA256 = hex.EncodeToString(sum[:])
	var errs []error
	if !fi.Mode().IsRegular() {
		errs = append(errs, &Error{File: path, Field: "file", Err: fmt.Errorf("not a regular file (mode %s)", fi.Mode())})
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		errs = append(errs, &Error{File: path, Field: "file", Err: fmt.Errorf("group- or world-writable (mode %04o): anyone who can write it can run code as toolgate; chmod go-w %s", perm, path)})
	}
	if checked, err := checkTrusted(path, os.Geteuid()); err != nil {
		errs = append(errs, &Error{File: path, Field: "file", Err: err})
	} else if err := checkSame(path, fi, checked); err != nil {
		errs = append(errs, &Error{File: path, Field: "file", Err: err})
	}
	if len(errs) > 0 {
		cfg.State = StateRefused
		cfg.Errors = errs
		return cfg
	}
	parsed := Parse(path, data, opts)
	parsed.SHA256 = cfg.SHA256
	return parsed
}

// refuse turns cfg into a refused Config carrying errs and nothing else.
func (c *Config) refuse(errs []error) {
	c.State = StateRefused
	c.Tools = nil
	c.Exposes = nil
	c.Errors = errs
}
