package registry

// Readiness of a tool-MCP registry entry: what can be known without
// launching or connecting to the server.

import (
	"os"
	"path/filepath"

	"github.com/toolgate/toolgate/conf"
)

// ReadinessCheck is one thing a server needs from the host.
type ReadinessCheck struct {
	// Kind is "command", "cwd" or "variable".
	Kind string
	// Subject is the command as written, the directory, or the variable's
	// name. Never a variable's value.
	Subject string
	// Use is, for a variable, the field that references it
	// ("env_vars", "bearer_token_env_var", "env_http_headers.HEADER").
	Use string
	// OK is true when the check passes.
	OK bool
	// Detail says what was found: the resolved path, "set", "missing",
	// "empty", or why a path is unusable.
	Detail string
}

// Readiness is the outcome of every check of one server.
type Readiness struct {
	// ID is the server's id.
	ID string
	// Ready is true when every check passes.
	Ready bool
	// Checks are the command, the working directory (stdio), then every
	// referenced variable in Vars order.
	Checks []ReadinessCheck
}

// Readiness checks, without launching anything, that the server's command
// still resolves to the executable found at load, that its working
// directory exists, and that every variable it references is set to a
// non-empty value in the environment lookupEnv reads (os.LookupEnv in
// toolgate). Only presence is recorded: a value is never kept, returned or
// compared with anything but "".
func (s ToolServer) Readiness(lookupEnv func(string) (string, bool)) Readiness {
	r := Readiness{ID: s.ID, Ready: true}
	add := func(c ReadinessCheck) {
		r.Checks = append(r.Checks, c)
		r.Ready = r.Ready && c.OK
	}
	if s.Transport == TransportStdio {
		c := ReadinessCheck{Kind: "command", Subject: s.CommandAsWritten}
		resolved, err := checkExecutable(s.Command)
		switch {
		case err != nil:
			c.Detail = err.Error()
		case resolved != s.CommandResolved:
			c.Detail = s.Command + " now resolves to " + resolved + ", not " + s.CommandResolved + " as at load: restart toolgate"
		default:
			c.OK = true
			c.Detail = s.Command
			if resolved != s.Command {
				c.Detail += " -> " + resolved
			}
		}
		add(c)
		if s.Cwd != "" {
			add(cwdReadiness(s.Cwd))
		}
	}
	for _, tool := range s.EnabledTools {
		if problem, refused := ClientNameIssue(s.ServedName(tool)); problem != "" {
			add(ReadinessCheck{Kind: "name", Subject: s.ServedName(tool), OK: !refused, Detail: problem})
		}
	}
	for _, v := range s.Vars() {
		c := ReadinessCheck{Kind: "variable", Subject: v.Name, Use: v.Use}
		val, ok := lookupEnv(v.Name)
		switch {
		case !ok:
			c.Detail = "missing"
		case val == "":
			c.Detail = "empty"
		default:
			c.OK = true
			c.Detail = "set"
		}
		add(c)
	}
	return r
}

func cwdReadiness(dir string) ReadinessCheck {
	c := ReadinessCheck{Kind: "cwd", Subject: dir}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		c.Detail = conf.UnwrapPathErr(err).Error()
		return c
	}
	fi, err := os.Stat(resolved)
	switch {
	case err != nil:
		c.Detail = conf.UnwrapPathErr(err).Error()
	case !fi.IsDir():
		c.Detail = "not a directory"
	default:
		c.OK = true
		c.Detail = "exists"
		if resolved != dir {
			c.Detail = "exists: " + resolved
		}
	}
	return c
}
