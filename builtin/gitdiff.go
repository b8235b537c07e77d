package builtin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// git_diff_input limits.
const (
	// MaxDiffBytes caps the diff read from git; past it the diff is cut at
	// the last complete line (diff_cut: true).
	MaxDiffBytes    = 8 << 20
	gitDiffTimeout  = 60 * time.Second
	gitRevTimeout   = 10 * time.Second
	maxRevSpecBytes = 256
)

// gitConfig are the -c settings of every git run, on top of the sandbox
// every run is in (a repository's configuration is code: a clean filter, a
// fsmonitor hook or a lazy fetch of a promisor remote runs a program it
// names, and no list of overrides closes every such door, so git never
// runs on the host): no transport of any protocol (no lazy fetch), no
// fsmonitor hook, no ownership check (the sandbox, not git's
// safe.directory, is what contains a foreign repository's configuration;
// under an OCI runtime the workspace's owner is not the sandbox uid),
// quoted unusual paths, default prefixes.
var gitConfig = []string{
	"--no-optional-locks",
	"-c", "protocol.allow=never",
	"-c", "core.fsmonitor=false",
	"-c", "safe.directory=*",
	"-c", "core.quotePath=true",
	"-c", "diff.noprefix=false",
	"-c", "diff.mnemonicPrefix=false",
	"-c", "color.ui=never",
}

// gitPrefix is the start of every git run's arguments (its session's
// fixed prefix, which the sandbox's shim holds every command to): the
// repository named explicitly (its .git directory and work tree: the
// workspace root, so that neither GIT_DIR discovery nor core.worktree can
// point git elsewhere), then gitConfig.
func gitPrefix(root string) []string {
	a := []string{"--git-dir=" + filepath.Join(root, ".git"), "--work-tree=" + root}
	return append(a, gitConfig...)
}

// gitArgs prefixes a git subcommand with gitPrefix.
func (e *env) gitArgs(sub ...string) []string {
	return append(gitPrefix(e.ws.Root()), sub...)
}

// revParseArgs are the arguments of the run that resolves one validated
// revision to a commit id, behind --end-of-options.
func revParseArgs(root, rev string) []string {
	return append(gitPrefix(root), "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
}

// diffArgs are the arguments of the diff of revs: one commit id (against
// the working tree), or two (from the first to the second).
func diffArgs(root string, revs ...string) []string {
	a := append(gitPrefix(root), "diff", "--no-color", "--no-ext-diff", "--no-textconv", "--relative", "--find-renames",
		"--end-of-options")
	return append(append(a, revs...), "--")
}

// GitDiffArgv is the argv of each git run of a git_diff_input call of
// the target left..right over the repository at root, git being the
// helper's resolved path, once the two sides resolved to the commit ids
// base and head: the rev-parse of each side, then the diff. The handler
// builds its runs with the same functions; the bench execs these on the
// host, the floor of that call (e2e/bench).
//
// GitDiffArgv does not validate left and right (the handler's
// parseRevSpec does, refusing a leading dash, whitespace and control
// bytes): never give it a client's words.
func GitDiffArgv(git, root, left, right, base, head string) [][]string {
	argv := func(args []string) []string { return append([]string{git}, args...) }
	return [][]string{argv(revParseArgs(root, left)), argv(revParseArgs(root, right)), argv(diffArgs(root, base, head))}
}

// checkRepo says why the workspace root is not a repository git_diff_input
// can diff: inside the sandbox only the workspace exists, so its .git must
// be a directory of its own (not a file pointing at a linked worktree's or
// a submodule's git dir, nor one above the root).
func (e *env) checkRepo() error {
	r, err := e.ws.open()
	if err != nil {
		return err
	}
	defer r.Close()
	fi, err := r.Lstat(".git")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errors.New("the workspace root is not the top of a git repository (no .git directory in it): serve --root at a repository's top")
	case err != nil:
		return fmt.Errorf(".git: %w", err)
	case !fi.IsDir():
		return fmt.Errorf(".git is not a directory (mode %s): a linked worktree or a submodule keeps its git dir outside the workspace, where the sandbox cannot see it", fi.Mode().Type())
	}
	return nil
}

// revSpec is a validated diff target: one revision (diff it against the
// working tree), A..B, or A...B (from the merge base of A and B to B).
type revSpec struct {
	left, right string
	threeDot    bool
}

var errBadRev = errors.New("not a revision")

// parseRevSpec validates a target as revisions, never options: no leading
// '-' on either side, no whitespace or control characters, both sides of
// a range given.
func parseRevSpec(s string) (revSpec, error) {
	if s == "" {
		return revSpec{}, fmt.Errorf("target: empty: %w", errBadRev)
	}
	if len(s) > maxRevSpecBytes {
		return revSpec{}, fmt.Errorf("target: longer than %d bytes: %w", maxRevSpecBytes, errBadRev)
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return revSpec{}, fmt.Errorf("target %q: whitespace or control characters: %w", s, errBadRev)
	}
	var rs revSpec
	sides := []string{s}
	switch {
	case strings.Contains(s, "..."):
		rs.left, rs.right, _ = strings.Cut(s, "...")
		rs.threeDot = true
		sides = []string{rs.left, rs.right}
	case strings.Contains(s, ".."):
		rs.left, rs.right, _ = strings.Cut(s, "..")
		sides = []string{rs.left, rs.right}
	default:
		rs.left = s
	}
	for _, side := range sides {
		switch {
		case side == "":
			return revSpec{}, fmt.Errorf("target %q: a range needs a revision on both sides: %w", s, errBadRev)
		case strings.HasPrefix(side, "-"):
			return revSpec{}, fmt.Errorf("target %q: %q starts with '-': %w", s, side, errBadRev)
		case strings.Contains(side, ".."):
			return revSpec{}, fmt.Errorf("target %q: more than one range operator: %w", s, errBadRev)
		}
	}
	return rs, nil
}

var hexSHA = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// resolveRev turns one validated revision into a commit id with
// rev-parse --verify, behind --end-of-options.
func (e *env) resolveRev(ctx context.Context, git *helperSession, rev string) (string, error) {
	res, err := git.run(ctx, revParseArgs(e.ws.Root(), rev), gitRevTimeout, 4<<10)
	if err != nil {
		return "", err
	}
	if res.Failed() {
		if res.ExitCode == 1 && !res.TimedOut {
			return "", fmt.Errorf("%q does not name a commit in this repository", rev)
		}
		return "", errors.New(helperFailure("git rev-parse", res))
	}
	sha := strings.TrimSpace(string(res.Stdout))
	if !hexSHA.MatchString(sha) {
		return "", fmt.Errorf("git rev-parse %q printed %q, not a commit id", rev, sha)
	}
	return sha, nil
}

// DiffInfo says what git_diff_input compared.
type DiffInfo struct {
	Target     string `json:"target"`
	Base       string `json:"base"`
	Head       string `json:"head"` // a commit id, or "worktree"
	DiffBytes  int    `json:"diff_bytes"`
	DiffSHA256 string `json:"diff_sha256"`
	DiffCut    bool   `json:"diff_cut"`
}

// DiffChunkList is git_diff_input's list result.
type DiffChunkList struct {
	DiffInfo
	ChunkList
}

// DiffChunkText is git_diff_input's text result.
type DiffChunkText struct {
	DiffInfo
	ChunkText
}

type gitDiffArgs struct {
	Target *string `json:"target"`
	Index  *int    `json:"index"`
}

var gitDiffInputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "target": {"type": "string", "minLength": 1, "maxLength": 256, "description": "what to diff: a revision (against the working tree), A..B, or A...B (from the merge base); never an option: no leading '-'"},
    "index": {"type": "integer", "minimum": 1, "description": "1-based chunk to return the text of; omit to list the chunks"}
  },
  "required": ["target"],
  "additionalProperties": false
}`)

const diffInfoSchema = `
    "target": {"type": "string"},
    "base": {"type": "string"},
    "head": {"type": "string"},
    "diff_bytes": {"type": "integer"},
    "diff_sha256": {"type": "string"},
    "diff_cut": {"type": "boolean", "description": "git's output passed the diff cap and was cut at the last complete line"},`

func gitDiffTool(e *env) Tool {
	return Tool{
		Name:  "git_diff_input",
		Group: GroupGit,
		Description: "Run `git diff <target>` in the workspace, sandboxed (no network, the workspace read-only, " +
			"nothing else of the host; fixed argv, revisions resolved to commit ids by " +
			"`git rev-parse --verify --end-of-options` first, no external diff, no textconv, no fsmonitor, no " +
			"transport; the workspace root must be the repository's top) and split it into deterministic chunks, one file's diff at a " +
			"time, each chunk below 240 KiB and 19,000 lines. target is a revision (diffed against the working " +
			"tree), A..B, or A...B. Without index: list the chunks; with index (1-based): that chunk's text. " +
			fmt.Sprintf("The diff is capped at %d bytes (diff_cut: true past it). Byte budget: %d bytes of text and of "+
				"structured content each (a chunk's text counted raw); a list past it is cut (cut: true).", MaxDiffBytes, BudgetChunks),
		InputSchema:  gitDiffInputSchema,
		OutputSchema: chunksOutputSchema(diffInfoSchema),
		Handler: func(ctx context.Context, args json.RawMessage) (Result, error) {
			var a gitDiffArgs
			if err := decodeArgs(args, &a); err != nil {
				return Errorf("git_diff_input: %v", err), nil
			}
			if a.Target == nil {
				return Errorf("git_diff_input: arguments: missing required property %q", "target"), nil
			}
			if a.Index != nil && *a.Index < 1 {
				return Errorf("git_diff_input: index %d: want 1 or more", *a.Index), nil
			}
			return e.gitDiff(ctx, *a.Target, a.Index)
		},
	}
}

func (e *env) gitDiff(ctx context.Context, target string, index *int) (Result, error) {
	rs, err := parseRevSpec(target)
	if err != nil {
		return Errorf("git_diff_input: %v", err), nil
	}
	if err := e.checkRepo(); err != nil {
		return Errorf("git_diff_input: %v", err), nil
	}
	// One sandbox for every git run of the call.
	git, err := e.openHelper(ctx, HelperGit)
	if err != nil {
		return Errorf("git_diff_input: %v", err), nil
	}
	defer git.close()
	info := DiffInfo{Target: target, Head: "worktree"}
	left, err := e.resolveRev(ctx, git, rs.left)
	if err != nil {
		return Errorf("git_diff_input: %v", err), nil
	}
	info.Base = left
	revs := []string{left}
	if rs.right != "" {
		right, err := e.resolveRev(ctx, git, rs.right)
		if err != nil {
			return Errorf("git_diff_input: %v", err), nil
		}
		if rs.threeDot {
			res, err := git.run(ctx, e.gitArgs("merge-base", left, right), gitRevTimeout, 4<<10)
			if err != nil {
				return Errorf("git_diff_input: %v", err), nil
			}
			if res.Failed() {
				return Errorf("git_diff_input: %s", helperFailure("git merge-base", res)), nil
			}
			info.Base = strings.TrimSpace(string(res.Stdout))
			if !hexSHA.MatchString(info.Base) {
				return Errorf("git_diff_input: git merge-base printed %q, not a commit id", info.Base), nil
			}
		}
		info.Head = right
		revs = []string{info.Base, right}
	}
	res, err := git.run(ctx, diffArgs(e.ws.Root(), revs...), gitDiffTimeout, MaxDiffBytes)
	if err != nil {
		return Errorf("git_diff_input: %v", err), nil
	}
	if res.Failed() {
		return Errorf("git_diff_input: %s", helperFailure("git diff", res)), nil
	}
	diff := res.Stdout
	if res.StdoutCut {
		info.DiffCut = true
		if i := bytes.LastIndexByte(diff, '\n'); i >= 0 {
			diff = diff[:i+1]
		}
	}
	diff = bytes.ToValidUTF8(diff, []byte("\uFFFD"))
	sum := sha256.Sum256(diff)
	info.DiffBytes, info.DiffSHA256 = len(diff), hex.EncodeToString(sum[:])

	want := 0
	if index != nil {
		want = *index
	}
	k := newChunker(defaultChunkLimits, want)
	files := splitDiff(diff)
	for _, f := range files {
		k.add(f.name, f.data)
	}
	chunks, digest := k.finish()
	if index == nil {
		r := chunkListResult("git_diff_input", ChunkList{
			TotalChunks: len(chunks), TotalFiles: len(files),
			Digest: digest, Chunks: chunks,
		})
		l := r.Structured.(ChunkList)
		return Result{Text: info.text() + r.Text, Structured: DiffChunkList{DiffInfo: info, ChunkList: l}}, nil
	}
	r, err := chunkTextResult("git_diff_input", "", want, chunks, digest, k.text)
	if err != nil || r.IsError {
		return r, err
	}
	return Result{Text: r.Text, Structured: DiffChunkText{DiffInfo: info, ChunkText: r.Structured.(ChunkText)}}, nil
}

func (d DiffInfo) text() string {
	s := fmt.Sprintf("git diff %s: base %s, head %s, %d bytes, sha256 %s\n", d.Target, d.Base, d.Head, d.DiffBytes, d.DiffSHA256)
	if d.DiffCut {
		s += fmt.Sprintf("[diff cut: git printed more than %d bytes; the rest is not in any chunk]\n", MaxDiffBytes)
	}
	return s
}

// diffFile is one file's part of a diff.
type diffFile struct {
	name string
	data []byte
}

// splitDiff cuts a diff at its "diff --git " lines. A file is named by its
// b/ side when both sides name the same path, else by the header's text.
func splitDiff(diff []byte) []diffFile {
	var out []diffFile
	start := -1
	name := ""
	emit := func(end int) {
		if start >= 0 && end > start {
			out = append(out, diffFile{name: name, data: diff[start:end]})
		}
	}
	for pos := 0; pos < len(diff); {
		le := bytes.IndexByte(diff[pos:], '\n')
		if le < 0 {
			le = len(diff)
		} else {
			le = pos + le + 1
		}
		line := diff[pos:le]
		if rest, ok := bytes.CutPrefix(line, []byte("diff --git ")); ok {
			emit(pos)
			start, name = pos, diffName(strings.TrimRight(string(rest), "\n"))
		} else if start < 0 {
			start, name = pos, "(diff)"
		}
		pos = le
	}
	emit(len(diff))
	return out
}

func diffName(header string) string {
	if a, b, ok := strings.Cut(header, " b/"); ok && strings.HasPrefix(a, "a/") && a[2:] == b {
		return b
	}
	return header
}
