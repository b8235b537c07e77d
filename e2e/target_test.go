//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/testbin"
)

// The suite runs against one target per run: the toolgate binary built by
// TestMain over stdio (the default), or the appliance image under
// `podman run -i --rm` when TOOLGATE_E2E_IMAGE names it (scripts/e2e.sh runs
// both). The tests are the same; only how toolgate is started differs.
const imageEnv = "TOOLGATE_E2E_IMAGE"

// imageConfPath is where the image reads tools.conf: the seed default.
const imageConfPath = "/etc/saphira/mcp/tools.conf"

var (
	// binary is the built toolgate (binary target).
	binary string
	// image is the image under test, "" for the binary target.
	image string
	// podman is podman's path (image target).
	podman string
	// imageCmd is the image's CMD: the serve flags it runs with, repeated
	// before a test's own flags (arguments replace CMD).
	imageCmd []string
	// seccompProfile is images/seccomp.json of this checkout.
	seccompProfile string
	// skipReason is set when the chosen target cannot run here.
	skipReason string
)

// PodmanFlags are the privileges the image needs to run its bwrap sandboxes,
// exactly as docs/deploy.md documents them ("Run it"), with the
// profile path of this checkout. Nothing else is added: the container runs
// as the image's non-root user with podman's default capabilities.
func podmanFlags() []string {
	return []string{
		"--security-opt", "systempaths=unconfined",
		"--security-opt", "seccomp=" + seccompProfile,
		"--pids-limit", "1024",
		"--memory", "2g",
	}
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(maskEnv); spec != "" {
		maskAndExec(spec) // a launcher of TestNeverUnsandboxed, not a test run
	}
	image = os.Getenv(imageEnv)
	var code int
	if image != "" {
		code = mainImage(m)
	} else {
		code = mainBinary(m)
	}
	testbin.Cleanup()
	os.Exit(code)
}

func mainBinary(m *testing.M) int {
	dir, err := os.MkdirTemp("", "toolgate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	binary = filepath.Join(dir, "toolgate")
	// toolgate finds toolgate-shim next to itself.
	for _, b := range [][]string{
		{"build", "-tags", "seccomp", "-o", binary, "../cmd/toolgate"},
		{"build", "-o", filepath.Join(dir, "toolgate-shim"), "../cmd/toolgate-shim"},
	} {
		build := exec.Command("go", b...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build:", err)
			return 1
		}
	}
	fmt.Fprintln(os.Stderr, "e2e target: the toolgate binary over stdio")
	return m.Run()
}

func mainImage(m *testing.M) int {
	var err error
	seccompProfile, err = filepath.Abs("../images/seccomp.json")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	podman, err = exec.LookPath("podman")
	switch {
	case err != nil:
		skipReason = fmt.Sprintf("%s=%s but podman is not installed (%v): install it (scripts/image.sh does)", imageEnv, image, err)
	case exec.Command(podman, "image", "exists", image).Run() != nil:
		skipReason = fmt.Sprintf("%s=%s but the image does not exist: build it with scripts/image.sh", imageEnv, image)
	default:
		out, err := exec.Command(podman, "image", "inspect", "--format", "{{json .Config.Cmd}}", image).Output()
		if err == nil {
			err = json.Unmarshal(out, &imageCmd)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "read the CMD of %s: %v\n", image, err)
			return 1
		}
	}
	fmt.Fprintf(os.Stderr, "e2e target: the image %s under podman run -i --rm (CMD %q, CONTAINERS_CONF=%q)\n", image, imageCmd, os.Getenv("CONTAINERS_CONF"))
	return m.Run()
}

// requireTarget skips (loudly) when the chosen target cannot run here, and
// fails instead when TOOLGATE_REQUIRE_ALL=1.
func requireTarget(t *testing.T) {
	t.Helper()
	if skipReason == "" {
		return
	}
	testbin.Missing(t, "%s", skipReason)
}

// onlyBinary skips a test that watches host processes and cgroups of the
// server directly: it runs in the binary pass.
func onlyBinary(t *testing.T) {
	t.Helper()
	if image != "" {
		t.Skipf("watches the server as a host process: runs against the binary target (this run: image %s)", image)
	}
}

// onlyImage skips a test of the image itself in the binary pass.
func onlyImage(t *testing.T) {
	t.Helper()
	if image == "" {
		t.Skipf("tests the image: set %s (scripts/e2e.sh does)", imageEnv)
	}
	requireTarget(t)
}

// server is one toolgate serving MCP on stdio, as the test starts it.
type server struct {
	// argv starts it.
	argv []string
	// name is the container's name (image target).
	name string
}

// serveCmd returns how to start `toolgate serve` with conf as its
// tools.conf and extra serve flags. For the image, conf is mounted at the
// seed default path and every tool's exe dir (read-only) and dir below the
// temp dir are mounted at their own paths, so that the tools the conf names
// exist inside the container; the container is removed when the test ends.
func serveCmd(t *testing.T, conf string, extra ...string) server {
	t.Helper()
	requireTarget(t)
	if image == "" {
		return server{argv: append([]string{binary, "serve", "--conf", conf}, extra...)}
	}
	name := fmt.Sprintf("toolgate-e2e-%08x", rand.Uint32())
	argv := []string{podman, "run", "-i", "--rm", "--name", name}
	argv = append(argv, podmanFlags()...)
	argv = append(argv, mounts(t, conf)...)
	argv = append(argv, image)
	if len(extra) > 0 {
		argv = append(append(argv, imageCmd...), extra...)
	}
	t.Cleanup(func() { removeContainer(name) })
	return server{argv: argv, name: name}
}

// toolgateCmd returns a command running `toolgate ARGS...` (not serve) with
// conf as its tools.conf.
func toolgateCmd(t *testing.T, conf string, args ...string) *exec.Cmd {
	t.Helper()
	requireTarget(t)
	if image == "" {
		return exec.Command(binary, append(args, "--conf", conf)...)
	}
	argv := []string{"run", "--rm", "--entrypoint", "/usr/local/bin/toolgate"}
	argv = append(argv, podmanFlags()...)
	argv = append(argv, mounts(t, conf)...)
	argv = append(argv, image)
	return exec.Command(podman, append(argv, args...)...)
}

// mounts returns podman's -v flags for conf: the file at the seed default
// path, and the tools' exe dirs and dirs that lie below the temp dir (the
// test's own; anything else, like /usr/bin, is the image's).
func mounts(t *testing.T, conf string) []string {
	t.Helper()
	if err := os.Chmod(conf, 0o644); err != nil { // the image's user reads it
		t.Fatal(err)
	}
	text, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"-v", conf + ":" + imageConfPath + ":ro"}
	seen := map[string]bool{}
	add := func(p, mode string) {
		if !strings.HasPrefix(p, os.TempDir()+"/") || seen[p] {
			return
		}
		seen[p] = true
		out = append(out, "-v", p+":"+p+":"+mode)
	}
	for l := range strings.SplitSeq(string(text), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 || f[0] != "tool" {
			continue
		}
		add(filepath.Dir(f[2]), "ro")
		add(f[7], "rw")
	}
	return out
}

func removeContainer(name string) {
	exec.Command(podman, "rm", "--force", "--ignore", "--time", "0", name).Run()
}

// containerPID returns the host pid of the container's first process.
func containerPID(t *testing.T, name string) int {
	t.Helper()
	out, err := exec.Command(podman, "inspect", "--format", "{{.State.Pid}}", name).Output()
	if err != nil {
		t.Fatalf("podman inspect %s: %v", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 0 {
		t.Fatalf("podman inspect %s: pid %q", name, out)
	}
	return pid
}

// containerGone reports whether podman knows no container of that name
// (running or stopped).
func containerGone(t *testing.T, name string) bool {
	t.Helper()
	out, err := exec.Command(podman, "ps", "--all", "--quiet", "--filter", "name=^"+name+"$").Output()
	if err != nil {
		t.Fatalf("podman ps: %v", err)
	}
	return strings.TrimSpace(string(out)) == ""
}

// listenInNetns opens a TCP listener on addr inside the network namespace
// of pid (the appliance container's), so that the container can reach it
// on its own loopback while no packet ever leaves the machine. It needs
// root (setns into a namespace the host's root owns).
func listenInNetns(t *testing.T, pid int, addr string) net.Listener {
	t.Helper()
	if os.Geteuid() != 0 {
		testbin.Missing(t, "joining the container's network namespace needs root (uid %d)", os.Geteuid())
	}
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, so no other
		// goroutine ever runs in the container's namespace.
		goruntime.LockOSThread()
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns into the net namespace of pid %d: %w", pid, err)}
			return
		}
		l, err := net.Listen("tcp", addr)
		ch <- result{l, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("listen in the container's network namespace: %v", r.err)
	}
	t.Cleanup(func() { r.l.Close() })
	go func() {
		for {
			c, err := r.l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return r.l
}

// waitFor polls cond every 50 ms until it holds or d passed.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	if !waitUntil(d, cond) {
		t.Fatalf("condition not met within %s", d)
	}
}

// waitUntil polls cond every 50 ms until it holds (true) or d passed.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}
