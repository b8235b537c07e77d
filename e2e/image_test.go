//go:build e2e

package e2e

import (
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImageDoctor: `toolgate doctor` inside the container passes with the
// documented podman flags, and without each of them says which flag is
// missing.
func TestImageDoctor(t *testing.T) {
	onlyImage(t)
	for _, tc := range []struct {
		name string
		drop string // the --security-opt value left out
		exit int
		want []string
	}{
		{"documented flags", "", 0, []string{"[ok]   sandbox bwrap (chosen: --backend bwrap): bubblewrap"}},
		{"without the seccomp profile", "seccomp=", 1, []string{"[FAIL] sandbox bwrap", "Can't set hostname", "podman --security-opt seccomp=images/seccomp.json"}},
		{"without systempaths=unconfined", "systempaths=", 1, []string{"[FAIL] sandbox bwrap", "Can't mount proc", "podman --security-opt systempaths=unconfined"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv := []string{"run", "--rm", "--entrypoint", "/usr/local/bin/toolgate"}
			flags := podmanFlags()
			for i := 0; i < len(flags); i++ {
				if tc.drop != "" && flags[i] == "--security-opt" && strings.HasPrefix(flags[i+1], tc.drop) {
					i++
					continue
				}
				argv = append(argv, flags[i])
			}
			argv = append(argv, image, "doctor", "--sandbox-pids", "0", "--sandbox-memory", "0")
			out, err := exec.Command(podman, argv...).CombinedOutput()
			exit := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				exit = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("podman %v: %v", argv, err)
			}
			if exit != tc.exit {
				t.Errorf("doctor exit = %d, want %d\n%s", exit, tc.exit, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("doctor output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestImageContents: the image runs toolgate serve as a non-root user with
// the workspace and conf defaults, carries the OCI labels, and holds no
// compiler and no apt lists.
func TestImageContents(t *testing.T) {
	onlyImage(t)
	out, err := exec.Command(podman, "image", "inspect", "--format", "{{json .Config}}", image).Output()
	if err != nil {
		t.Fatalf("podman image inspect: %v", err)
	}
	var cfg struct {
		User       string
		Entrypoint []string
		Cmd        []string
		WorkingDir string
		Labels     map[string]string
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("image config %s: %v", out, err)
	}
	if cfg.User == "" || cfg.User == "root" || strings.HasPrefix(cfg.User, "0") {
		t.Errorf("image user = %q, want a non-root user", cfg.User)
	}
	if want := []string{"/usr/local/bin/toolgate", "serve"}; !slices.Equal(cfg.Entrypoint, want) {
		t.Errorf("entrypoint = %q, want %q", cfg.Entrypoint, want)
	}
	if i := slices.Index(cfg.Cmd, "--root"); i < 0 || i+1 >= len(cfg.Cmd) || cfg.Cmd[i+1] != "/workspace" {
		t.Errorf("cmd = %q, want --root /workspace", cfg.Cmd)
	}
	for _, l := range []string{"org.opencontainers.image.version", "org.opencontainers.image.source", "org.opencontainers.image.description"} {
		if cfg.Labels[l] == "" {
			t.Errorf("label %s missing (labels %v)", l, cfg.Labels)
		}
	}
	script := `for c in gcc cc go tcc clang; do command -v $c && echo "compiler: $c"; done
ls -A /var/lib/apt/lists | grep -v '^lock$' | grep -v '^partial$' | sed 's/^/apt list: /'
for c in bwrap runc git ctags /usr/local/bin/toolgate-shim; do command -v $c >/dev/null || echo "missing: $c"; done
id -u`
	out, err = exec.Command(podman, "run", "--rm", "--entrypoint", "/bin/sh", image, "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got == "0" || strings.Contains(got, "compiler:") || strings.Contains(got, "apt list:") || strings.Contains(got, "missing:") {
		t.Errorf("image contents:\n%s", got)
	}
}

// TestImageSelftest: `toolgate selftest` inside the container, with the
// documented flags, reports every guarantee of the bwrap sandbox held (the
// per-call memory limit is off in a container, so its case is skipped).
func TestImageSelftest(t *testing.T) {
	onlyImage(t)
	argv := append([]string{"run", "--rm", "--entrypoint", "/usr/local/bin/toolgate"}, podmanFlags()...)
	argv = append(argv, image, "selftest", "--short", "--sandbox-pids", "0", "--sandbox-memory", "0")
	out, err := exec.Command(podman, argv...).CombinedOutput()
	if err != nil {
		t.Fatalf("selftest in the container: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "selftest: every guarantee held") || strings.Contains(s, "[BROKEN]") {
		t.Errorf("selftest output:\n%s", s)
	}
	if n := strings.Count(s, "[held]"); n < 11 {
		t.Errorf("%d guarantees held, want all but the memory limit:\n%s", n, s)
	}
}
