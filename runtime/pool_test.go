package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// heldPids are the pids of the sandboxes the pool holds.
func heldPids(p *Pool) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for _, s := range p.slots {
		for _, sb := range s.held {
			out = append(out, sb.Pid())
		}
	}
	return out
}

func gone(pids []int) bool {
	for _, pid := range pids {
		if unix.Kill(pid, 0) == nil {
			return false
		}
	}
	return true
}

func echoTemplate(t *testing.T, dir, word string) Template {
	sh := lookTool(t, "sh")
	return Template{Name: word, Path: sh, Argv: []string{sh, "-c", "echo " + word}, Dir: dir}
}

func invOf(tpl Template) Invocation {
	return Invocation{ID: "x", Template: tpl, Call: Call{Timeout: 10 * time.Second, MaxBytes: 4096}}
}

func newTestPool(t *testing.T, h *hostPreparer, cfg PoolConfig) *Pool {
	t.Helper()
	p := NewPool(h, cfg)
	if p == nil {
		t.Fatal("NewPool returned nil")
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestPoolKeepsDepthReady: the pool keeps Depth sandboxes ready per
// template, a call releases one (a hit), and a replacement is prepared.
func TestPoolKeepsDepthReady(t *testing.T) {
	h := &hostPreparer{t: t}
	p := newTestPool(t, h, PoolConfig{Depth: 2})
	tpl := echoTemplate(t, t.TempDir(), "hello")
	p.Keep([]Template{tpl})
	waitFor(t, "2 ready", func() bool { return p.Status().Ready == 2 })
	res, err := p.Run(context.Background(), invOf(tpl))
	if err != nil || string(res.Output) != "hello\n" {
		t.Fatalf("Run = %q, %v", res.Output, err)
	}
	waitFor(t, "2 ready again", func() bool { return p.Status().Ready == 2 })
	st := p.Status()
	if st.Hits != 1 || st.Misses != 0 || h.ran.Load() != 0 || h.prepared.Load() != 3 {
		t.Errorf("status %+v, backend runs %d, prepared %d: want one hit, three prepared", st, h.ran.Load(), h.prepared.Load())
	}
}

// TestPoolTwoCallsNeverShare: concurrent calls each get a sandbox of their
// own: the shell's pid differs in every answer.
func TestPoolTwoCallsNeverShare(t *testing.T) {
	h := &hostPreparer{t: t}
	p := newTestPool(t, h, PoolConfig{Depth: 4})
	sh := lookTool(t, "sh")
	tpl := Template{Name: "pid", Path: sh, Argv: []string{sh, "-c", "echo $$; sleep 0.2"}, Dir: t.TempDir()}
	p.Keep([]Template{tpl})
	waitFor(t, "4 ready", func() bool { return p.Status().Ready == 4 })
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			res, err := p.Run(context.Background(), invOf(tpl))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			seen[strings.TrimSpace(string(res.Output))]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for pid, n := range seen {
		if n != 1 {
			t.Errorf("pid %s answered %d calls", pid, n)
		}
	}
	if st := p.Status(); st.Hits+st.Misses != 8 {
		t.Errorf("status %+v: every call is a hit or a miss", st)
	}
}

// TestPoolBurstFallsBack: a burst beyond the pool runs through the
// backend's Run (preparing on the call's path), every call answers, and
// the pool prepares nothing beside the burst.
func TestPoolBurstFallsBack(t *testing.T) {
	h := &hostPreparer{t: t}
	p := newTestPool(t, h, PoolConfig{Depth: 1, Parallel: 1})
	sh := lookTool(t, "sh")
	tpl := Template{Name: "slow", Path: sh, Argv: []string{sh, "-c", "sleep 0.3; echo done"}, Dir: t.TempDir()}
	p.Keep([]Template{tpl})
	waitFor(t, "1 ready", func() bool { return p.Status().Ready == 1 })
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			res, err := p.Run(context.Background(), invOf(tpl))
			if err != nil || string(res.Output) != "done\n" {
				t.Errorf("Run = %q, %v", res.Output, err)
			}
		})
	}
	wg.Wait()
	st := p.Status()
	if st.Misses == 0 || st.Misses != h.ran.Load() || st.Hits+st.Misses != 6 {
		t.Errorf("status %+v, backend runs %d: want misses run by the backend", st, h.ran.Load())
	}
	// In the burst the pool stepped aside: the one it had, then at most
	// one as the burst ended (one or no call left in flight), then the
	// refill once it was over.
	waitFor(t, "the refill", func() bool { return p.Status().Ready == 1 })
	if n := h.prepared.Load(); n > 3 {
		t.Errorf("%d sandboxes prepared for a burst of 6 calls at depth 1: the pool must not prepare beside a burst", n)
	}
}

// TestPoolOtherCallsGoToTheBackend: a call of a template the pool does not
// keep runs through the backend's Run, and nothing prepared is used for it.
func TestPoolOtherCallsGoToTheBackend(t *testing.T) {
	h := &hostPreparer{t: t}
	p := newTestPool(t, h, PoolConfig{Depth: 1})
	dir := t.TempDir()
	p.Keep([]Template{echoTemplate(t, dir, "kept")})
	waitFor(t, "1 ready", func() bool { return p.Status().Ready == 1 })
	res, err := p.Run(context.Background(), invOf(echoTemplate(t, dir, "other")))
	if err != nil || string(res.Output) != "other\n" {
		t.Fatalf("Run = %q, %v", res.Output, err)
	}
	if st := p.Status(); h.ran.Load() != 1 || st.Hits != 0 || st.Ready != 1 {
		t.Errorf("status %+v, backend runs %d", st, h.ran.Load())
	}
}

// TestPoolKeepDiscardsDropped: a template no longer kept loses its
// prepared sandboxes: their processes are gone.
func TestPoolKeepDiscardsDropped(t *testing.T) {
	h := &hostPreparer{t: t}
	p := newTestPool(t, h, PoolConfig{Depth: 1})
	dir := t.TempDir()
	a, b := echoTemplate(t, dir, "a"), echoTemplate(t, dir, "b")
	p.Keep([]Template{a, b})
	waitFor(t, "2 ready", func() bool { return p.Status().Ready == 2 })
	before := heldPids(p)
	p.Keep([]Template{a})
	waitFor(t, "b's sandbox gone", func() bool {
		st := p.Status()
		return len(st.Entries) == 1 && st.Entries[0].Name == "a" && st.Ready == 1
	})
	var bPid []int
	for _, pid := range before {
		if !containsInt(heldPids(p), pid) {
			bPid = append(bPid, pid)
		}
	}
	waitFor(t, "b's process gone", func() bool { return len(bPid) == 1 && gone(bPid) })
}

func containsInt(s []int, x int) bool {
	return slices.Contains(s, x)
}

// TestPoolReplacesOld: a prepared sandbox older than MaxAge is discarded
// and replaced, never released.
func TestPoolReplacesOld(t *testing.T) {
	h := &hostPreparer{t: t}
	p := newTestPool(t, h, PoolConfig{Depth: 1, MaxAge: 400 * time.Millisecond})
	tpl := echoTemplate(t, t.TempDir(), "x")
	p.Keep([]Template{tpl})
	waitFor(t, "1 ready", func() bool { return p.Status().Ready == 1 })
	first := heldPids(p)
	waitFor(t, "a replacement", func() bool { return p.Status().Expired >= 1 && p.Status().Ready == 1 })
	waitFor(t, "the old one gone", func() bool { return gone(first) })
	// A sandbox found too old at the call is not used either.
	time.Sleep(500 * time.Millisecond)
	res, err := p.Run(context.Background(), invOf(tpl))
	if err != nil || string(res.Output) != "x\n" {
		t.Fatalf("Run = %q, %v", res.Output, err)
	}
}

// TestPoolMaxEvictsLeastRecentlyUsed: under Max, a template called more
// recently takes the place of the least recently used one.
func TestPoolMaxEvictsLeastRecentlyUsed(t *testing.T) {
	h := &hostPreparer{t: t}
	p := newTestPool(t, h, PoolConfig{Depth: 1, Max: 2})
	dir := t.TempDir()
	a, b, c := echoTemplate(t, dir, "a"), echoTemplate(t, dir, "b"), echoTemplate(t, dir, "c")
	p.Keep([]Template{a, b, c})
	waitFor(t, "2 ready", func() bool { return p.Status().Ready == 2 })
	time.Sleep(100 * time.Millisecond)
	if st := p.Status(); st.Ready+st.Preparing != 2 {
		t.Fatalf("%d held, want Max 2", st.Ready+st.Preparing)
	}
	// c is called: it runs now through the backend or a fresh sandbox,
	// and then holds a prepared one in place of a or b.
	for range 2 {
		if res, err := p.Run(context.Background(), invOf(c)); err != nil || string(res.Output) != "c\n" {
			t.Fatalf("Run(c) = %q, %v", res.Output, err)
		}
	}
	waitFor(t, "c prepared", func() bool {
		for _, e := range p.Status().Entries {
			if e.Name == "c" && e.Ready == 1 {
				return true
			}
		}
		return false
	})
	time.Sleep(100 * time.Millisecond)
	if st := p.Status(); st.Ready+st.Preparing > 2 || st.Evicted == 0 {
		t.Errorf("status %+v: want at most 2 held and an eviction", st)
	}
	for _, e := range p.Status().Entries {
		if e.Ready+e.Preparing > 1 {
			t.Errorf("%s holds %d, over its depth of 1", e.Name, e.Ready+e.Preparing)
		}
	}
}

// TestPoolStaleDirFallsBack: a call whose dir was replaced after its
// sandbox was prepared does not run in it: it runs with the new dir.
func TestPoolStaleDirFallsBack(t *testing.T) {
	h := &hostPreparer{t: t}
	p := newTestPool(t, h, PoolConfig{Depth: 1})
	sh := lookTool(t, "sh")
	base := t.TempDir()
	dir := filepath.Join(base, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tpl := Template{Name: "ls", Path: sh, Argv: []string{sh, "-c", "ls"}, Dir: dir}
	p.Keep([]Template{tpl})
	waitFor(t, "1 ready", func() bool { return p.Status().Ready == 1 })
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "new-file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := p.Run(context.Background(), invOf(tpl))
	if err != nil || string(res.Output) != "new-file\n" {
		t.Fatalf("Run = %q, %v; want the new dir's listing", res.Output, err)
	}
	if st := p.Status(); st.Stale == 0 {
		t.Errorf("status %+v: want the stale sandbox counted", st)
	}
}

// TestPoolCloseLeavesNothing: Close ends every prepared sandbox.
func TestPoolCloseLeavesNothing(t *testing.T) {
	h := &hostPreparer{t: t}
	p := NewPool(h, PoolConfig{Depth: 3})
	dir := t.TempDir()
	var ts []Template
	for i := range 3 {
		ts = append(ts, echoTemplate(t, dir, fmt.Sprint("t", i)))
	}
	p.Keep(ts)
	waitFor(t, "9 ready", func() bool { return p.Status().Ready == 9 })
	pids := heldPids(p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !gone(pids) {
		t.Errorf("prepared sandboxes outlived Close: %v", pids)
	}
	if res, err := p.Run(context.Background(), invOf(ts[0])); err != nil || string(res.Output) != "t0\n" {
		t.Errorf("Run after Close = %q, %v; want the backend's answer", res.Output, err)
	}
}

func TestNewPoolOff(t *testing.T) {
	if p := NewPool(&hostPreparer{t: t}, PoolConfig{Depth: 0}); p != nil {
		t.Error("depth 0 made a pool")
	}
	if p := NewPool(&recordRunner{}, PoolConfig{Depth: 1}); p != nil {
		t.Error("a backend that cannot prepare made a pool")
	}
}

// oneFieldOff returns, for each field of Template, the name of the field
// and a copy of base that differs from it in that field alone. A field of
// a kind it cannot vary fails the test: a new field of Template must be
// taught here, so that the pool's key is checked to cover it.
func oneFieldOff(t *testing.T, base Template) map[string]Template {
	t.Helper()
	out := map[string]Template{}
	typ := reflect.TypeFor[Template]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		v := base
		fv := reflect.ValueOf(&v).Elem().Field(i)
		switch f.Type.Kind() {
		case reflect.String:
			fv.SetString(fv.String() + "-other")
		case reflect.Bool:
			fv.SetBool(!fv.Bool())
		case reflect.Slice:
			if f.Type.Elem().Kind() != reflect.String {
				t.Fatalf("Template.%s: a slice of %s: teach oneFieldOff to vary it", f.Name, f.Type.Elem())
			}
			fv.Set(reflect.Append(reflect.ValueOf(slices.Clone(fv.Interface().([]string))), reflect.ValueOf("other")))
		default:
			t.Fatalf("Template.%s of kind %s: teach oneFieldOff to vary it", f.Name, f.Type.Kind())
		}
		out[f.Name] = v
	}
	return out
}

// TestPoolKeyCoversEveryField: a template that differs from a kept one in
// any one field is a pool miss (the call runs through the backend, and
// no sandbox prepared for the kept one serves it), except Name, which is
// for status and logs: two tools that run the same are interchangeable.
func TestPoolKeyCoversEveryField(t *testing.T) {
	h := &hostPreparer{t: t}
	p := newTestPool(t, h, PoolConfig{Depth: 1})
	sh := lookTool(t, "sh")
	base := Template{Name: "env", Path: sh, Argv: []string{sh, "-c", "echo hello"}, Dir: t.TempDir(), Env: []string{"MARK=kept"}}
	p.Keep([]Template{base})
	waitFor(t, "1 ready", func() bool { return p.Status().Ready == 1 })
	variants := oneFieldOff(t, base)
	if len(variants) != reflect.TypeFor[Template]().NumField() {
		t.Fatalf("%d variants for %d fields", len(variants), reflect.TypeFor[Template]().NumField())
	}
	for name, v := range variants {
		kept := p.slotOf(v.key()) != nil
		if want := name == "Name"; kept != want {
			t.Errorf("a template differing in %s alone: kept %v, want %v", name, kept, want)
		}
	}
	// Through Run: a call of the Env variant (a field a hand copy of the
	// call once missed) runs through the backend, and the prepared
	// sandbox waits on, unused.
	res, err := p.Run(context.Background(), invOf(variants["Env"]))
	if err != nil || string(res.Output) != "hello\n" {
		t.Fatalf("Run = %q, %v", res.Output, err)
	}
	if st := p.Status(); h.ran.Load() != 1 || st.Hits != 0 || st.Ready != 1 {
		t.Errorf("a call differing in Env: status %+v, backend runs %d; want a miss through the backend", st, h.ran.Load())
	}
}
