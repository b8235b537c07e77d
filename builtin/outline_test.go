package builtin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOutline(t *testing.T) {
	requireBinary(t, "ctags")
	root, outside := boundaryFixture(t)
	writeTree(t, root, map[string]string{
		"src/shapes.go": "package shapes\n\n// Shape has an area.\ntype Shape interface {\n\tArea() float64\n}\n\n" +
			"// Square is a Shape.\ntype Square struct {\n\tSide float64\n}\n\n// Area of the square.\n" +
			"func (s Square) Area() float64 {\n\treturn s.Side * s.Side\n}\n\n// New makes a Square.\nfunc New(side float64) Square {\n\treturn Square{Side: side}\n}\n",
		"src/tool.py": "class Tool:\n    def run(self, x):\n        return x\n\n\ndef main():\n    Tool().run(1)\n",
		// An option file ctags would read without --options=NONE.
		".ctags.d/evil.ctags": "--exclude=*\n",
		"ctags.d/evil.ctags":  "--exclude=*\n",
		"-x.go":               "package x\n\nfunc X() {}\n",
		".env":                "SECRET=1\n",
	})
	writeTree(t, outside, map[string]string{"outside.go": "package o\n\nfunc Outside() {}\n"})
	symlink(t, filepath.Join(outside, "outside.go"), filepath.Join(root, "src/outside-link.go"))
	symlink(t, "shapes.go", filepath.Join(root, "src/shapes-link.go"))
	tools := testTools(t, root, "")
	if _, ok := tools["outline"]; !ok {
		t.Fatal("outline is not served though ctags is installed")
	}
	res := call(t, tools, "outline", `{"path":"src/shapes.go"}`)
	if res.IsError {
		t.Fatal(res.Text)
	}
	o := res.Structured.(Outline)
	var names []string
	for _, s := range o.Symbols {
		names = append(names, s.Kind+" "+s.Name)
	}
	for _, want := range []string{"interface Shape", "struct Square", "func New", "func Area", "member Side"} {
		if !strings.Contains(strings.Join(names, ","), want) {
			t.Errorf("outline lacks %q: %q", want, names)
		}
	}
	checkGolden(t, "outline_shapes.json", mustJSON(t, o))
	checkGolden(t, "outline_shapes.txt", []byte(res.Text))

	for _, tc := range []struct {
		name, args, wantPath, wantSymbol, wantErr string
	}{
		{name: "python", args: `{"path":"src/tool.py"}`, wantPath: "src/tool.py", wantSymbol: "run"},
		{name: "absolute inside", args: `{"path":"` + filepath.Join(root, "src/shapes.go") + `"}`, wantPath: "src/shapes.go", wantSymbol: "Square"},
		{name: "symlink inside", args: `{"path":"src/shapes-link.go"}`, wantPath: "src/shapes.go", wantSymbol: "Square"},
		{name: "a name like an option", args: `{"path":"-x.go"}`, wantPath: "-x.go", wantSymbol: "X"},
		{name: "parent traversal", args: `{"path":"src/../src/shapes.go"}`, wantErr: "parent traversal"},
		{name: "absolute outside", args: `{"path":"` + filepath.Join(outside, "outside.go") + `"}`, wantErr: "outside the workspace"},
		{name: "symlink escaping", args: `{"path":"src/outside-link.go"}`, wantErr: "outside the workspace"},
		{name: "a directory", args: `{"path":"src"}`, wantErr: "not a regular file"},
		{name: "a secret", args: `{"path":".env"}`, wantErr: "hidden or likely-secret"},
		{name: "missing", args: `{"path":"src/none.go"}`, wantErr: "does not exist"},
		{name: "no path", args: `{}`, wantErr: `missing required property "path"`},
		{name: "two paths", args: `{"path":["a","b"]}`, wantErr: "want string"},
		{name: "unknown property", args: `{"path":"src/tool.py","recurse":true}`, wantErr: `unknown property "recurse"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, tools, "outline", tc.args)
			if tc.wantErr != "" {
				wantError(t, res, tc.wantErr)
				return
			}
			if res.IsError {
				t.Fatal(res.Text)
			}
			o := res.Structured.(Outline)
			if o.Path != tc.wantPath || !strings.Contains(res.Text, " "+tc.wantSymbol) {
				t.Fatalf("outline %+v, want path %q and symbol %q", o, tc.wantPath, tc.wantSymbol)
			}
		})
	}
}

// TestOutlineProject outlines a file of the project's own checkout.
func TestOutlineProject(t *testing.T) {
	requireBinary(t, "ctags")
	root := projectRoot(t)
	res := call(t, testTools(t, root, ""), "outline", `{"path":"builtin/builtin.go"}`)
	if res.IsError {
		t.Fatal(res.Text)
	}
	o := res.Structured.(Outline)
	found := map[string]bool{}
	for _, s := range o.Symbols {
		found[s.Kind+" "+s.Name] = true
	}
	for _, want := range []string{"func Names", "struct Tool", "struct Result", "func Errorf"} {
		if !found[want] {
			t.Errorf("outline of builtin/builtin.go lacks %q", want)
		}
	}
	if o.Language != "Go" || o.Cut {
		t.Errorf("language %q, cut %v", o.Language, o.Cut)
	}
	if _, err := os.Stat(filepath.Join(root, "tags")); err == nil {
		t.Log("note: a tags file exists in the checkout (not written by outline, which writes to stdout)")
	}
}

// TestOutlineSwapRace swaps a directory of the workspace for a symlink to
// a directory outside it, over and over, while outline reads a file below
// it: the file is opened once, through the workspace root, so no call may
// ever return the symbols of the file outside.
func TestOutlineSwapRace(t *testing.T) {
	requireBinary(t, "ctags")
	root, outside := t.TempDir(), t.TempDir()
	writeTree(t, root, map[string]string{"d/x.go": "package d\n\nfunc Inside() {}\n"})
	writeTree(t, outside, map[string]string{"x.go": "package d\n\nfunc OutsideSecret() {}\n"})
	real, parked := filepath.Join(root, "d"), filepath.Join(root, "parked")
	link := filepath.Join(root, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	tools := testTools(t, root, "")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				_ = os.Rename(parked, real)
				return
			default:
			}
			// d is a real directory, then (for a moment) the symlink.
			_ = os.Rename(real, parked)
			_ = os.Rename(link, real)
			_ = os.Rename(real, link)
			_ = os.Rename(parked, real)
		}
	}()
	inside := 0
	for i := range 1000 {
		res := call(t, tools, "outline", `{"path":"d/x.go"}`)
		if strings.Contains(res.Text, "OutsideSecret") {
			close(stop)
			<-done
			t.Fatalf("call %d returned the symbols of a file outside the workspace:\n%s", i, res.Text)
		}
		if !res.IsError {
			inside++
		}
	}
	close(stop)
	<-done
	if inside == 0 {
		t.Error("no call succeeded: the race never let outline read the file inside")
	}
}
