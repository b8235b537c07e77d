// Package watch tells when files change on disk, as editors and the
// kubelet change them: written in place, replaced by a rename, or (a
// ConfigMap or Secret volume) swapped with the whole volume through the
// `..data` symlink. It watches each file's directory, not the file, so
// that a replaced file (a new inode) is still seen, and debounces the
// burst of events one change makes.
package watch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DataLink is the symlink the kubelet's atomic writer swaps to publish a
// volume's new contents.
const DataLink = "..data"

// DefaultDebounce is how long Run waits after the last event before it
// reports.
const DefaultDebounce = 200 * time.Millisecond

// Watcher watches a set of files by their directories.
type Watcher struct {
	w     *fsnotify.Watcher
	names map[string][]string // directory: base names watched in it
	// dirs are the directories every entry of which is watched (AddDir),
	// each watched itself once it exists.
	dirs     map[string]bool
	debounce time.Duration
}

// New watches paths (empty ones are skipped). Each path's directory must
// exist; the file itself need not.
func New(debounce time.Duration, paths ...string) (*Watcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	w := &Watcher{w: fw, names: map[string][]string{}, dirs: map[string]bool{}, debounce: debounce}
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			_ = fw.Close()
			return nil, fmt.Errorf("watch %q: %w", p, err)
		}
		dir := filepath.Dir(abs)
		if _, ok := w.names[dir]; !ok {
			if err := fw.Add(dir); err != nil {
				_ = fw.Close()
				return nil, fmt.Errorf("watch %q: %w", dir, err)
			}
		}
		w.names[dir] = append(w.names[dir], filepath.Base(abs))
	}
	return w, nil
}

// AddDir watches every entry of dir (a fragment added, edited or
// removed; a `..data` swap), and dir itself made or removed: its parent
// must exist, dir need not yet.
func (w *Watcher) AddDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("watch %q: %w", dir, err)
	}
	parent := filepath.Dir(abs)
	if _, ok := w.names[parent]; !ok {
		if err := w.w.Add(parent); err != nil {
			return fmt.Errorf("watch %q: %w", parent, err)
		}
	}
	w.names[parent] = append(w.names[parent], filepath.Base(abs))
	w.dirs[abs] = true
	w.watchDir(abs)
	return nil
}

// watchDir watches dir of AddDir when it exists (again after it was made
// anew: a watch ends with its directory).
func (w *Watcher) watchDir(dir string) {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		_ = w.w.Add(dir)
	}
}

// Run calls changed after each burst of events about a watched file (or
// a `..data` swap in its directory) has been quiet for the debounce,
// until ctx ends; a watch error is handed to failed. It closes the
// watcher when it returns.
func (w *Watcher) Run(ctx context.Context, changed func(), failed func(error)) {
	defer w.w.Close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.w.Events:
			if !ok {
				return
			}
			if w.dirs[ev.Name] && ev.Has(fsnotify.Create) {
				w.watchDir(ev.Name)
			}
			if w.relevant(ev) {
				timer.Reset(w.debounce)
			}
		case err, ok := <-w.w.Errors:
			if !ok {
				return
			}
			failed(err)
		case <-timer.C:
			changed()
		}
	}
}

// relevant reports whether ev is about a watched file or its
// directory's `..data`.
func (w *Watcher) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	base, dir := filepath.Base(ev.Name), filepath.Dir(ev.Name)
	return base == DataLink || w.dirs[dir] || slices.Contains(w.names[dir], base)
}
