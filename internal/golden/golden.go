// Package golden compares a test's output with a file under testdata, and
// rewrites the file when the tests run with -update:
//
//	go test ./PKG -run TestX -update
//
// Review the diff of what -update wrote before committing it.
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// Update reports whether -update was given, for a test that keeps its
// golden content its own way (a txtar archive, say).
func Update() bool { return *update }

// Check compares got with the file at path (relative to the package's
// directory). With -update it writes got there instead; a missing file is
// a failure that says how to make it.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden %s (go test -update writes it): %v", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
