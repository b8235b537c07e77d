package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/conf"
	rt "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/runtime/cgroup"
	"github.com/toolgate/toolgate/runtime/direct"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/status"
)

// settings are the flags shared by serve, check and doctor.
type settings struct {
	confPath      string
	root          string
	maxConcurrent int
	backend       string
	logLevel      string
	logFormat     string
	auditLog      string
	sandbox       sandboxFlags
	oci           ociFlags
	builtins      builtinFlags
}

func (s *settings) register(fs *flag.FlagSet) {
	fs.StringVar(&s.confPath, "conf", conf.PathFromEnv(os.Getenv), "tools.conf path (default: $"+conf.EnvPath+", else "+conf.DefaultPath+")")
	fs.StringVar(&s.root, "root", ".", "workspace root of the built-in tools")
	fs.IntVar(&s.maxConcurrent, "max-concurrent", goruntime.NumCPU()*4, "external calls run at once; the excess queues")
	fs.StringVar(&s.backend, "backend", string(rt.BackendBwrap), "sandbox backend of test-class tools and the built-ins' helpers: "+knownBackendNames())
	fs.StringVar(&s.logLevel, "log-level", "warn", "log level: debug, info, warn, error (warn: MCP clients such as Claude Code file every line a server writes to stderr as an error)")
	fs.StringVar(&s.logFormat, "log-format", "text", "log format on stderr: text or json")
	fs.StringVar(&s.auditLog, "audit-log", "", "append one JSON record per call to this file (default: stderr)")
	s.sandbox.register(fs)
	s.oci.register(fs)
	s.builtins.register(fs)
	s.builtins.ids = s.sandbox.ids
}

// knownBackendNames lists rt.KnownBackends for --backend's help.
func knownBackendNames() string {
	var names []string
	for _, b := range rt.KnownBackends() {
		names = append(names, string(b))
	}
	return strings.Join(names, " or ")
}

func (s *settings) logger(stderr io.Writer) (*logrus.Logger, error) {
	l := logrus.New()
	l.SetOutput(stderr)
	lvl, err := logrus.ParseLevel(s.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	l.SetLevel(lvl)
	switch s.logFormat {
	case "text":
		l.SetFormatter(&logrus.TextFormatter{DisableColors: true, FullTimestamp: true})
	case "json":
		l.SetFormatter(&logrus.JSONFormatter{})
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", s.logFormat)
	}
	return l, nil
}

// auditLogger returns the logger of the audit records: JSON lines on stderr,
// or appended to --audit-log (created 0600).
func (s *settings) auditLogger(stderr io.Writer) (*logrus.Logger, io.Closer, error) {
	l := logrus.New()
	l.SetFormatter(&logrus.JSONFormatter{})
	l.SetOutput(stderr)
	if s.auditLog == "" {
		return l, io.NopCloser(nil), nil
	}
	f, err := os.OpenFile(s.auditLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("--audit-log: %w", err)
	}
	l.SetOutput(f)
	return l, f, nil
}

// app is everything serve needs, built from settings.
type app struct {
	log       *logrus.Logger
	auditFile io.Closer
	conf      *conf.Config
	cgroups   *cgroup.Manager
	// guard kills what is left in the cgroups when this process dies
	// (nil without cgroups, and for check).
	guard  *rt.Guard
	closed chan struct{}
	opts   server.Options
	// helperTemplates are the built-ins' helper runs the sandbox pool
	// can prepare for (poolTemplates).
	helperTemplates []rt.Template
}

// build loads the conf and sets up the backends. live is false for check,
// which must not touch the host (no cgroup directories).
func (s *settings) build(stderr io.Writer, live bool) (*app, error) {
	log, err := s.logger(stderr)
	if err != nil {
		return nil, err
	}
	if _, err := rt.ParseBackend(s.backend); err != nil {
		return nil, fmt.Errorf("--backend: %w", err)
	}
	if err := s.sandbox.check(); err != nil {
		return nil, err
	}
	// The shim binary is needed to run anything; check (not live) only
	// reports.
	shim, err := rt.FindShim()
	if err != nil && live {
		return nil, err
	}
	a := &app{log: log, closed: make(chan struct{})}
	// check starts no backend: it lists the built-ins as serve does where
	// the backend can run.
	sandbox := rt.FailedSandbox(s.backend, errors.New("not set up (check does not start backends)"))
	helperSandbox := rt.Runner(sandbox)
	if live {
		a.opts.Audit, a.auditFile, err = s.auditLogger(stderr)
		if err != nil {
			return nil, err
		}
		a.cgroups = cgroup.Setup()
		for _, d := range a.cgroups.Sweep() {
			log.WithField("dir", d).Info("removed the cgroup of a server that did not exit cleanly")
		}
		log.WithField("cgroups", a.cgroups.String()).Debug("cgroups detected")
		// Before any sandbox starts: what a SIGKILL of this process
		// would leave in its cgroups dies a moment after it.
		errFile, _ := stderr.(*os.File)
		a.guard, err = rt.StartGuard(shim, a.cgroups.ServerDirs(s.backend == string(rt.BackendOCI)), errFile)
		if err != nil {
			a.cgroups.Close()
			return nil, err
		}
		a.watchGuard()
		var prepErr error
		sandbox, prepErr = s.newSandbox(shim, a.cgroups, log)
		if prepErr != nil {
			helperSandbox = nil // the built-ins that need a helper are not served
		} else {
			helperSandbox = sandbox
		}
	}
	builtins, helperTemplates, err := s.builtins.tools(s.root, helperSandbox, log)
	if err != nil {
		_ = sandbox.Close()
		a.cgroups.Close()
		a.closeGuard()
		return nil, err
	}
	a.conf = conf.Load(s.confPath, s.confOptions())
	logConf(log, a.conf)
	if live {
		auditConf(a.opts.Audit, a.conf)
	}

	a.helperTemplates = helperTemplates
	a.opts = server.Options{
		Audit:         a.opts.Audit,
		Version:       version,
		Conf:          a.conf,
		Builtins:      builtins,
		Direct:        &direct.Runner{Cgroups: a.cgroups, Shim: shim},
		Sandbox:       sandbox,
		MaxConcurrent: s.maxConcurrent,
		Log:           log,
	}
	return a, nil
}

func (a *app) close() {
	_ = a.opts.Sandbox.Close()
	a.cgroups.Close()
	a.closeGuard()
	if a.auditFile != nil {
		a.auditFile.Close()
	}
}

// watchGuard says, once, if the guard ends before the app closes.
func (a *app) watchGuard() {
	if a.guard == nil {
		return
	}
	go func() {
		<-a.guard.Done()
		select {
		case <-a.closed: // closeGuard ended it
		default:
			a.log.WithError(a.guard.Err()).Error("sandbox guard exited: what a SIGKILL of toolgate leaves in its cgroups survives until the next start's sweep")
		}
	}()
}

// closeGuard ends the guard, after the sandboxes and cgroups are closed:
// it finds nothing left to kill.
func (a *app) closeGuard() {
	close(a.closed)
	if err := a.guard.Close(); err != nil {
		a.log.WithError(err).Warn("sandbox guard")
	}
}

// auditConf records a refused tools.conf in the audit log: one record per
// refused line (line number, field, reason; never more of the file).
func auditConf(l *logrus.Logger, c *conf.Config) {
	if c.State != conf.StateRefused {
		return
	}
	for _, ce := range status.FromConf(c).Errors {
		audit.Conf{Conf: c.Path, State: c.State, Line: ce.Line, Field: ce.Field, Reason: ce.Reason}.Write(l)
	}
}

func logConf(log *logrus.Logger, c *conf.Config) {
	e := log.WithFields(logrus.Fields{"conf": c.Path, "state": c.State})
	switch c.State {
	case conf.StateAbsent:
		e.WithField("reason", c.Reason).Info("tools.conf absent: built-in tools only")
	case conf.StateLoaded:
		e.WithFields(logrus.Fields{"tools": len(c.Tools), "sha256": c.SHA256}).Info("tools.conf loaded")
		for _, w := range c.Warnings() {
			e.WithFields(logrus.Fields{"line": w.Line, "tool": w.Tool}).Warn(w.Text)
		}
	case conf.StateRefused:
		for _, err := range c.Errors {
			e.WithField("reason", err.Error()).Error("tools.conf refused")
		}
		e.Error("tools.conf refused: " + conf.RefusedEffect)
	}
}
