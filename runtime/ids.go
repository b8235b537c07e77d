package runtime

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/runtime/shim"
)

// IDRange is where the host ids of sandboxes come from when toolgate runs
// as root: Count pairs, uid UID+i with gid GID+i. Shared marks one pair
// that every sandbox uses at once (--sandbox-uid, for operators who need a
// fixed uid); otherwise each sandbox holds a pair of its own from the
// moment it is made (prepared ones included) until nothing of it can still
// run, so that concurrent, prepared and successive sandboxes, helpers and
// downstream servers are apart from each other and from every account.
type IDRange struct {
	UID, GID uint32
	Count    uint32
	Shared   bool
}

// The default range: the last 65536 ids below 2^31, far above where any
// distribution puts an account or a subordinate id range (useradd's
// SUB_UID_MAX is 600100000; the kubelet's user namespaces start at 65536
// and take 65536 a pod). Not above 2^31: bubblewrap writes the uid map with
// signed numbers ("setting up uid map: Invalid argument"), as do many
// tools that print or parse an id.
const (
	DefaultIDFirst = 1<<31 - DefaultIDCount
	DefaultIDCount = 1 << 16
	maxID          = 1<<31 - 1
)

// DefaultIDRange returns the default per-sandbox range.
func DefaultIDRange() IDRange {
	return IDRange{UID: DefaultIDFirst, GID: DefaultIDFirst, Count: DefaultIDCount}
}

// Validate reports a range that cannot be used.
func (r IDRange) Validate() error {
	switch {
	case r.Count == 0:
		return errors.New("sandbox id range: want at least one id")
	case r.Shared && r.Count != 1:
		return errors.New("sandbox id range: a shared pair is one pair")
	case r.UID == 0 || r.GID == 0:
		return fmt.Errorf("sandbox uid %d gid %d: a sandbox never runs as root (0)", r.UID, r.GID)
	case uint64(r.UID)+uint64(r.Count)-1 > maxID || uint64(r.GID)+uint64(r.Count)-1 > maxID:
		return fmt.Errorf("sandbox ids %d:%d: past %d (bubblewrap and many tools read ids as signed 32-bit numbers)", r.UID, r.Count, maxID)
	}
	return nil
}

// String is the range as the flags write it.
func (r IDRange) String() string {
	switch r.Count {
	case 0:
		return "toolgate's own ids"
	case 1:
		return fmt.Sprintf("uid %d gid %d", r.UID, r.GID)
	}
	return fmt.Sprintf("uids %d-%d, gids %d-%d", r.UID, r.UID+r.Count-1, r.GID, r.GID+r.Count-1)
}

// HasUID and HasGID report whether the range holds the id.
func (r IDRange) HasUID(id uint32) bool { return id >= r.UID && id-r.UID < r.Count }
func (r IDRange) HasGID(id uint32) bool { return id >= r.GID && id-r.GID < r.Count }

// IDLockDir is where toolgate servers on one host claim ids: a lock file per
// id held (flock) by the server whose sandbox has it, so that two servers
// with the same range never hand out one id at once.
var IDLockDir = "/run/toolgate/sandbox-ids"

// IDs hands out the host ids of sandboxes. A nil *IDs is toolgate's own ids
// (it is not root): every sandbox runs as toolgate's uid, mapped inside.
type IDs struct {
	r   IDRange
	dir string

	mu    sync.Mutex
	next  uint32 // offset of the next id to try
	inUse map[uint32]bool
}

// NewIDs returns the allocator of r, or nil when toolgate is not root (its
// sandboxes then run as its own ids).
func NewIDs(r IDRange) (*IDs, error) {
	if os.Geteuid() != 0 {
		return nil, nil //nolint:nilnil // not root: a nil *IDs is toolgate's own ids
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	ids := &IDs{r: r, dir: IDLockDir, inUse: map[uint32]bool{}}
	if !r.Shared {
		if err := os.MkdirAll(ids.dir, 0o700); err != nil {
			return nil, fmt.Errorf("sandbox ids: %w", err)
		}
		if err := checkLockDir(ids.dir); err != nil {
			return nil, err
		}
		// Start at a random place, so that a restarted server does not
		// hand out again, first, the ids its last sandboxes had.
		var b [4]byte
		_, _ = rand.Read(b[:])
		ids.next = binary.LittleEndian.Uint32(b[:]) % r.Count
	}
	return ids, nil
}

// checkLockDir refuses a lock dir another user could change: a lock file
// someone else can replace would let two sandboxes share an id.
func checkLockDir(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Lstat(d)
		if err != nil {
			return fmt.Errorf("sandbox ids: %w", err)
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if st == nil || st.Uid != 0 || fi.Mode()&os.ModeSymlink != 0 ||
			(fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0) || (d == dir && fi.Mode().Perm()&0o077 != 0) {
			return fmt.Errorf("sandbox ids: %s (mode %v) must be a root-owned directory no one else can write", d, fi.Mode())
		}
		if d == "/" {
			return nil
		}
	}
}

// Range is the range the ids come from.
func (ids *IDs) Range() IDRange {
	if ids == nil {
		return IDRange{}
	}
	return ids.r
}

// SandboxID is the host uid and gid of one sandbox (-1 each: toolgate's
// own). Release it once nothing of the sandbox can still run.
type SandboxID struct {
	UID, GID int
	release  func()
}

// ownIDs is toolgate's own ids.
var ownIDs = SandboxID{UID: -1, GID: -1}

// Drop is what the enter shim drops to for id: nil for toolgate's own.
func (id SandboxID) Drop() *shim.IDs {
	if id.UID < 0 {
		return nil
	}
	return &shim.IDs{UID: id.UID, GID: id.GID}
}

// Release gives the ids back; it may be called more than once.
func (id SandboxID) Release() {
	if id.release != nil {
		id.release()
	}
}

// Acquire returns ids that no other sandbox of any toolgate server on this
// host holds (but for a shared pair): the next free one after the last
// handed out, so that an id comes back only after every other id of the
// range was used.
func (ids *IDs) Acquire() (SandboxID, error) {
	if ids == nil {
		return ownIDs, nil
	}
	if ids.r.Shared {
		return SandboxID{UID: int(ids.r.UID), GID: int(ids.r.GID)}, nil
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	for range ids.r.Count {
		off := ids.next
		ids.next = (ids.next + 1) % ids.r.Count
		if ids.inUse[off] {
			continue
		}
		lock, err := ids.lock(off)
		if errors.Is(err, unix.EWOULDBLOCK) {
			continue // another server's sandbox has it
		}
		if err != nil {
			return SandboxID{}, err
		}
		ids.inUse[off] = true
		var once sync.Once
		return SandboxID{
			UID: int(ids.r.UID + off), GID: int(ids.r.GID + off),
			release: func() {
				once.Do(func() {
					// Unlinked while locked: a server that opened the
					// same name meanwhile finds its file gone and retries.
					_ = os.Remove(lock.Name())
					lock.Close()
					ids.mu.Lock()
					delete(ids.inUse, off)
					ids.mu.Unlock()
				})
			},
		}, nil
	}
	return SandboxID{}, fmt.Errorf("sandbox ids: all %d of %s are in use", ids.r.Count, ids.r)
}

// lock claims id offset off for this process: its lock file, created if
// need be, locked without waiting, and still the file of that name.
func (ids *IDs) lock(off uint32) (*os.File, error) {
	p := filepath.Join(ids.dir, strconv.FormatUint(uint64(ids.r.UID+off), 10))
	for {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, fmt.Errorf("sandbox ids: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			return nil, err
		}
		var held, named unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(p, &named) == nil && held.Ino == named.Ino && held.Dev == named.Dev {
			return f, nil
		}
		f.Close() // released and unlinked meanwhile: take the new file
	}
}

// Access checks that every sandbox can reach p with want (4 read, 1
// execute/search on p; search on every ancestor), whatever ids of r it
// has, so the check is exact for each (an id of the range that owns a
// file gets the owner's bits). A zero range checks nothing (toolgate's
// own ids, when it is not root).
func (r IDRange) Access(p string, want uint32) error {
	if r.Count == 0 {
		return nil
	}
	if r.Count == 1 {
		return canAccess(p, int(r.UID), int(r.GID), want)
	}
	// One id of the range that owns nothing (if the range is wider than
	// the files' owners): the others' bits.
	return canAccessBy(p, want, func(st *syscall.Stat_t, perm, need uint32) bool {
		if !bitsAllow(perm, need) {
			return false
		}
		if r.HasUID(st.Uid) && !bitsAllow(perm>>6, need) {
			return false
		}
		ownerToo := r.HasUID(st.Uid) && st.Uid-r.UID == st.Gid-r.GID // that sandbox gets the owner's bits
		if r.HasGID(st.Gid) && !ownerToo && !bitsAllow(perm>>3, need) {
			return false
		}
		return true
	})
}

func bitsAllow(bits, need uint32) bool { return bits&need == need }

// Accounts returns the accounts, groups and subordinate id ranges of this
// host that fall in r: a range that holds one is refused, since a process
// of that account could reach the sandboxes of its id.
func (r IDRange) Accounts() []string {
	var found []string
	scan := func(path string, field int, sub bool) {
		f, err := os.Open(path)
		if err != nil {
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			parts := strings.Split(sc.Text(), ":")
			if len(parts) <= field {
				continue
			}
			start, err := strconv.ParseUint(parts[field], 10, 32)
			if err != nil {
				continue
			}
			count := uint64(1)
			if sub {
				if count, err = strconv.ParseUint(parts[field+1], 10, 32); err != nil || count == 0 {
					continue
				}
			}
			lo, hi := uint64(r.UID), uint64(r.UID)+uint64(r.Count)
			if path == "/etc/group" || path == "/etc/subgid" {
				lo, hi = uint64(r.GID), uint64(r.GID)+uint64(r.Count)
			}
			if start < hi && start+count > lo {
				found = append(found, fmt.Sprintf("%s:%d (%s)", path, n, parts[0]))
			}
		}
	}
	scan("/etc/passwd", 2, false)
	scan("/etc/group", 2, false)
	scan("/etc/subuid", 1, true)
	scan("/etc/subgid", 1, true)
	return found
}
