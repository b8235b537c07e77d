package runtime

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testbin"
)

// useLockDir points the id locks at a fresh root-owned 0700 dir.
func useLockDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testbin.Missing(t, "sandbox ids are handed out only when toolgate is root")
	}
	dir := filepath.Join(t.TempDir(), "ids")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old := IDLockDir
	IDLockDir = dir
	t.Cleanup(func() { IDLockDir = old })
	return dir
}

// TestIDsApart: the sandboxes of one server, and of two servers with the
// same range (two allocators, as two processes), never hold one id at
// once; an id comes back only after every other one of the range was
// handed out; a released id leaves no lock file behind.
func TestIDsApart(t *testing.T) {
	dir := useLockDir(t)
	r := IDRange{UID: 70000, GID: 80000, Count: 8}
	a, err := NewIDs(r)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewIDs(r)
	if err != nil {
		t.Fatal(err)
	}
	held := map[int]bool{}
	var all []SandboxID
	for i := range 8 {
		ids := a
		if i%2 == 1 {
			ids = b
		}
		id, err := ids.Acquire()
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if held[id.UID] || id.GID-80000 != id.UID-70000 || !r.HasUID(uint32(id.UID)) {
			t.Fatalf("acquire %d = %d:%d: held already or not a pair of %s (held %v)", i, id.UID, id.GID, r, held)
		}
		held[id.UID] = true
		all = append(all, id)
	}
	if _, err := a.Acquire(); err == nil || !strings.Contains(err.Error(), "all 8 of uids 70000-70007") {
		t.Errorf("acquire with all in use (some by the other server): err %v, want all in use", err)
	}
	// One comes back: it is the only one free, so it is handed out again;
	// with all free, the next is the one after it, not it.
	all[3].Release()
	all[3].Release() // twice is harmless
	again, err := a.Acquire()
	if err != nil || again.UID != all[3].UID {
		t.Fatalf("acquire after one release = %d, %v; want %d", again.UID, err, all[3].UID)
	}
	again.Release()
	for i, id := range all {
		if i != 3 {
			id.Release()
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("lock files left after every release: %v", ents)
	}
	first, _ := a.Acquire()
	second, _ := a.Acquire()
	if first.UID == second.UID {
		t.Errorf("two acquires in a row = %d twice", first.UID)
	}
	first.Release()
	if third, _ := a.Acquire(); third.UID == first.UID {
		t.Errorf("the id just released (%d) came back at once with seven others free", first.UID)
	}
}

// TestIDsShared: --sandbox-uid is one pair for every sandbox.
func TestIDsShared(t *testing.T) {
	useLockDir(t)
	ids, err := NewIDs(IDRange{UID: 64123, GID: 64124, Count: 1, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ids.Acquire()
	b, _ := ids.Acquire()
	if a.UID != 64123 || a.GID != 64124 || b.UID != 64123 {
		t.Errorf("shared pair = %d:%d and %d:%d, want 64123:64124 both", a.UID, a.GID, b.UID, b.GID)
	}
}

// TestIDRangeValidate: every rule, accepted and refused.
func TestIDRangeValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    IDRange
		want string
	}{
		{"default", DefaultIDRange(), ""},
		{"shared", IDRange{UID: 5000, GID: 5000, Count: 1, Shared: true}, ""},
		{"empty", IDRange{UID: 5000, GID: 5000}, "at least one id"},
		{"root", IDRange{UID: 0, GID: 5, Count: 4}, "never runs as root"},
		{"above 2^31", IDRange{UID: 1 << 31, GID: 1 << 31, Count: 1}, "signed 32-bit"},
		{"runs past 2^31", IDRange{UID: DefaultIDFirst + 1, GID: DefaultIDFirst, Count: DefaultIDCount}, "signed 32-bit"},
		{"shared range", IDRange{UID: 5000, GID: 5000, Count: 2, Shared: true}, "one pair"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate(%+v) = %v, want %q", tc.r, err, tc.want)
			}
		})
	}
}

// TestIDRangeAccess: a path is accepted for a range exactly when every id
// of it gets the access: the others' bits, and the owner's or group's
// bits where an id of the range owns the file.
func TestIDRangeAccess(t *testing.T) {
	if os.Geteuid() != 0 {
		testbin.Missing(t, "chown needs root")
	}
	base, err := os.MkdirTemp("", "toolgate-ids-") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	r := IDRange{UID: 70000, GID: 80000, Count: 8}
	for _, tc := range []struct {
		name     string
		mode     os.FileMode
		uid, gid int
		ok       bool
	}{
		{"open to others", 0o755, 0, 0, true},
		{"root only", 0o700, 0, 0, false},
		{"group only, a range gid", 0o770, 0, 80003, false},
		{"owned by a range uid, others in", 0o705, 70002, 0, true},
		{"owned by a range uid, it shut out", 0o075, 70002, 0, false},
		{"the pair of one range id owns it, group bits shut", 0o705, 70002, 80002, true},
		{"a range gid that is not the owner's pair, group bits shut", 0o705, 70002, 80003, false},
		{"owned by another account, others in", 0o701, 1000, 1000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := filepath.Join(base, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(d, tc.uid, tc.gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, tc.mode); err != nil {
				t.Fatal(err)
			}
			err := r.Access(d, 0o1)
			if (err == nil) != tc.ok {
				t.Errorf("Access(%s, mode %04o, %d:%d) = %v, want ok %v", d, tc.mode, tc.uid, tc.gid, err, tc.ok)
			}
		})
	}
	if err := (IDRange{}).Access("/root", 0o5); err != nil {
		t.Errorf("toolgate's own ids (zero range) are not checked: %v", err)
	}
}

// TestIDRangeAccounts: a range holding an account's uid, a group's gid or
// a subordinate range is found (serve refuses it); one clear of them is not.
func TestIDRangeAccounts(t *testing.T) {
	if got := (IDRange{UID: 0, GID: 0, Count: 2}).Accounts(); len(got) == 0 || !strings.Contains(got[0], "/etc/passwd:1 (root)") {
		t.Errorf("a range holding uid 0 finds %v, want /etc/passwd:1 (root)", got)
	}
	if got := DefaultIDRange().Accounts(); len(got) != 0 {
		t.Errorf("the default range finds %v on this host, want nothing", got)
	}
}

// BenchmarkIDs is what a sandbox's own ids add to its call: one Acquire
// (open, flock, two stats) and one Release (unlink, close).
func BenchmarkIDs(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("root only")
	}
	dir := filepath.Join("/run", "toolgate-bench-ids-"+strconv.Itoa(os.Getpid()))
	defer os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	old := IDLockDir
	IDLockDir = dir
	defer func() { IDLockDir = old }()
	ids, err := NewIDs(DefaultIDRange())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		id, err := ids.Acquire()
		if err != nil {
			b.Fatal(err)
		}
		id.Release()
	}
}
