package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testbin"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// checkFixture writes tools.conf text (EXE and DIR replaced by a real
// executable and directory) and returns its path and a replacer that turns
// the temp paths back into placeholders.
func checkFixture(t *testing.T, text string) (string, *strings.Replacer) {
	t.Helper()
	root := testbin.Dir(t) // fixed-length name, traversable by the sandbox uid
	exe := filepath.Join(root, "lint")
	if err := os.WriteFile(exe, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "tools.conf")
	text = strings.NewReplacer("EXE", exe, "DIR", root).Replace(text)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, strings.NewReplacer(exe, "EXE", root, "DIR")
}

func TestCheckGolden(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		code       int
	}{
		{"loaded", "# example\ntool lint_repo EXE test 120 65536 on DIR -- --strict \"a b\"\ntool git_log EXE read 30 4096 off DIR --\nexpose render_review_report off\n", 0},
		{"refused", "tool ok EXE read 1 1 off DIR --\ntool sh /bin/sh read 1 1 off DIR -- -c id\ntool lint EXE read 0 1 on DIR --\nexpose checkpoint_status off\nsomething else\n", 1},
		{"empty", "# nothing yet\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, back := checkFixture(t, tc.conf)
			var out, errb bytes.Buffer
			// Host-independent: the helpers group depends on what is installed.
			code := run([]string{"check", "--conf", p, "--caps", "repo,git,report"}, nil, &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, errb.String())
			}
			got := back.Replace(out.String())
			golden := filepath.Join("testdata", "check-"+tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("check output differs from %s:\n--- got\n%s\n--- want\n%s", golden, got, want)
			}
			// --list-tools is the same report.
			var out2 bytes.Buffer
			if code2 := run([]string{"--list-tools", "--conf", p, "--caps", "repo,git,report"}, nil, &out2, &errb); code2 != code || out2.String() != out.String() {
				t.Errorf("--list-tools differs from check (exit %d)", code2)
			}
		})
	}
}

func TestCheckAbsent(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"check", "--conf", filepath.Join(t.TempDir(), "none")}, nil, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), ": absent") || !strings.Contains(out.String(), "checkpoint_status") {
		t.Errorf("exit %d:\n%s", code, out.String())
	}
}

func TestVersionAndUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, nil, &out, &errb); code != 0 || out.String() != "toolgate dev\n" {
		t.Errorf("version: %d %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"frobnicate"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %d %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"check", "--backend", "chroot"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown sandbox backend "chroot"`) {
		t.Errorf("bad backend: %d %q", code, errb.String())
	}
}
