package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/toolgate/toolgate/internal/golden"
)

// goldenInput is input.json of a golden case.
type goldenInput struct {
	Tool   Tool   `json:"tool"`
	Policy Policy `json:"policy"`
	// Opts name extra options, applied after the policy's.
	Opts []string `json:"opts,omitempty"`
}

var namedOpts = map[string]Opt{
	"WithoutRecursiveReadonly": WithoutRecursiveReadonly(),
	"WithClone3Allowed":        WithClone3Allowed(),
}

// TestGolden runs every testdata/*.txtar: input.json (decoded strictly)
// gives want/config.json, or want/error.txt when Spec refuses it.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			in := fileOf(ar, "input.json")
			if in == nil {
				t.Fatalf("%s: no input.json", file)
			}
			got, wantName := render(t, in)
			if got == nil {
				return // a seccomp case in a build without seccomp: checked in render
			}
			// Idempotence: the same input renders the same bytes.
			again, _ := render(t, in)
			if !bytes.Equal(got, again) {
				t.Errorf("rendering twice differs")
			}
			if golden.Update() {
				setFile(ar, wantName, got)
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want := fileOf(ar, wantName)
			if want == nil {
				t.Fatalf("%s: no %s (run go test -tags seccomp ./bundle -update)", file, wantName)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from %s; got:\n%s", wantName, file, got)
			}
		})
	}
}

// render returns the config.json (or error.txt) of input.json data.
func render(t *testing.T, data []byte) ([]byte, string) {
	t.Helper()
	var in goldenInput
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		t.Fatalf("input.json: %v", err)
	}
	var extra []Opt
	for _, name := range in.Opts {
		o, ok := namedOpts[name]
		if !ok {
			t.Fatalf("input.json: unknown opt %q", name)
		}
		extra = append(extra, o)
	}
	s, err := Spec(in.Tool, in.Policy, extra...)
	if in.Policy.Seccomp && !haveSeccomp {
		if !errors.Is(err, ErrNoSeccomp) {
			t.Errorf("seccomp case without the seccomp tag: Spec() error = %v, want ErrNoSeccomp", err)
		}
		return nil, ""
	}
	if err != nil {
		return []byte(err.Error() + "\n"), "want/error.txt"
	}
	out, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n'), "want/config.json"
}

func fileOf(ar *txtar.Archive, name string) []byte {
	for _, f := range ar.Files {
		if f.Name == name {
			return f.Data
		}
	}
	return nil
}

func setFile(ar *txtar.Archive, name string, data []byte) {
	var files []txtar.File
	for _, f := range ar.Files {
		if !strings.HasPrefix(f.Name, "want/") {
			files = append(files, f)
		}
	}
	ar.Files = append(files, txtar.File{Name: name, Data: data})
}

// TestGoldenCasesCoverEveryCheck makes sure each validation has a
// rejecting golden case (besides the table in TestValidateRejects).
func TestGoldenCasesCoverEveryCheck(t *testing.T) {
	files, _ := filepath.Glob("testdata/reject_*.txtar")
	if len(files) == 0 {
		t.Fatal("no reject_*.txtar cases")
	}
	for _, f := range files {
		ar, err := txtar.ParseFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if fileOf(ar, "want/error.txt") == nil && !golden.Update() {
			t.Errorf("%s: a reject case must want error.txt", f)
		}
	}
}
