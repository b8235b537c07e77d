package watch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/kubevol"
	"github.com/toolgate/toolgate/internal/testbin"
)

// start runs a watcher of paths; the channel gets one value a report.
func start(t *testing.T, paths ...string) <-chan struct{} {
	t.Helper()
	w, err := New(50*time.Millisecond, paths...)
	if err != nil {
		t.Fatal(err)
	}
	return run(t, w)
}

// run runs w until the test ends; the channel gets one value a report.
func run(t *testing.T, w *Watcher) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	ch := make(chan struct{}, 16)
	go func() {
		defer close(done)
		w.Run(ctx, func() { ch <- struct{}{} }, func(err error) { t.Errorf("watch: %v", err) })
	}()
	return ch
}

func expect(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no report within 5 s", what)
	}
}

func expectNone(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s: reported, want no report", what)
	case <-time.After(300 * time.Millisecond):
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWatchPlainFile: a file written in place, and one replaced by a
// rename (as editors save), are each one report once quiet; a file of
// the directory not watched is none.
func TestWatchPlainFile(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "tools.conf")
	write(t, conf, "one\n")
	ch := start(t, conf)
	for range 5 { // a burst: one report
		write(t, conf, "two\n")
	}
	expect(t, ch, "written in place")
	expectNone(t, ch, "after the burst")
	tmp := filepath.Join(dir, ".tools.conf.swp")
	write(t, tmp, "three\n")
	if err := os.Rename(tmp, conf); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "replaced by a rename")
	expectNone(t, ch, "after the rename")
	write(t, filepath.Join(dir, "other"), "x")
	expectNone(t, ch, "a file not watched")
}

// TestWatchKubeletSwap: a ConfigMap volume's edit, the kubelet's atomic
// writer's `..data` swap (kubevol.Update), is seen through the key's
// symlink, whose own inode never changes.
func TestWatchKubeletSwap(t *testing.T) {
	if os.Geteuid() != 0 {
		testbin.Missing(t, "the kubelet's layout chowns to fsGroup, and needs root (uid %d)", os.Geteuid())
	}
	dir := t.TempDir()
	kubevol.Volume(t, dir, map[string]string{"tools.conf": "one\n", "policy.cedar": "p\n"}, 0o644)
	ch := start(t, filepath.Join(dir, "tools.conf"), filepath.Join(dir, "policy.cedar"))
	kubevol.Update(t, dir, "..2026_12_02_10_05_00.000000001", map[string]string{"tools.conf": "two\n", "policy.cedar": "p\n"}, 0o644)
	expect(t, ch, "the ..data swap")
	expectNone(t, ch, "after the swap")
	b, err := os.ReadFile(filepath.Join(dir, "tools.conf"))
	if err != nil || string(b) != "two\n" {
		t.Fatalf("tools.conf after the swap = %q, %v", b, err)
	}
}

// TestWatchMissingDir: a file whose directory does not exist is an
// error naming it.
func TestWatchMissingDir(t *testing.T) {
	_, err := New(time.Millisecond, "/nonexistent/toolgate/tools.conf")
	if err == nil || err.Error() == "" || !strings.Contains(err.Error(), `"/nonexistent/toolgate"`) {
		t.Fatalf("New = %v, want an error naming the directory", err)
	}
}

// TestWatchDir: in a directory of AddDir, a fragment added, edited,
// renamed into place and removed is each one report; so is the
// directory made after the watch began, and then a file in it.
func TestWatchDir(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "tool-mcp.d")
	w, err := New(50 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddDir(dir); err != nil {
		t.Fatal(err)
	}
	ch := run(t, w)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "the directory made")
	frag := filepath.Join(dir, "10-a.toml")
	write(t, frag, "one\n")
	expect(t, ch, "a fragment added")
	write(t, frag, "two\n")
	expect(t, ch, "a fragment edited")
	tmp := filepath.Join(dir, ".pins.json.tmp")
	write(t, tmp, "{}")
	if err := os.Rename(tmp, filepath.Join(dir, "pins.json")); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "the pins renamed into place")
	if err := os.Remove(frag); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "a fragment removed")
	expectNone(t, ch, "after the removal")
	write(t, filepath.Join(parent, "other"), "x")
	expectNone(t, ch, "a file beside the directory")
}
