package runtime

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/testbin"

	"github.com/toolgate/toolgate/runtime/shim"
)

// TestShimEnterJoinsNewSessionKeyring: the enter shim gives what it execs
// (bwrap, which makes none) a new, empty, anonymous session keyring owned
// by the sandbox uid, never its caller's (issue 21: keyrings are not
// namespaced, and a shared one carries keys from call to call). The
// caller here is a thread that holds a named session keyring with a key,
// as toolgate does under systemd, a pam session or runc; the probe started
// directly from it reads the key, which proves the check can see one.
func TestShimEnterJoinsNewSessionKeyring(t *testing.T) {
	probe, shimBin := testbin.Probe(t), self(t)
	uids := []int{-1}
	if os.Geteuid() == 0 {
		uids = append(uids, SandboxUID)
	}
	type outcome struct {
		ring, key int
		direct    string
		entered   map[int]string
		err       error
	}
	got := make(chan outcome)
	go func() {
		// Never unlocked: the thread ends with this goroutine, and its
		// keyring with it.
		runtime.LockOSThread()
		var o outcome
		defer func() { got <- o }()
		o.ring, o.err = unix.KeyctlJoinSessionKeyring(fmt.Sprintf("toolgate-test-%d", os.Getpid()))
		if o.err != nil {
			return
		}
		if o.key, o.err = unix.AddKey("user", "toolgate-test-key", []byte("the caller's key"), unix.KEY_SPEC_SESSION_KEYRING); o.err != nil {
			return
		}
		run := func(path string, args ...string) string {
			cmd := exec.Command(path, args...)
			cmd.Env = Env
			cmd.SysProcAttr = processAttr(nil, nil)
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Sprintf("%v: %s", err, out)
			}
			return string(out)
		}
		o.direct = run(probe, "session-keyring", strconv.Itoa(o.key))
		o.entered = map[int]string{}
		for _, uid := range uids {
			spec := shim.Spec{Mode: shim.Enter, Path: probe, Argv: []string{probe, "session-keyring", strconv.Itoa(o.key)}}
			if uid >= 0 {
				spec.Drop = &shim.IDs{UID: uid, GID: uid}
			}
			o.entered[uid] = run(shimBin, spec.Args()...)
		}
	}()
	o := <-got
	if errors.Is(o.err, unix.ENOSYS) {
		testbin.Missing(t, "this kernel has no keyrings: %v", o.err)
	}
	if o.err != nil {
		t.Fatalf("a session keyring with a key for the caller: %v", o.err)
	}
	want := fmt.Sprintf("session keyring: %d keyring;%d;%d;", o.ring, os.Geteuid(), os.Getegid())
	if !strings.HasPrefix(o.direct, want) || !strings.Contains(o.direct, fmt.Sprintf("read key %d: ok \"the caller's key\"\n", o.key)) {
		t.Fatalf("the probe started directly does not see its caller's keyring and key, so the check proves nothing:\n%s", o.direct)
	}
	for _, uid := range uids {
		out, owner := o.entered[uid], uid
		if uid < 0 {
			owner = os.Geteuid()
		}
		m := regexp.MustCompile(`(?m)^session keyring: (\d+) keyring;(\d+);\d+;[0-9a-f]+;(.*)$`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("uid %d: through the enter shim, no session keyring reported:\n%s", uid, out)
			continue
		}
		if m[1] == strconv.Itoa(o.ring) || m[3] != "_ses" || m[2] != strconv.Itoa(owner) {
			t.Errorf("uid %d: through the enter shim, the session keyring is %s %q owned by %s; want a new anonymous one (_ses), not the caller's %d, owned by %d:\n%s",
				uid, m[1], m[3], m[2], o.ring, owner, out)
		}
		if !strings.Contains(out, fmt.Sprintf("read key %d: denied EACCES\n", o.key)) {
			t.Errorf("uid %d: through the enter shim, the caller's key is not refused:\n%s", uid, out)
		}
	}
}
