package battery

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// KeyringVar tells a case what session keyring the server runs with:
// "KEY:RING", the serial of a user key (description KeyDesc, the secret as
// its payload) in the server's session keyring RING, made by
// ReexecWithSecret (KEY is 0 where add_key is refused, as podman's default
// seccomp profile refuses it while it allows keyctl); or "unavailable:
// WHY".
const KeyringVar = "TOOLGATE_BATTERY_KEYRING"

// KeyDesc is the description of the key in the server's session keyring.
const KeyDesc = "toolgate-battery-key"

// newSessionKeyring makes the calling thread's session keyring a new one
// of its own, named after tag, holding a user key KeyDesc whose payload is
// secret (when add_key is allowed), and returns KeyringVar's value. It stands for the session
// keyring toolgate has under systemd, a pam session or a container
// runtime (runc, crun). The caller holds the thread and execs from it: the
// session keyring belongs to a thread, and execve keeps the calling one's.
func newSessionKeyring(tag, secret string) string {
	ring, err := unix.KeyctlJoinSessionKeyring("toolgate-battery-" + tag)
	if err != nil {
		return "unavailable: join a session keyring: " + err.Error()
	}
	key, err := unix.AddKey("user", KeyDesc, []byte(secret), unix.KEY_SPEC_SESSION_KEYRING)
	if err != nil {
		key = 0 // the keyring alone, which a sandbox must not reach either
	}
	return strconv.Itoa(key) + ":" + strconv.Itoa(ring)
}

// serverKeyring returns the server's key (0: none) and session keyring
// (KeyringVar), after checking that the server holds and reads them: else
// a case would prove nothing.
func serverKeyring() (key, ring int, err error) {
	v := os.Getenv(KeyringVar)
	if v == "" {
		return 0, 0, fmt.Errorf("%w: the server was not started with a session keyring of its own (%s, ReexecWithSecret)", errSkip, KeyringVar)
	}
	if why, ok := strings.CutPrefix(v, "unavailable: "); ok {
		return 0, 0, fmt.Errorf("%w: no session keyring could be made here: %s", errSkip, why)
	}
	k, r, _ := strings.Cut(v, ":")
	key, err1 := strconv.Atoi(k)
	ring, err2 := strconv.Atoi(r)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("bad %s %q: %w", KeyringVar, v, err)
	}
	got, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: the server's session keyring: %w", errSkip, err)
	}
	if got != ring {
		return 0, 0, fmt.Errorf("%w: the server's session keyring is %d, not the battery's %d", errSkip, got, ring)
	}
	if key == 0 {
		return 0, ring, nil
	}
	buf := make([]byte, 256)
	n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, key, buf, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: the server cannot read its own key %d: %w", errSkip, key, err)
	}
	if string(buf[:min(n, len(buf))]) != os.Getenv(SecretVar) {
		return 0, 0, fmt.Errorf("%w: the server's key %d does not hold the secret", errSkip, key)
	}
	return key, ring, nil
}

// keyringLinks returns the serials of the keys linked into ring.
func keyringLinks(ring int) ([]int, error) {
	buf := make([]byte, 4096)
	n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, ring, buf, 0)
	if err != nil {
		return nil, err
	}
	var out []int
	for b := buf[:min(n, len(buf))]; len(b) >= 4; b = b[4:] {
		out = append(out, int(int32(binary.NativeEndian.Uint32(b))))
	}
	return out, nil
}

// keyringUsage is the reference count /proc/keys gives keyring ring: one
// for each set of credentials (each process) that has it as its session
// keyring, and one for each link to it.
func keyringUsage(ring int) (int, error) {
	b, err := os.ReadFile("/proc/keys")
	if err != nil {
		return 0, err
	}
	id := fmt.Sprintf("%08x", ring)
	for l := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == id {
			return strconv.Atoi(f[2])
		}
	}
	return 0, fmt.Errorf("keyring %s is not in /proc/keys", id)
}

// settledUsage is keyringUsage once it has stopped falling (for at most a
// second): the processes of an earlier call hold their references until
// the kernel frees their credentials, a grace period after they exit.
func settledUsage(ring int) (int, error) {
	n, err := keyringUsage(ring)
	for range 20 {
		if err != nil {
			return 0, err
		}
		time.Sleep(50 * time.Millisecond)
		m, err2 := keyringUsage(ring)
		if err2 == nil && m == n {
			break
		}
		n, err = m, err2
	}
	return n, err
}

// keyringCall is what the keyring case's call returned.
type keyringCall struct {
	out []byte
	err error
}

func caseKeyring(ctx context.Context, e *Env) error {
	key, ring, err := serverKeyring()
	if err != nil {
		return err
	}
	before, err := settledUsage(ring)
	if err != nil {
		return fmt.Errorf("%w: %w", errSkip, err)
	}
	// Under bwrap the probe starts keyringChildren processes that, with
	// it, hold the sandbox for a second, so that the server's keyring can
	// be looked at while they live (watchKeyring).
	args := []string{"keyring", strconv.Itoa(key), strconv.Itoa(ring), KeyDesc}
	watch := strings.HasPrefix(e.Backend, "bwrap")
	if watch {
		args = append(args, strconv.Itoa(keyringChildren), "1000")
	}
	done := make(chan keyringCall, 1)
	go func() {
		res, err := e.call(ctx, 20*time.Second, 4096, args...)
		done <- keyringCall{res.Output, err}
	}()
	var o keyringCall
	var shared error
	if watch {
		o, shared = e.watchKeyring(ring, before, done)
	} else {
		o = <-done
	}
	if o.err != nil {
		return o.err
	}
	var errs []error
	if strings.Contains(string(o.out), os.Getenv(SecretVar)) {
		errs = append(errs, errors.New("the sandbox read the key in the server's session keyring"))
	}
	// Refused by the seccomp filter with EPERM, as moby's profile refuses
	// them (gVisor's Sentry, which applies the filter, answers EPERM too).
	for _, l := range []string{
		"keyctl session keyring", "keyctl read", "keyctl search", "request_key", "add_key keyring",
		"keyctl process keyring", "keyctl link into the session keyring", "keyctl link into the server's keyring",
	} {
		if !strings.Contains(string(o.out), l+": denied EPERM\n") {
			errs = append(errs, fmt.Errorf("%s was not refused with EPERM", l))
		}
	}
	// /proc/keys: masked (empty under runc and crun, unreadable under
	// bwrap), absent under runsc.
	if !regexp.MustCompile(`(?m)^/proc/keys: (\d+ lines, key listed: false, keyring listed: false|denied EACCES|denied ENOENT)$`).Match(o.out) {
		errs = append(errs, errors.New("/proc/keys lists the server's key or keyring, or was not read"))
	}
	wantLinks := []int{key}
	if key == 0 {
		wantLinks = nil
	}
	links, err := keyringLinks(ring)
	if err != nil {
		errs = append(errs, fmt.Errorf("the server's session keyring cannot be read: %w", err))
	} else if !slices.Equal(links, wantLinks) {
		errs = append(errs, fmt.Errorf("the server's session keyring holds %v, want %v: the sandbox linked something into it", links, wantLinks))
	}
	if shared != nil {
		errs = append(errs, shared)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w\n%s", errors.Join(errs...), clip(o.out))
	}
	return nil
}

// keyringChildren is how many processes the keyring case's probe starts
// in its sandbox: each would hold a reference to the server's session
// keyring if the sandbox shared it, many more than the references that
// the server's earlier children (a runtime's processes being torn down,
// credentials the kernel frees after a grace period) drop meanwhile.
const keyringChildren = 8

// watchKeyring looks at the server's session keyring while the keyring
// call's probe and its children run, and returns the call's outcome with
// an error when the sandbox's processes hold the keyring: its reference
// count (one or two per process whose session keyring it is) stays above
// what it was before the call. This sees the keyring itself, whatever the
// seccomp filter refuses. It applies to bwrap, whose sandbox toolgate
// starts itself (through the enter shim, which joins a new keyring before
// it execs bwrap); an OCI runtime's host processes (runc run, runsc's
// Sentry) are toolgate's children and keep its keyring, and the runtime
// gives the container a new one. The least count seen counts: a sandbox
// being prepared beside it (a pool) holds the keyring for the moment
// before its enter shim joins a new one.
func (e *Env) watchKeyring(ring, before int, done <-chan keyringCall) (keyringCall, error) {
	for e.probes("keyring-child") < keyringChildren {
		select {
		case o := <-done:
			return o, errors.New("the keyring call ended before the server's keyring could be looked at while its processes ran")
		case <-time.After(10 * time.Millisecond):
		}
	}
	least := -1
	for range 10 {
		if n, err := keyringUsage(ring); err == nil && (least < 0 || n < least) {
			least = n
		}
		time.Sleep(20 * time.Millisecond)
	}
	o := <-done
	if least > before {
		return o, fmt.Errorf("while the sandbox's %d processes ran, the server's session keyring had %d references (%d before the call): the sandbox shares it", keyringChildren+1, least, before)
	}
	return o, nil
}

// probes counts the probe processes of this battery run that run in mode
// (the probe's own processes, not the shims or bwrap before them; the
// probe starts its children as /proc/self/exe).
func (e *Env) probes(mode string) int {
	want := append(slices.Clone(e.Probe.Prefix), mode)
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, en := range entries {
		if _, err := strconv.Atoi(en.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + en.Name() + "/cmdline")
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if len(argv) > len(want)+1 && (argv[0] == e.Probe.Path || argv[0] == "/proc/self/exe") &&
			slices.Equal(argv[1:len(want)+1], want) && argv[len(argv)-1] == e.tag {
			n++
		}
	}
	return n
}
