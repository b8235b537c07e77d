package oci

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/toolgate/toolgate/bundle"
	rt "github.com/toolgate/toolgate/runtime"
)

// timingCalls is how many calls each timing takes the median of.
const timingCalls = 50

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// TestTimings measures the per-call cost of /usr/bin/true through the
// Runner for every runtime, against `runc run` of a hand-written minimal
// bundle. It runs only with TOOLGATE_TIMINGS=1 (it takes about a minute).
func TestTimings(t *testing.T) {
	if os.Getenv("TOOLGATE_TIMINGS") != "1" {
		t.Skip("set TOOLGATE_TIMINGS=1 to measure per-call timings")
	}
	for _, name := range KnownRuntimes() {
		t.Run(string(name), func(t *testing.T) {
			r := runner(t, name)
			var d []time.Duration
			for range timingCalls {
				in := inv()
				in.Path, in.Argv = "/usr/bin/true", []string{"/usr/bin/true"}
				start := time.Now()
				res, err := r.Run(context.Background(), in)
				if err != nil || res.ExitCode != 0 {
					t.Fatalf("Run = %+v, %v", res, err)
				}
				d = append(d, time.Since(start))
			}
			t.Logf("%s through Runner: median %s of %d calls (min %s, max %s)", name, median(d), timingCalls, d[0], d[len(d)-1])
		})
	}
	t.Run("runc-minimal-bundle", func(t *testing.T) {
		r := runner(t, Runc)
		b := t.TempDir()
		s := &specs.Spec{
			Version: bundle.SpecVersion,
			Root:    &specs.Root{Path: r.rootfs, Readonly: true},
			Process: &specs.Process{
				Args: []string{"/usr/bin/true"}, Cwd: "/", User: specs.User{UID: 65534, GID: 65534},
				Env: rt.Env, NoNewPrivileges: true,
			},
			Mounts: []specs.Mount{
				{Destination: "/proc", Type: "proc", Source: "proc"},
				{Destination: "/usr", Type: "bind", Source: "/usr", Options: []string{"rbind", "ro"}},
			},
			Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}}},
		}
		data, _ := json.Marshal(s)
		if err := os.WriteFile(filepath.Join(b, "config.json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		state := t.TempDir()
		var d []time.Duration
		for i := range timingCalls {
			id := "toolgate-timing-" + string(rune('a'+i%26)) + time.Now().Format("150405.000000")
			start := time.Now()
			out, err := exec.Command(r.bin, "--root", state, "run", "--bundle", b, id).CombinedOutput()
			d = append(d, time.Since(start))
			if err != nil {
				t.Fatalf("runc run: %v: %s", err, out)
			}
			_ = exec.Command(r.bin, "--root", state, "delete", "--force", id).Run()
		}
		t.Logf("runc run of a minimal bundle: median %s of %d calls (min %s, max %s)", median(d), timingCalls, d[0], d[len(d)-1])
	})
}
