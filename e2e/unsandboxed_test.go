//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/testbin"
)

// maskEnv makes the e2e test binary a launcher: it enters a mount
// namespace of its own, binds each SRC over DST ("DST=SRC;..."), and execs
// its arguments, so that the toolgate started there sees a backend binary
// replaced or gone while the host's stays as it is.
const maskEnv = "TOOLGATE_E2E_MASK"

// maskAndExec is the launcher; it never returns.
func maskAndExec(spec string) {
	goruntime.LockOSThread() // the namespace is this thread's, and exec keeps it
	die := func(err error) {
		fmt.Fprintln(os.Stderr, "e2e mask:", err)
		os.Exit(125)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		die(err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		die(err)
	}
	for m := range strings.SplitSeq(spec, ";") {
		dst, src, _ := strings.Cut(m, "=")
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			die(fmt.Errorf("bind %s over %s: %w", src, dst, err))
		}
	}
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, maskEnv+"=") {
			env = append(env, e)
		}
	}
	die(syscall.Exec(os.Args[1], os.Args[1:], env))
}

// startMasked starts `toolgate serve` with conf and extra flags in a mount
// namespace where each DST of masks is replaced by its SRC, and
// initializes a session.
func startMasked(t *testing.T, masks map[string]string, conf string, extra ...string) *client.Client {
	t.Helper()
	var spec []string
	for dst, src := range masks {
		spec = append(spec, dst+"="+src)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{binary, "serve", "--conf", conf}, extra...)
	c, err := client.NewStdioMCPClient(self, []string{maskEnv + "=" + strings.Join(spec, ";")}, args...)
	if err != nil {
		t.Fatalf("start toolgate: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = "2025-06-18"
	req.Params.ClientInfo = mcp.Implementation{Name: "toolgate-e2e", Version: "1"}
	if _, err := c.Initialize(ctx, req); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return c
}

// TestNeverUnsandboxed: with the sandbox backend unusable in the real
// binary — its self-test fails (a bwrap, or an OCI runtime, that exits 1)
// or its binary is missing (/dev/null over it) — a test-class call answers
// isError saying the backend is unavailable, and nothing ran: the tool
// would have left a file on the host. A read-class tool of the same conf,
// the same script, leaves its file: the evidence would be seen.
func TestNeverUnsandboxed(t *testing.T) {
	onlyBinary(t) // the masks are mount namespaces of the host
	if os.Geteuid() != 0 {
		testbin.Missing(t, "masking a backend binary needs root (a mount namespace), uid %d", os.Geteuid())
	}
	root := testbin.Dir(t)
	failing := filepath.Join(root, "failing")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\necho 'fake backend binary: failing on purpose' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		masks  map[string]string
		flags  []string
		reason string // in checkpoint_status and the refusal
	}{
		{"bwrap self-test fails", map[string]string{"/usr/bin/bwrap": failing}, nil, "fake backend binary: failing on purpose"},
		{"bwrap missing", map[string]string{"/usr/bin/bwrap": "/dev/null"}, nil, "bubblewrap (bwrap) not found"},
		{"oci runtime fails", map[string]string{"/usr/sbin/runc": failing}, []string{"--backend", "oci"}, "fake backend binary: failing on purpose"},
		{"oci runtime missing", map[string]string{"/usr/sbin/runc": "/dev/null"}, []string{"--backend", "oci"}, "runc not found in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := testbin.Dir(t)
			evidence := filepath.Join(dir, "evidence")
			if err := os.Mkdir(evidence, 0o777); err != nil {
				t.Fatal(err)
			}
			os.Chmod(evidence, 0o777)
			tool := func(name string) string {
				p := filepath.Join(dir, name)
				script := fmt.Sprintf("#!/bin/sh\necho ran > %s/%s\necho %s ran\n", evidence, name, name)
				if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
					t.Fatal(err)
				}
				return p
			}
			conf := writeConf(t, fmt.Sprintf("tool boxed %s test 20 4096 on %s --\ntool direct %s read 20 4096 off %s --\n",
				tool("boxed"), dir, tool("direct"), dir))
			flags := append([]string{"--oci-run-dir", filepath.Join(t.TempDir(), "oci")}, tc.flags...)
			c := startMasked(t, tc.masks, conf, flags...)

			res, err := call(t, c, "boxed", nil)
			if err != nil {
				t.Fatalf("boxed: %v", err)
			}
			txt := text(res)
			if !res.IsError || res.StructuredContent != nil || !strings.Contains(txt, "is a test-class tool and runs only sandboxed, but the") ||
				!strings.Contains(txt, "sandbox backend is unavailable") || !strings.Contains(txt, "It is never run unsandboxed") || !strings.Contains(txt, tc.reason) {
				t.Errorf("boxed = %q (isError %v), want the refusal naming %q", txt, res.IsError, tc.reason)
			}
			if _, err := os.Stat(filepath.Join(evidence, "boxed")); !os.IsNotExist(err) {
				t.Errorf("the test-class tool ran: %s exists (%v)", filepath.Join(evidence, "boxed"), err)
			}

			res, err = call(t, c, "direct", nil)
			if err != nil || res.IsError || !strings.HasPrefix(text(res), "direct ran\n") {
				t.Fatalf("direct: %v %q", err, text(res))
			}
			if _, err := os.Stat(filepath.Join(evidence, "direct")); err != nil {
				t.Errorf("the read-class tool left no evidence, so none would be seen: %v", err)
			}

			res, err = call(t, c, "checkpoint_status", nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(res.StructuredContent)
			var st struct {
				Sandbox struct {
					Available bool   `json:"available"`
					Reason    string `json:"reason"`
				} `json:"sandbox"`
			}
			if json.Unmarshal(b, &st) != nil || st.Sandbox.Available || !strings.Contains(st.Sandbox.Reason, tc.reason) {
				t.Errorf("checkpoint_status sandbox = %s, want unavailable with %q", b, tc.reason)
			}
			if out, err := exec.Command("/usr/bin/bwrap", "--version").CombinedOutput(); err != nil {
				t.Errorf("the host's bwrap changed: %v %s", err, out)
			}
		})
	}
}
