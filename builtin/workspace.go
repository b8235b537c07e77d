package builtin

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// The boundary violations a caller can branch on (tests do).
var (
	// ErrTraversal is a path with a ".." component.
	ErrTraversal = errors.New("parent traversal (\"..\") is not allowed")
	// ErrOutside is a path that is, or resolves (through a symlink), outside
	// the workspace.
	ErrOutside = errors.New("outside the workspace")
	// ErrAbsolute is an absolute output path: renderers write only to
	// workspace-relative paths.
	ErrAbsolute = errors.New("output path must be workspace-relative, not absolute")
	// ErrSymlink is an output path whose final component is a symlink.
	ErrSymlink = errors.New("output path is a symlink")
	// ErrHidden is an output path with a hidden component.
	ErrHidden = errors.New("output path has a hidden component")
)

// Workspace is the directory tree the built-ins may read, and the
// renderers may write. Every path a caller names is validated against it
// before anything is read or written:
//
//   - input paths (existing_report, outline, sloc, scopes) may be
//     workspace-relative or absolute inside the root; any ".." component is
//     refused before cleaning, and the path's target, symlinks resolved,
//     must be inside the root;
//   - output paths (the renderers) must be relative, without "..", without
//     a hidden component, without a symlinked ancestor that leaves the
//     root, and must not be a symlink themselves.
//
// Reads and writes then go through an os.Root opened on the canonical
// root, which refuses at the system-call level any path that would leave
// it, so a symlink swapped in after validation cannot redirect them.
type Workspace struct {
	root  string // canonical absolute root
	alias string // the root as configured, made absolute and cleaned
}

// NewWorkspace returns the workspace rooted at dir, which must be an
// existing directory.
func NewWorkspace(dir string) (*Workspace, error) {
	if dir == "" {
		return nil, errors.New("workspace root: empty path")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace root %q: %w", dir, err)
	}
	canon, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace root %q: %w", dir, err)
	}
	fi, err := os.Stat(canon)
	if err != nil {
		return nil, fmt.Errorf("workspace root %q: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("workspace root %q: not a directory", dir)
	}
	return &Workspace{root: canon, alias: filepath.Clean(abs)}, nil
}

// Root is the canonical absolute root.
func (w *Workspace) Root() string { return w.root }

// checkName refuses what no path may contain.
func checkName(p string) error {
	if p == "" {
		return errors.New("empty path")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return errors.New("path contains a NUL byte")
	}
	if !utf8.ValidString(p) {
		return errors.New("path is not valid UTF-8")
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return ErrTraversal
		}
	}
	return nil
}

// within returns p relative to base when p is base or below it (a test on
// path boundaries: /a/bc is not inside /a/b).
func within(base, p string) (string, bool) {
	if p == base {
		return ".", true
	}
	prefix := base
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if rest, ok := strings.CutPrefix(p, prefix); ok {
		return rest, true
	}
	return "", false
}

// lexicalRel turns an input path into a cleaned relative path, without
// touching the file system.
func (w *Workspace) lexicalRel(p string) (string, error) {
	if err := checkName(p); err != nil {
		return "", err
	}
	if filepath.IsAbs(p) {
		c := filepath.Clean(p)
		if rel, ok := within(w.root, c); ok {
			return rel, nil
		}
		if rel, ok := within(w.alias, c); ok {
			return rel, nil
		}
		return "", ErrOutside
	}
	return path.Clean(p), nil
}

// Resolve validates an input path and returns the workspace-relative,
// slash-separated path of its target with symlinks resolved ("." for the
// root). The target must exist and be inside the root.
func (w *Workspace) Resolve(p string) (string, error) {
	rel, err := w.lexicalRel(p)
	if err != nil {
		return "", fmt.Errorf("path %q: %w", p, err)
	}
	target, err := filepath.EvalSymlinks(filepath.Join(w.root, rel))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("path %q: %w", p, fs.ErrNotExist)
		}
		return "", fmt.Errorf("path %q: %w", p, err)
	}
	crel, ok := within(w.root, target)
	if !ok {
		return "", fmt.Errorf("path %q: resolves to %q: %w", p, target, ErrOutside)
	}
	return filepath.ToSlash(crel), nil
}

// open opens the workspace through an os.Root, which keeps every later
// access inside the root even if the tree changes under it.
func (w *Workspace) open() (*os.Root, error) {
	r, err := os.OpenRoot(w.root)
	if err != nil {
		return nil, fmt.Errorf("open workspace %q: %w", w.root, err)
	}
	return r, nil
}

// ReadFile reads the regular file at rel (as returned by Resolve), at most
// limit bytes; cut reports that the file is longer. size is the file's
// full size.
func (w *Workspace) ReadFile(rel string, limit int64) (data []byte, size int64, cut bool, err error) {
	r, err := w.open()
	if err != nil {
		return nil, 0, false, err
	}
	defer r.Close()
	f, err := r.OpenFile(rel, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, 0, false, fmt.Errorf("open %q: %w", rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, false, fmt.Errorf("stat %q: %w", rel, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, false, fmt.Errorf("%q is not a regular file", rel)
	}
	data, err = io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, 0, false, fmt.Errorf("read %q: %w", rel, err)
	}
	if int64(len(data)) > limit {
		return data[:limit], max(fi.Size(), int64(len(data))), true, nil
	}
	return data, max(fi.Size(), int64(len(data))), false, nil
}

// ResolveOutput validates a renderer's output path and returns it cleaned
// and slash-separated. It refuses absolute paths, "..", hidden components
// (.git, .github and other dotfiles are never written), ancestors that are
// not directories or are symlinks resolving outside the root, and a final
// component that is a symlink or anything but a regular file.
func (w *Workspace) ResolveOutput(p string) (string, error) {
	if err := checkName(p); err != nil {
		return "", fmt.Errorf("output path %q: %w", p, err)
	}
	if filepath.IsAbs(p) {
		return "", fmt.Errorf("output path %q: %w", p, ErrAbsolute)
	}
	rel := path.Clean(p)
	if rel == "." {
		return "", fmt.Errorf("output path %q: names the workspace root", p)
	}
	if strings.HasSuffix(p, "/") {
		return "", fmt.Errorf("output path %q: names a directory", p)
	}
	parts := strings.Split(rel, "/")
	for _, part := range parts {
		if strings.HasPrefix(part, ".") {
			return "", fmt.Errorf("output path %q: component %q: %w", p, part, ErrHidden)
		}
	}
	// Ancestors: each must be missing (it will be created), a directory,
	// or a symlink to a directory inside the root.
	for i := 1; i < len(parts); i++ {
		anc := strings.Join(parts[:i], "/")
		full := filepath.Join(w.root, anc)
		fi, err := os.Lstat(full)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("output path %q: ancestor %q: %w", p, anc, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(full)
			if err != nil {
				return "", fmt.Errorf("output path %q: symlinked ancestor %q: %w", p, anc, err)
			}
			if _, ok := within(w.root, target); !ok {
				return "", fmt.Errorf("output path %q: symlinked ancestor %q resolves to %q: %w", p, anc, target, ErrOutside)
			}
			if fi, err = os.Stat(target); err != nil {
				return "", fmt.Errorf("output path %q: ancestor %q: %w", p, anc, err)
			}
		}
		if !fi.IsDir() {
			return "", fmt.Errorf("output path %q: ancestor %q is not a directory", p, anc)
		}
	}
	// The final component, looked up through the (validated) ancestors.
	fi, err := os.Lstat(filepath.Join(w.root, rel))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", fmt.Errorf("output path %q: %w", p, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return "", fmt.Errorf("output path %q: %w", p, ErrSymlink)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("output path %q: exists and is not a regular file", p)
	}
	return rel, nil
}

// WriteFile writes data to rel (as returned by ResolveOutput), creating
// missing parent directories. It writes a temporary file beside the target
// and renames it over the target, so a reader never sees a partial report
// and a symlink put in place after validation is replaced, never followed.
func (w *Workspace) WriteFile(rel string, data []byte) error {
	r, err := w.open()
	if err != nil {
		return err
	}
	defer r.Close()
	dir := path.Dir(rel)
	if dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %q: %w", dir, err)
		}
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return fmt.Errorf("temporary name: %w", err)
	}
	tmp := path.Join(dir, ".toolgate-"+hex.EncodeToString(rnd[:])+".tmp")
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create temporary file for %q: %w", rel, err)
	}
	_, werr := f.Write(data)
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr == nil {
		werr = r.Rename(tmp, rel)
	}
	if werr != nil {
		_ = r.Remove(tmp)
		return fmt.Errorf("write %q: %w", rel, werr)
	}
	return nil
}
