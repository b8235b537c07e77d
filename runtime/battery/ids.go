package battery

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	rt "github.com/toolgate/toolgate/runtime"
)

// caseIDsApart: each sandbox runs as host ids of its own, and a host
// process with the uid of the previous call (a compromised service that
// has it, or what that call left) reaches nothing of the next one: it can
// neither signal it, read its environment, nor open its namespaces. As a
// control, the next call's own uid can (so the refusal is the uid's).
func caseIDsApart(ctx context.Context, e *Env) error {
	ids := e.Limits.IDs
	switch {
	case os.Geteuid() != 0:
		return fmt.Errorf("%w: toolgate is not root: every sandbox runs as its own uid, mapped inside", errSkip)
	case ids.Shared:
		return fmt.Errorf("%w: --sandbox-uid: every sandbox shares %s", errSkip, ids)
	}
	if e.isRunsc() {
		// gVisor: the tool is a process of the sandbox's own kernel, not
		// of the host; what shows its ids is the spec's user, seen inside.
		first, err := e.call(ctx, 20*time.Second, 4096, "id")
		if err != nil {
			return err
		}
		next, err := e.call(ctx, 20*time.Second, 4096, "id")
		if err != nil {
			return err
		}
		u1, u2 := insideUID(first.Output), insideUID(next.Output)
		if u1 < 0 || u2 < 0 || u1 == u2 || !ids.HasUID(uint32(u1)) || !ids.HasUID(uint32(u2)) {
			return fmt.Errorf("two calls ran as uids %d and %d, want two different uids of %s:\n%s%s", u1, u2, ids, clip(first.Output), clip(next.Output))
		}
		return nil
	}
	prev, err := e.hostIDsOfCall(ctx, "1")
	if err != nil {
		return err
	}
	// The next call, alive while the previous uid tries to reach it.
	type out struct {
		res rt.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := e.call(ctx, 20*time.Second, 4096, "sleep", "3")
		done <- out{res, err}
	}()
	pid, st := e.findCall("sleep\x003\x00", 10*time.Second)
	if pid == 0 {
		o := <-done
		return fmt.Errorf("the next call's process was not found on the host (%w):\n%s", o.err, clip(o.res.Output))
	}
	next := idsOf(st)
	if next[0] == prev[0] || next[1] == prev[1] || !ids.HasUID(uint32(next[0])) || !ids.HasGID(uint32(next[1])) {
		<-done
		return fmt.Errorf("the previous call ran as %d:%d, the next one as %d:%d: want ids of their own, from %s", prev[0], prev[1], next[0], next[1], ids)
	}
	attack, err := e.reach(ctx, pid, prev)
	if err != nil {
		<-done
		return err
	}
	control, err := e.reach(ctx, pid, next)
	o := <-done
	if err != nil {
		return err
	}
	if o.err != nil {
		return o.err
	}
	if err := want(attack, "signal: denied EPERM", "environ: denied EACCES", "ns/mnt: denied EACCES", "ns/user: denied EACCES", "ns/pid: denied EACCES"); err != nil {
		return fmt.Errorf("a host process with the previous call's uid %d reaches the next call: %w", prev[0], err)
	}
	if err := want(control, "signal: ok"); err != nil {
		return fmt.Errorf("control: the next call's own uid %d cannot signal it, so the check proves nothing: %w", next[0], err)
	}
	return nil
}

// hostIDsOfCall runs one call of the probe (sleep secs) and returns the
// host uid and gid its process had.
func (e *Env) hostIDsOfCall(ctx context.Context, secs string) ([2]int, error) {
	done := make(chan error, 1)
	go func() {
		_, err := e.call(ctx, 20*time.Second, 4096, "sleep", secs)
		done <- err
	}()
	pid, st := e.findCall("sleep\x00"+secs+"\x00", 10*time.Second)
	err := <-done
	if err != nil {
		return [2]int{}, err
	}
	if pid == 0 {
		return [2]int{}, fmt.Errorf("the call's process was not found on the host")
	}
	return idsOf(st), nil
}

// findCall finds the host process of this run whose command line holds
// argv (NUL-separated) and returns its pid and /proc status, or 0.
func (e *Env) findCall(argv string, within time.Duration) (int, string) {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, p := range e.alive() {
			cmd, _ := os.ReadFile("/proc/" + p + "/cmdline")
			if !strings.Contains(string(cmd), argv) || strings.Contains(string(cmd), "toolgate-shim") {
				continue
			}
			st, err := os.ReadFile("/proc/" + p + "/status")
			if err != nil {
				continue
			}
			pid, _ := strconv.Atoi(p)
			return pid, string(st)
		}
	}
	return 0, ""
}

// idsOf returns the real uid and gid of a /proc status.
func idsOf(status string) [2]int {
	var ids [2]int
	for l := range strings.SplitSeq(status, "\n") {
		for i, k := range []string{"Uid:", "Gid:"} {
			if f := strings.Fields(l); len(f) > 1 && f[0] == k {
				ids[i], _ = strconv.Atoi(f[1])
			}
		}
	}
	return ids
}

// insideUID reads the uid of the probe's "id" report, or -1.
func insideUID(out []byte) int {
	_, rest, ok := strings.Cut(string(out), "uid=")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(strings.Fields(rest)[0])
	if err != nil {
		return -1
	}
	return n
}

// reach runs the probe's reach mode on the host as ids (unprivileged, no
// supplementary group, the fixed environment) against pid.
func (e *Env) reach(ctx context.Context, pid int, ids [2]int) ([]byte, error) {
	args := append(append([]string(nil), e.Probe.Prefix...), "reach", strconv.Itoa(pid))
	cmd := exec.CommandContext(ctx, e.Probe.Path, args...) //nolint:gosec // the battery's own probe
	cmd.Env = rt.Env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(ids[0]), Gid: uint32(ids[1]), Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("the reach probe as %d:%d: %w: %s", ids[0], ids[1], err, clip(out))
	}
	return out, nil
}
