package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/auth"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/internal/watch"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/status"
)

// The files a reload re-reads, as status.Reload names them.
const (
	fileConf     = "tools.conf"
	fileTokens   = "tokens"
	filePolicy   = "policy"
	fileRegistry = "registry" // the directory: its fragments and pins
)

// reloadFiles are the files a reload reads: the first three applied in
// that order by Server.Reload, the registry then by its own reload
// (registryReloads).
var reloadFiles = []string{fileConf, fileTokens, filePolicy, fileRegistry}

// What serves on after a refused file (status.Refusal.Effect).
const (
	effectTokens = "the tokens loaded before are still served"
	effectPolicy = "the last good policy still decides: nothing it did not permit is permitted"
)

// reloader re-reads tools.conf, the token file, the policy file and the
// registry directory (its fragments and pins) on SIGHUP and when one
// changes on disk, and hands the server the new snapshot. The load
// functions are conf's, auth's, policy's and registry's own: a reload
// refuses what a start would.
type reloader struct {
	a      *app
	srv    *server.Server
	log    *logrus.Logger
	tokens *auth.StaticTokens // nil without --auth-tokens
	// paths are the files by name; "" when not given.
	paths    map[string]string
	confOpts conf.Options

	mu     sync.Mutex
	conf   *conf.Config
	policy *policy.Engine
	sums   map[string][sha256.Size]byte

	// registry asks registryReloads for a reload of the registry (its
	// trigger); one may be pending.
	registry chan string
}

func newReloader(a *app, srv *server.Server, s *settings, f *serveFlags) *reloader {
	r := &reloader{
		a: a, srv: srv, log: a.log, tokens: f.hf.static, confOpts: s.confOptions(),
		paths: map[string]string{
			fileConf: s.confPath, fileTokens: f.hf.tokens, filePolicy: f.pf.path, fileRegistry: f.down.dir,
		},
		conf:     a.conf,
		policy:   a.opts.Policy,
		sums:     map[string][sha256.Size]byte{},
		registry: make(chan string, 1),
	}
	for name := range r.paths {
		r.sums[name] = r.sum(name)
	}
	return r
}

// sum is the digest of the file's contents now (of why it cannot be
// read when it cannot); of the registry, that of its every entry's name
// and contents.
func (r *reloader) sum(name string) [sha256.Size]byte {
	h := sha256.New()
	if name == fileRegistry {
		sumDir(h, r.paths[name])
	} else {
		sumFile(h, r.paths[name])
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// maxSummed bounds what sumFile reads: one byte past the largest file
// any load accepts (registry.MaxPinsSize), more bytes would only say
// again that it is too large.
const maxSummed = registry.MaxPinsSize + 1

// sumFile writes path's contents to h, or why it cannot be read. Only a
// regular file (or a link to one) is read, opened without blocking: a
// FIFO or a device put there never holds the reloader.
func sumFile(h io.Writer, path string) {
	f, err := conf.OpenFile(path, 0)
	if err != nil {
		fmt.Fprintf(h, "error: %v\n", err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		fmt.Fprintf(h, "error: %v\n", err)
	case !fi.Mode().IsRegular():
		fmt.Fprintf(h, "not a regular file: %s\n", fi.Mode().Type())
	default:
		n, err := io.Copy(h, io.LimitReader(f, maxSummed))
		fmt.Fprintf(h, "\n%d %v\n", n, err)
	}
}

// sumDir writes to h the names of dir's entries and the contents of
// each (sumFile), or why dir cannot be read.
func sumDir(h io.Writer, dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		fmt.Fprintf(h, "error: %v\n", err)
	}
	for _, e := range entries {
		fmt.Fprintf(h, "%q\n", e.Name())
		sumFile(h, filepath.Join(dir, e.Name()))
	}
}

// run reloads on every SIGHUP of hup and every change the watch sees,
// until ctx ends.
func (r *reloader) run(ctx context.Context, hup <-chan os.Signal) {
	var paths []string
	for _, name := range []string{fileConf, fileTokens, filePolicy} {
		p := r.paths[name]
		if p == "" {
			continue
		}
		// The default tools.conf's directory need not exist: without
		// it there is nothing to watch there (SIGHUP still re-reads).
		if _, err := os.Stat(filepath.Dir(p)); err != nil {
			r.log.WithField("file", p).WithError(err).Debug("reload: not watched")
			continue
		}
		paths = append(paths, p)
	}
	w, err := watch.New(watch.DefaultDebounce, paths...)
	if err != nil {
		r.log.WithError(err).Error("reload: no file watch: SIGHUP still reloads")
	} else {
		if err := r.watchRegistry(w); err != nil {
			r.log.WithError(err).Error("reload: the registry directory is not watched: SIGHUP still reloads it")
		}
		go w.Run(ctx, func() { r.reload("watch") }, func(err error) {
			r.log.WithError(err).Error("reload: file watch")
		})
	}
	go r.registryReloads(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload("sighup")
		}
	}
}

// registryReloads reloads the registry each time reload asks, one at a
// time and beside the other files' reloads: listing a new server takes up
// to its startup_timeout_sec, and no reload of the tokens or the policy
// waits for that.
func (r *reloader) registryReloads(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case trigger := <-r.registry:
			rec, ok := r.srv.ReloadRegistry(trigger, r.loadRegistry)
			if !ok {
				continue
			}
			e := r.log.WithFields(logrus.Fields{
				"generation": rec.Generation, "trigger": trigger, "added": rec.Added, "removed": rec.Removed, "replaced": rec.Replaced,
			})
			if len(rec.Refused) > 0 {
				e.Error("registry reloaded, refused")
				continue
			}
			e.Info("registry reloaded")
		}
	}
}

// reloadRegistry asks registryReloads for a reload of the registry.
func (r *reloader) reloadRegistry(trigger string) {
	select {
	case r.registry <- trigger:
	default: // one is pending: it reads the directory when it runs
	}
}

// reload re-reads the files: after a SIGHUP every file given, after a
// watch event those whose contents changed (none: nothing happens).
func (r *reloader) reload(trigger string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var changed []string
	for _, name := range reloadFiles {
		if r.paths[name] == "" {
			continue
		}
		sum := r.sum(name)
		if trigger == "watch" && sum == r.sums[name] {
			continue
		}
		r.sums[name] = sum
		changed = append(changed, name)
	}
	if len(changed) == 0 {
		return
	}
	// The registry is read again after tools.conf too, as a start would
	// judge it beside the new conf (its names, its secret files): once
	// the conf serves, and beside this reload (registryReloads).
	if r.paths[fileRegistry] != "" && (slices.Contains(changed, fileRegistry) || slices.Contains(changed, fileConf)) {
		defer r.reloadRegistry(trigger)
	}
	changed = slices.DeleteFunc(changed, func(name string) bool { return name == fileRegistry })
	if len(changed) == 0 {
		return
	}
	snap := server.Snapshot{Trigger: trigger, Changed: changed}
	for _, name := range changed {
		if ref, ok := r.load(name); !ok {
			snap.Refused = append(snap.Refused, ref)
		}
	}
	snap.Conf, snap.Policy = r.conf, r.policy
	rec := r.srv.Reload(snap)
	// Prepared sandboxes of tools changed or gone are discarded.
	r.a.opts.Sandbox.Keep(poolTemplates(r.conf, r.srv.Served(), r.a.helperTemplates))
	e := r.log.WithFields(logrus.Fields{
		"generation": rec.Generation, "trigger": trigger, "changed": changed,
		"added": rec.Added, "removed": rec.Removed, "replaced": rec.Replaced,
	})
	if len(rec.Refused) > 0 {
		e.WithField("refused", len(rec.Refused)).Error("reloaded, refusing a file")
		return
	}
	e.Info("reloaded")
}

// load loads the file name into the next snapshot; ok is false, with
// the refusal, when the file is refused.
func (r *reloader) load(name string) (status.Refusal, bool) {
	path := r.paths[name]
	ref := status.Refusal{File: name, Path: path}
	switch name {
	case fileConf:
		r.conf = conf.Load(path, r.confOpts)
		logConf(r.log, r.conf)
		auditConf(r.a.opts.Audit, r.conf)
		if r.conf.State == conf.StateRefused {
			ref.Reason, ref.Effect = confReason(r.conf), conf.RefusedEffect
			return ref, false
		}
	case fileTokens:
		t, err := conf.LoadTokens(path)
		if err != nil {
			ref.Reason, ref.Effect = err.Error(), effectTokens
			r.log.WithError(err).Error("reload: --auth-tokens refused: " + effectTokens)
			return ref, false
		}
		r.tokens.Replace(t)
		r.log.WithField("tokens", len(t.Tokens)).Info("static bearer tokens reloaded")
	case filePolicy:
		e, err := policy.Load(path)
		if err != nil {
			ref.Reason, ref.Effect = err.Error(), effectPolicy
			r.log.WithError(err).Error("reload: --policy refused: " + effectPolicy)
			return ref, false
		}
		r.policy = e
		r.log.WithFields(logrus.Fields{"policy": e.Name(), "policies": len(e.IDs())}).Info("policy reloaded")
	}
	return ref, true
}

// watchRegistry adds the registry directory to w, unless its parent is
// missing (SIGHUP still re-reads it).
func (r *reloader) watchRegistry(w *watch.Watcher) error {
	dir := r.paths[fileRegistry]
	if dir == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Dir(dir)); err != nil {
		r.log.WithField("dir", dir).WithError(err).Debug("reload: not watched")
		return nil
	}
	return w.AddDir(dir)
}

// loadRegistry is ReloadRegistry's loader: the registry directory read
// again, as serve reads it, beside the conf c served now.
func (r *reloader) loadRegistry(taken map[string]string, c *conf.Config) *registry.Registry {
	return registry.Load(r.paths[fileRegistry], registry.Options{Taken: taken, Visible: sandboxVisible, Conf: c})
}

// confReason is the first reason a refused conf gives.
func confReason(c *conf.Config) string {
	if len(c.Errors) > 0 {
		return c.Errors[0].Error()
	}
	return c.Reason
}

// hupSignals makes SIGHUP a reload request of serve, never a stop.
func hupSignals() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	return ch, func() { signal.Stop(ch) }
}
