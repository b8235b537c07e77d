package conf

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/internal/testbin"
)

// loadAsEnv makes the test binary load the tools.conf it names and print
// the outcome as JSON, instead of running tests: how TestUnreadableConf
// loads a conf as another user.
const loadAsEnv = "TOOLGATE_CONF_TEST_LOAD"

func TestMain(m *testing.M) {
	if p := os.Getenv(loadAsEnv); p != "" {
		c := Load(p, Options{})
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"state": c.State, "reason": c.Reason, "tools": len(c.Tools)})
		os.Exit(0)
	}
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// TestUnreadableConf: a tools.conf toolgate cannot read is absent, with
// the reason (built-ins only), never loaded or refused. As root every
// file reads, so the load runs in a child process as uid 65534 on a conf
// only root can read; as another user, on a 0000 file of its own.
func TestUnreadableConf(t *testing.T) {
	f := newFixture(t)
	text := "tool lint " + f.exe + " read 1 1 off " + f.dir + " --\n"
	dir := testbin.Dir(t) // 0755: the child can reach the file, not read it
	p := filepath.Join(dir, "tools.conf")
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		// The test binary, where uid 65534 can execute it.
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		exe := filepath.Join(dir, "conf.test")
		copyFile(t, self, exe, 0o755)
		cmd = exec.Command(exe)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	} else {
		if err := os.WriteFile(p, []byte(text), 0o000); err != nil {
			t.Fatal(err)
		}
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(self)
	}
	cmd.Env = []string{loadAsEnv + "=" + p}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("load in a child process: %v %s", err, out)
	}
	var got struct {
		State  State  `json:"state"`
		Reason string `json:"reason"`
		Tools  int    `json:"tools"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	if got.State != StateAbsent || got.Tools != 0 || !strings.Contains(got.Reason, "unreadable: ") || !strings.Contains(got.Reason, "permission denied") {
		t.Errorf("Load of a conf the user cannot read = %+v, want absent (unreadable: permission denied)", got)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
