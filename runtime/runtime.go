// Package runtime runs what toolgate runs, and is the only package that
// starts a process. Every process is made by one builder (Proc: exact
// environment, own process group, parent-death signal, cgroup) and one
// supervisor owns a call's lifetime (Exec, supervise: one pipe for stdout
// and stderr, the output cap, the hard timeout, cancellation, the kill of
// everything the call started).
//
// A call is an Invocation: its Template (what a sandbox can be prepared
// for) and its Call (limits, input). The backends (runtime/direct,
// runtime/bwrap, runtime/oci) implement Runner on top of Exec. Sandbox
// sets the chosen one up beside serving; Pool keeps sandboxes prepared
// ahead of their calls (Standby, released once, over the release channel
// of runtime/shim). Service and Process run the long-lived stdio servers.
// A call or service with an egress allowlist gets its own proxy
// (StartEgress). The cgroups are runtime/cgroup, the /proc scans
// internal/proc, and what runs inside a sandbox runtime/shim, which
// imports nothing of this package.
//
// The name clashes with the standard library's runtime; import it as rt.
package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/egress"
	"github.com/toolgate/toolgate/egress/allowlist"
)

// Backend names an execution backend.
type Backend string

// The backends.
const (
	BackendDirect Backend = "direct"
	BackendBwrap  Backend = "bwrap"
	BackendOCI    Backend = "oci"
)

// KnownBackends lists the sandbox backends a test-class tool can use.
func KnownBackends() []Backend { return []Backend{BackendBwrap, BackendOCI} }

// ParseBackend returns the sandbox backend named s, or an error naming the
// allowed values.
func ParseBackend(s string) (Backend, error) {
	b := Backend(s)
	if slices.Contains(KnownBackends(), b) {
		return b, nil
	}
	names := make([]string, 0, 2)
	for _, k := range KnownBackends() {
		names = append(names, string(k))
	}
	return "", fmt.Errorf("unknown sandbox backend %q: want one of %s", s, strings.Join(names, ", "))
}

// Env is the exact environment of every tool, sandboxed or not (the
// sandbox policy's, bundle.Env): nothing else is passed.
var Env = bundle.Env

// DefaultPath is the fixed PATH of every tool.
const DefaultPath = bundle.DefaultPath

// Invocation is one call of a tool: the Template (what a sandbox can be
// prepared for ahead of the call), the Call (what only the call brings),
// and its egress. One value, passed whole: the pool finds a prepared
// sandbox by the Template the call carries, never by a copy of its fields.
type Invocation struct {
	// ID identifies the call (unique per server process); backends use it
	// to name containers, bundles and cgroups.
	ID string
	Template
	Call
	// Egress, when set, is the tool's network allowlist (its egress line,
	// a registry entry's allowed_hosts): the sandbox then reaches these
	// destinations, and nothing else, through toolgate's egress proxy
	// (StartEgress). Nil: no network at all. Only the sandbox backends
	// take it; the direct backend refuses a call with one. A call with one
	// never runs in a prepared sandbox: its proxy is its own.
	Egress allowlist.List
	// EgressRecord receives the record of every connection the egress
	// proxy allowed or refused; nil discards them.
	EgressRecord func(egress.Record)
	// Inject are the credentials the egress proxy sets on the tool's
	// requests, by destination (host:port as listed in Egress): the
	// sandbox trusts the server CA that the proxy terminates those
	// destinations' TLS with, and never holds a value.
	Inject map[string]egress.Injection
}

// Template is what a prepared sandbox is made for: everything of a call
// that is known before the call (the tool's executable, its fixed argv,
// its dir, its variables, the shape of its streams). Nothing that varies
// per call (the call id, the pipes, the limits' clock, the input bytes)
// is in it. Two templates that differ in any field but Name run
// different things: the pool's key covers each (Template.key).
type Template struct {
	// Name is the tool's name, for status and logs.
	Name string
	// Path is the canonical executable to execve: no PATH search.
	Path string
	// Argv is the full argument vector; Argv[0] is the exe as configured.
	Argv []string
	// Dir is the canonical working directory, bound read-only in a
	// sandbox.
	Dir string
	// Env are the tool's own KEY=VALUE variables (its env line), added to
	// the four in a sandbox; nil for none. The direct backend refuses a
	// call with any.
	Env []string
	// SplitStderr keeps stderr apart from stdout (a built-in's helper,
	// whose stdout is parsed), capped by the call's StderrMax; a tool call
	// has one stream. It is set exactly when StderrMax is.
	SplitStderr bool
	// Stdin gives the process a stdin pipe that the call's Input is
	// written to (a helper that reads its stdin); otherwise stdin is
	// /dev/null, as a tool call's is. It is set exactly when Input is.
	Stdin bool
	// Session makes the template a built-in's helper session (a Session,
	// OpenSession): Argv is then the fixed prefix of every command the
	// sandbox runs (the helper's exe as configured and the arguments
	// toolgate always gives it), and each command's further words come
	// with it, from toolgate alone, the first of them one of Verbs when
	// Verbs is set (shim.CheckCommand). Only helpers are sessions: a
	// tool's sandbox never takes an argv. SplitStderr and Stdin do not
	// apply: each command's call shapes its own streams.
	Session bool
	Verbs   []string
	// Proxied says the tool reaches the network only through an egress
	// proxy of its call's own (Invocation.Egress), and Trusted that the
	// proxy sets credentials on its requests (Invocation.Inject), so that
	// the sandbox trusts the server CA. A sandbox prepared ahead for a
	// proxied template takes its call's proxy at its release (an
	// EgressAttacher backend); both must agree with the invocation's.
	Proxied, Trusted bool
}

// egressShape reports whether inv's Template says what its egress is.
func (inv Invocation) egressShape() bool {
	return inv.Proxied == (len(inv.Egress) > 0) && inv.Trusted == (len(inv.Inject) > 0)
}

// Call is what only the call brings: its limits, its input and its
// progress counter. A release hands it to a prepared sandbox.
type Call struct {
	// Timeout is the hard wall-clock limit.
	Timeout time.Duration
	// MaxBytes caps the combined output kept (stdout alone when stderr is
	// kept apart).
	MaxBytes int
	// StderrMax, when set, keeps stderr apart from stdout, capped at this
	// many bytes (Template.SplitStderr); zero means one stream for both,
	// as a tool call has.
	StderrMax int
	// Input, when set, is what the process reads on stdin
	// (Template.Stdin); nil means /dev/null. A tool call never sets it:
	// the built-ins' helpers do (ctags reads the source it outlines).
	Input []byte
	// Seen, when set, is kept up to date with the output bytes the tool has
	// written so far, for progress reports. Nil means not wanted.
	Seen *atomic.Int64
}

// streams reports whether c's streams are those t was made for.
func (c Call) streams(t Template) error {
	if t.SplitStderr != (c.StderrMax > 0) || t.Stdin != (c.Input != nil) {
		return fmt.Errorf("the call's streams (split stderr %v, stdin %v) are not those of its template (%v, %v)",
			c.StderrMax > 0, c.Input != nil, t.SplitStderr, t.Stdin)
	}
	return nil
}

// Limit names what ended a call early.
type Limit string

// The limits that can end a call.
const (
	LimitNone      Limit = ""
	LimitTimeout   Limit = "timeout"
	LimitCancelled Limit = "cancelled"
	LimitPids      Limit = "pids"
	LimitMemory    Limit = "memory"
)

// Result is the outcome of a call that ran. A tool that failed, timed out or
// was cancelled is a Result, not an error.
type Result struct {
	// Output is the combined stdout and stderr, at most MaxBytes.
	Output []byte
	// OutputBytes counts every byte the tool wrote, kept or dropped.
	OutputBytes int64
	// Dropped counts the bytes beyond MaxBytes.
	Dropped int64
	// Truncated reports Dropped > 0.
	Truncated bool
	// Stderr and StderrBytes are the kept and the written bytes of stderr
	// when it was kept apart (Cmd.StderrMax); otherwise stderr is in
	// Output.
	Stderr      []byte
	StderrBytes int64
	// ExitCode is the exit status, or 128+N when signal N killed the tool.
	ExitCode int
	// Elapsed is the wall-clock time from start to the end of the call.
	Elapsed time.Duration
	// TimedOut reports the hard timeout was reached.
	TimedOut bool
	// Limit names what ended the call early, if anything.
	Limit Limit
	// Egress sums up the call's traffic through its egress proxy (zero
	// without an allowlist). An egress limit does not end a call: the
	// connections beyond it are refused, and the result names it.
	Egress EgressUse
}

// Failed reports whether the call counts as a tool error: non-zero exit,
// timeout, or cancellation.
func (r Result) Failed() bool {
	return r.ExitCode != 0 || r.TimedOut || r.Limit == LimitCancelled
}

// Runner runs invocations. The error return is only for "could not run at
// all" (the backend is unusable, the executable could not be started); a
// tool that failed is a Result. Cancellation is the context: a cancelled
// call is killed with everything it started.
type Runner interface {
	Run(ctx context.Context, inv Invocation) (Result, error)
}
