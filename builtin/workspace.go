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
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
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
//     a hidden component, and are judged as they resolve: a symlinked
//     ancestor leading out of the root or to a hidden directory is refused,
//     and the path must not be a symlink itself.
//
// Reads then go through an os.Root opened on the canonical root, which
// refuses at the system-call level any path that would leave it; writes
// walk the directories with openat(O_NOFOLLOW) from the root, following
// each symlink by hand, so a symlink swapped in after validation cannot
// redirect them.
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
	if slices.Contains(strings.Split(p, "/"), "..") {
		return ErrTraversal
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
// (.git, .github and other dotfiles are never written), and then judges the
// path as it resolves: every ancestor is opened as the kernel would walk
// it, each symlink followed by hand (openOutputDir), so that a symlinked
// directory leading to a hidden directory, or out of the workspace, is
// refused; the final component must not be a symlink nor anything but a
// regular file.
func (w *Workspace) ResolveOutput(p string) (string, error) {
	rel, err := lexicalOutput(p)
	if err != nil {
		return "", err
	}
	dir, name := path.Split(rel)
	fd, err := w.openOutputDir(p, dir, false)
	if err != nil {
		return "", err
	}
	if fd < 0 {
		return rel, nil // a missing directory: created by WriteFile
	}
	defer unix.Close(fd)
	if _, err := finalComponent(p, fd, name); err != nil {
		return "", err
	}
	return rel, nil
}

// lexicalOutput checks an output path without touching the file system.
func lexicalOutput(p string) (string, error) {
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
	for part := range strings.SplitSeq(rel, "/") {
		if strings.HasPrefix(part, ".") {
			return "", fmt.Errorf("output path %q: component %q: %w", p, part, ErrHidden)
		}
	}
	return rel, nil
}

// finalComponent reports whether name exists in the directory fd, refusing
// a symlink and anything but a regular file. It never follows a symlink.
func finalComponent(p string, fd int, name string) (exists bool, err error) {
	var st unix.Stat_t
	err = unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("output path %q: %w", p, err)
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return false, fmt.Errorf("output path %q: %w", p, ErrSymlink)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return false, fmt.Errorf("output path %q: exists and is not a regular file", p)
	}
	return true, nil
}

// maxOutputLinks bounds the symlinks followed in one output path, as the
// kernel does.
const maxOutputLinks = 40

// openOutputDir opens dir (the ancestors of output path p, relative and
// lexically checked) from the workspace root one component at a time, with
// openat(O_NOFOLLOW|O_DIRECTORY) on the directory opened before: no
// component is looked up by path twice, so a directory swapped for a
// symlink after a check is never followed. A symlink is read and its
// target walked the same way, so every component the path resolves
// through is judged: a hidden one (a link to .git/hooks or
// .claude/commands) is refused with ErrHidden, one leading out of the root
// with ErrOutside.
//
// A missing directory is created (mkdirat) when create is set; otherwise
// the walk ends there and fd is -1 (what follows will be created, its
// names already judged). A missing directory a symlink leads to is refused
// either way. It returns the open directory (the caller closes it).
func (w *Workspace) openOutputDir(p, dir string, create bool) (int, error) {
	var at []string
	type comp struct {
		name     string
		fromLink string // the symlinked ancestor this component's name came from
	}
	var pending []comp
	for c := range strings.SplitSeq(strings.Trim(dir, "/"), "/") {
		pending = append(pending, comp{name: c})
	}
	open := func(parts []string) (int, error) {
		fd, err := unix.Open(w.root, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("open workspace %q: %w", w.root, err)
		}
		for _, c := range parts {
			next, err := unix.Openat(fd, c, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_RDONLY|unix.O_CLOEXEC, 0)
			unix.Close(fd)
			if err != nil {
				return -1, fmt.Errorf("output path %q: reopen %q: %w", p, strings.Join(parts, "/"), err)
			}
			fd = next
		}
		return fd, nil
	}
	cur, err := open(nil)
	if err != nil {
		return -1, err
	}
	defer func() {
		if err != nil && cur >= 0 {
			unix.Close(cur)
		}
	}()
	links := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		where := strings.Join(append(append([]string(nil), at...), c.name), "/")
		via := ""
		if c.fromLink != "" {
			via = fmt.Sprintf("symlinked ancestor %q resolves through %q: ", c.fromLink, where)
		}
		switch {
		case c.name == "" || c.name == ".":
			continue
		case c.name == "..":
			if len(at) == 0 {
				return -1, fmt.Errorf("output path %q: symlinked ancestor %q leads above the workspace root: %w", p, c.fromLink, ErrOutside)
			}
			at = at[:len(at)-1]
			unix.Close(cur)
			if cur, err = open(at); err != nil {
				cur = -1
				return -1, err
			}
			continue
		case strings.HasPrefix(c.name, "."):
			return -1, fmt.Errorf("output path %q: %scomponent %q: %w", p, via, c.name, ErrHidden)
		}
		next, oerr := unix.Openat(cur, c.name, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		switch {
		case oerr == nil:
			unix.Close(cur)
			cur, at = next, append(at, c.name)
		case errors.Is(oerr, unix.ENOENT):
			if c.fromLink != "" {
				return -1, fmt.Errorf("output path %q: %sa missing directory: symlinked ancestors must lead to existing directories", p, via)
			}
			if !create {
				unix.Close(cur)
				return -1, nil
			}
			if err := unix.Mkdirat(cur, c.name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, fmt.Errorf("create %q: %w", where, err)
			}
			pending = append([]comp{c}, pending...) // open what was created
		case errors.Is(oerr, unix.ELOOP) || errors.Is(oerr, unix.ENOTDIR):
			var st unix.Stat_t
			if err := unix.Fstatat(cur, c.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return -1, fmt.Errorf("output path %q: ancestor %q: %w", p, where, err)
			}
			if st.Mode&unix.S_IFMT != unix.S_IFLNK {
				return -1, fmt.Errorf("output path %q: %sancestor %q is not a directory", p, via, where)
			}
			if links++; links > maxOutputLinks {
				return -1, fmt.Errorf("output path %q: more than %d symlinks", p, maxOutputLinks)
			}
			target, err := readlinkat(cur, c.name)
			if err != nil {
				return -1, fmt.Errorf("output path %q: symlinked ancestor %q: %w", p, where, err)
			}
			from := c.fromLink
			if from == "" {
				from = where
			}
			if filepath.IsAbs(target) {
				clean := filepath.Clean(target)
				rel, ok := within(w.root, clean)
				if !ok {
					rel, ok = within(w.alias, clean)
				}
				if !ok {
					return -1, fmt.Errorf("output path %q: symlinked ancestor %q resolves to %q: %w", p, from, target, ErrOutside)
				}
				unix.Close(cur)
				if cur, err = open(nil); err != nil {
					cur = -1
					return -1, err
				}
				at, target = nil, rel
			}
			var linked []comp
			for t := range strings.SplitSeq(target, "/") {
				linked = append(linked, comp{name: t, fromLink: from})
			}
			pending = append(linked, pending...)
		default:
			return -1, fmt.Errorf("output path %q: ancestor %q: %w", p, where, oerr)
		}
	}
	return cur, nil
}

// readlinkat reads the symlink name in the directory fd.
func readlinkat(fd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
		if size > 1<<16 {
			return "", errors.New("symlink target too long")
		}
	}
}

// WriteFile writes data to rel (as returned by ResolveOutput), creating
// missing parent directories, and reports whether it replaced a file. The
// directories are walked again as ResolveOutput walks them (openOutputDir),
// and the file is written into the directory so opened: a temporary file
// beside the target (O_EXCL|O_NOFOLLOW), renamed over it (renameat), so a
// reader never sees a partial report and a symlink put in place of the
// target after validation is replaced, never followed.
func (w *Workspace) WriteFile(rel string, data []byte) (replaced bool, err error) {
	if _, err := lexicalOutput(rel); err != nil {
		return false, err
	}
	dir, name := path.Split(rel)
	fd, err := w.openOutputDir(rel, dir, true)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	replaced = unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return false, fmt.Errorf("temporary name: %w", err)
	}
	tmp := ".toolgate-" + hex.EncodeToString(rnd[:]) + ".tmp"
	tfd, err := unix.Openat(fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return false, fmt.Errorf("create temporary file for %q: %w", rel, err)
	}
	f := os.NewFile(uintptr(tfd), tmp)
	_, werr := f.Write(data)
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr == nil {
		werr = unix.Renameat(fd, tmp, fd, name)
	}
	if werr != nil {
		_ = unix.Unlinkat(fd, tmp, 0)
		return false, fmt.Errorf("write %q: %w", rel, werr)
	}
	return replaced, nil
}
