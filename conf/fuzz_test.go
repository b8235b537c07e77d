package conf

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzParse: no input crashes or hangs the parser, a refused config carries
// nothing, and whatever is accepted obeys every rule of a tool line.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"tool a /usr/bin/true read 1 1 off /tmp --\n",
		"tool lint /usr/bin/true test 3600 1048576 on /tmp -- --x #c\nexpose a off\n",
		"expose repo_manifest off\nexpose checkpoint_status on\n",
		"# c\n\n\ttool b /usr/bin/true read 10 100 off /usr -- a#b -- x\n",
		"tool a /usr/bin/true read 1 1 off /tmp\n",
		"tool a /bin/sh read 1 1 off /tmp --\r\n",
		"tool a /usr/bin/../bin/true read 01 1 off /tmp/ --\n",
		"tool a /usr/bin/true read 1 1 off /out/x -- queue.db\x00\n",
		"expose\nexpose a\nexpose a b c d\ntool\n",
	} {
		f.Add([]byte(s))
	}
	builtins := []string{"checkpoint_status", "repo_manifest"}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Big inputs only slow the engine's minimiser down; the size limit
		// and long tokens have their own unit tests.
		if len(data) > 64<<10 {
			return
		}
		c := Parse("tools.conf", data, Options{Builtins: builtins})
		switch c.State {
		case StateRefused:
			if c.Tools != nil || c.Exposes != nil || len(c.Errors) == 0 {
				t.Fatalf("refused config carries tools %v exposes %v errors %d", c.Tools, c.Exposes, len(c.Errors))
			}
			for _, err := range c.Errors {
				var e *Error
				if !errors.As(err, &e) || e.Line < 0 || e.Err == nil {
					t.Fatalf("error %v is not a positioned *Error", err)
				}
			}
			return
		case StateLoaded:
		default:
			t.Fatalf("Parse state %q", c.State)
		}
		if len(c.Errors) != 0 || len(data) > MaxFileSize || !utf8.Valid(data) || strings.ContainsAny(string(data), "\r\x00") {
			t.Fatalf("accepted a file that must be refused: %q", data)
		}
		names := map[string]bool{}
		for _, tl := range c.Tools {
			switch {
			case !nameRE.MatchString(tl.Name) || names[tl.Name] || tl.Name == "checkpoint_status" || tl.Name == "repo_manifest":
				t.Fatalf("accepted name %q", tl.Name)
			case tl.Timeout < time.Second || tl.Timeout > MaxTimeout*time.Second:
				t.Fatalf("accepted timeout %s", tl.Timeout)
			case tl.MaxBytes < MinMaxBytes || tl.MaxBytes > MaxMaxBytes:
				t.Fatalf("accepted max-bytes %d", tl.MaxBytes)
			case tl.Sandbox != (tl.Class == ClassTest) || (tl.Class != ClassRead && tl.Class != ClassTest):
				t.Fatalf("accepted class %q with sandbox %v", tl.Class, tl.Sandbox)
			case !filepath.IsAbs(tl.Exe) || filepath.Clean(tl.Exe) != tl.Exe || strings.ContainsAny(tl.Exe, metachars) || hasDotDot(tl.Exe):
				t.Fatalf("accepted exe %q", tl.Exe)
			case !filepath.IsAbs(tl.Dir) || filepath.Clean(tl.Dir) != tl.Dir || strings.ContainsAny(tl.Dir, metachars):
				t.Fatalf("accepted dir %q", tl.Dir)
			}
			for _, p := range []string{filepath.Base(tl.Exe), filepath.Base(tl.ExeResolved)} {
				if _, _, denied := DeniedExe(p); denied {
					t.Fatalf("accepted denied exe %q", p)
				}
			}
			for _, s := range append([]string{tl.Exe, tl.ExeResolved, tl.Dir, tl.DirResolved}, tl.Args...) {
				if d, bad := DeniedSubstring(s); bad {
					t.Fatalf("accepted state substring %q in %q", d, s)
				}
			}
			names[tl.Name] = true
		}
		for _, e := range c.Exposes {
			if !names[e.Name] && e.Name != "checkpoint_status" && e.Name != "repo_manifest" {
				t.Fatalf("accepted expose of unknown %q", e.Name)
			}
			if !e.On && strings.HasPrefix(e.Name, ProtectedPrefix) {
				t.Fatalf("accepted expose %s off", e.Name)
			}
		}
	})
}
