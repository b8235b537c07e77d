package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// nonblock keeps an open of a file swapped for a FIFO from blocking.
const nonblock = syscall.O_NONBLOCK

// Collection limits.
const (
	// MaxFileBytes is the largest file collected; larger ones are skipped
	// as too_large.
	MaxFileBytes = 512 << 10
	// MaxCollectFiles and MaxCollectBytes bound one collection; files past
	// either are skipped as over_limit.
	MaxCollectFiles = 50000
	MaxCollectBytes = 256 << 20
	// maxIgnoreFileBytes bounds a .gitignore or info/exclude read.
	maxIgnoreFileBytes = 1 << 20
)

// SkipReason says why the collector left a path out.
type SkipReason string

// The skip reasons, in the order they are tested and reported.
const (
	SkipUnusualName SkipReason = "unusual_name"  // control characters or invalid UTF-8 in the name
	SkipSecret      SkipReason = "likely_secret" // .env*, *.pem, *.key, id_rsa*, credentials*, ...
	SkipHidden      SkipReason = "hidden"        // a name starting with '.'
	SkipGitignored  SkipReason = "gitignored"    // .gitignore or .git/info/exclude
	SkipDependency  SkipReason = "dependency_or_build_dir"
	SkipLockfile    SkipReason = "lockfile"
	SkipReport      SkipReason = "generated_report" // ISSUES.md, REVIEW.md, *.sarif
	SkipSymlink     SkipReason = "symlink"          // never followed
	SkipSpecial     SkipReason = "special_file"     // FIFO, socket, device
	SkipEmpty       SkipReason = "empty"
	SkipTooLarge    SkipReason = "too_large" // over MaxFileBytes
	SkipUnreadable  SkipReason = "unreadable"
	SkipBinary      SkipReason = "binary" // a NUL byte
	SkipNonUTF8     SkipReason = "non_utf8"
	SkipOverLimit   SkipReason = "over_limit" // past MaxCollectFiles or MaxCollectBytes
)

// SkipReasons lists every skip reason in report order.
func SkipReasons() []SkipReason {
	return []SkipReason{
		SkipUnusualName, SkipSecret, SkipHidden, SkipGitignored, SkipDependency,
		SkipLockfile, SkipReport, SkipSymlink, SkipSpecial, SkipEmpty, SkipTooLarge, SkipUnreadable,
		SkipBinary, SkipNonUTF8, SkipOverLimit,
	}
}

// dependencyDirs are directory names never descended into: dependencies,
// build outputs and caches.
var dependencyDirs = map[string]bool{
	"node_modules": true, "bower_components": true, "jspm_packages": true, "vendor": true,
	"Pods": true, "Carthage": true, "DerivedData": true, "elm-stuff": true,
	"target": true, "build": true, "dist": true, "_build": true, "__pycache__": true,
	"venv": true, "site-packages": true, "coverage": true, "zig-cache": true, "zig-out": true,
	"cmake-build-debug": true, "cmake-build-release": true,
}

// lockfiles are dependency lock files, skipped by exact name.
var lockfiles = map[string]bool{
	"package-lock.json": true, "npm-shrinkwrap.json": true, "yarn.lock": true, "pnpm-lock.yaml": true,
	"bun.lockb": true, "bun.lock": true, "Cargo.lock": true, "go.sum": true, "go.work.sum": true,
	"Gemfile.lock": true, "poetry.lock": true, "Pipfile.lock": true, "uv.lock": true, "pdm.lock": true,
	"composer.lock": true, "mix.lock": true, "pubspec.lock": true, "Podfile.lock": true,
	"flake.lock": true, "packages.lock.json": true, "gradle.lockfile": true, "deno.lock": true,
	"Package.resolved": true, "conan.lock": true, "paket.lock": true,
}

// generatedReports are the renderers' default outputs and SARIF files.
var generatedReports = map[string]bool{"ISSUES.md": true, "REVIEW.md": true}

// isSecretName reports whether a file name suggests secrets: .env*,
// *.pem, *.key, *.p12, *.pfx, *.jks, *.keystore, *.kdbx, id_rsa*,
// id_dsa*, id_ecdsa*, id_ed25519*, credentials*, .netrc, .npmrc, .pypirc,
// .pgpass, .htpasswd (case-insensitive).
func isSecretName(name string) bool {
	n := strings.ToLower(name)
	for _, p := range []string{".env", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "credentials"} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	for _, s := range []string{".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".kdbx"} {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	switch n {
	case ".netrc", ".npmrc", ".pypirc", ".pgpass", ".htpasswd":
		return true
	}
	return false
}

func isLockfile(name string) bool { return lockfiles[name] }

func isReport(name string) bool {
	return generatedReports[name] || strings.HasSuffix(strings.ToLower(name), ".sarif") ||
		strings.HasSuffix(strings.ToLower(name), ".sarif.json")
}

// unusualName reports names the collector will not put in a chunk header:
// invalid UTF-8 or control characters (a newline would forge a header).
func unusualName(name string) bool {
	if !utf8.ValidString(name) {
		return true
	}
	return strings.ContainsFunc(name, unicode.IsControl)
}

// SkipCount is how many files and directories one reason left out.
type SkipCount struct {
	Reason SkipReason `json:"reason"`
	Files  int        `json:"files"`
	Dirs   int        `json:"dirs"`
}

// skips counts skipped entries by reason.
type skips map[SkipReason]*SkipCount

func (s skips) add(r SkipReason, dir bool) {
	c := s[r]
	if c == nil {
		c = &SkipCount{Reason: r}
		s[r] = c
	}
	if dir {
		c.Dirs++
	} else {
		c.Files++
	}
}

// list returns the non-zero counts in report order.
func (s skips) list() []SkipCount {
	out := []SkipCount{}
	for _, r := range SkipReasons() {
		if c := s[r]; c != nil {
			out = append(out, *c)
		}
	}
	return out
}

// collectedFile is one file the collector kept.
type collectedFile struct {
	Path  string // slash-separated, relative to the root
	Size  int
	Lines int
}

// visitFunc receives each collected file with its content, in collection
// order: directory by directory, entries sorted by name. data is only
// valid during the call.
type visitFunc func(f collectedFile, data []byte) error

// collector walks a workspace.
type collector struct {
	ws      *Workspace
	root    *os.Root
	ignore  *ignoreSet
	scope   string // "." or a slash-separated directory
	skipped skips
	files   int
	bytes   int64
	visit   visitFunc
}

// collect walks the workspace below scope (a path already validated by
// Workspace.Resolve, "." for everything), applying the skip rules, and
// calls visit for every collected file. It returns the skip counts.
func collect(ctx context.Context, ws *Workspace, scope string, visit visitFunc) (skips, error) {
	r, err := ws.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if scope != "." {
		fi, err := r.Stat(scope)
		if err != nil {
			return nil, fmt.Errorf("scope %q: %w", scope, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("scope %q: not a directory", scope)
		}
	}
	c := &collector{ws: ws, root: r, ignore: newIgnoreSet(), scope: scope, skipped: skips{}, visit: visit}
	if fi, err := r.Lstat(".git"); err == nil && fi.IsDir() {
		c.ignore.add("", parseGitignore(c.readSmall(".git/info/exclude")))
	}
	return c.skipped, c.walkDir(ctx, ".")
}

// inScope reports whether rel is the scope, below it, or (when dir) an
// ancestor of it that must be walked to reach it.
func (c *collector) inScope(rel string, dir bool) (walk, count bool) {
	if c.scope == "." {
		return true, true
	}
	if rel == c.scope || strings.HasPrefix(rel, c.scope+"/") {
		return true, true
	}
	if dir && strings.HasPrefix(c.scope, rel+"/") {
		return true, false
	}
	return false, false
}

func (c *collector) readSmall(rel string) []byte {
	f, err := c.root.OpenFile(rel, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(f, maxIgnoreFileBytes))
	return b
}

func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

func (c *collector) walkDir(ctx context.Context, dir string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := c.root.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %q: %w", dir, err)
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("read directory %q: %w", dir, err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	// This directory's .gitignore applies to everything below it.
	for _, e := range entries {
		if e.Name() == ".gitignore" && e.Type().IsRegular() {
			base := dir
			if base == "." {
				base = ""
			}
			c.ignore.add(base, parseGitignore(c.readSmall(join(dir, ".gitignore"))))
		}
	}
	for _, e := range entries {
		rel := join(dir, e.Name())
		isDir := e.IsDir()
		walk, count := c.inScope(rel, isDir)
		if !walk {
			continue
		}
		if reason := c.skipEntry(e, rel); reason != "" {
			// A skipped ancestor of the scope hides the whole scope: count
			// it, since it is why the result is empty.
			c.skipped.add(reason, isDir)
			continue
		}
		if isDir {
			if err := c.walkDir(ctx, rel); err != nil {
				return err
			}
			continue
		}
		if !count {
			continue
		}
		if err := c.file(rel); err != nil {
			return err
		}
	}
	return nil
}

// skipEntry applies the name and type rules, in SkipReasons order.
func (c *collector) skipEntry(e fs.DirEntry, rel string) SkipReason {
	name := e.Name()
	t := e.Type()
	isDir := e.IsDir()
	switch {
	case unusualName(name):
		return SkipUnusualName
	case !isDir && isSecretName(name):
		return SkipSecret
	case strings.HasPrefix(name, "."):
		return SkipHidden
	case c.ignore.ignored(rel, isDir):
		return SkipGitignored
	case isDir && dependencyDirs[name]:
		return SkipDependency
	case !isDir && isLockfile(name):
		return SkipLockfile
	case !isDir && isReport(name):
		return SkipReport
	case t&fs.ModeSymlink != 0:
		return SkipSymlink
	case !isDir && !t.IsRegular():
		return SkipSpecial
	}
	return ""
}

// file reads one regular file and applies the content rules.
func (c *collector) file(rel string) error {
	if c.files >= MaxCollectFiles || c.bytes >= MaxCollectBytes {
		c.skipped.add(SkipOverLimit, false)
		return nil
	}
	f, err := c.root.OpenFile(rel, os.O_RDONLY|nonblock, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while walking
		}
		c.skipped.add(SkipUnreadable, false)
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		c.skipped.add(SkipUnreadable, false)
		return nil
	}
	switch {
	case !fi.Mode().IsRegular():
		c.skipped.add(SkipSpecial, false)
		return nil
	case fi.Size() == 0:
		c.skipped.add(SkipEmpty, false)
		return nil
	case fi.Size() > MaxFileBytes:
		c.skipped.add(SkipTooLarge, false)
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	switch {
	case err != nil:
		c.skipped.add(SkipUnreadable, false)
		return nil
	case len(data) == 0:
		c.skipped.add(SkipEmpty, false)
		return nil
	case len(data) > MaxFileBytes:
		c.skipped.add(SkipTooLarge, false)
		return nil
	case bytes.IndexByte(data, 0) >= 0:
		c.skipped.add(SkipBinary, false)
		return nil
	case !utf8.Valid(data):
		c.skipped.add(SkipNonUTF8, false)
		return nil
	}
	c.files++
	c.bytes += int64(len(data))
	return c.visit(collectedFile{Path: rel, Size: len(data), Lines: countLines(data)}, data)
}

// countLines counts lines as an editor does: a final line without a
// newline counts.
func countLines(data []byte) int {
	n := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
}

// pathDir is the directory of a collected path, "." at the top.
func pathDir(p string) string { return path.Dir(p) }
