package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// ManifestFile is one collected file.
type ManifestFile struct {
	Path     string `json:"path"`
	Bytes    int    `json:"bytes"`
	Lines    int    `json:"lines"`
	Tokens   int    `json:"tokens"`
	Language string `json:"language"`
}

// DirStat totals the collected files at and below one directory.
type DirStat struct {
	Path  string `json:"path"`
	Files int    `json:"files"`
	Bytes int    `json:"bytes"`
}

// LanguageStat totals the collected files of one language.
type LanguageStat struct {
	Language string `json:"language"`
	Files    int    `json:"files"`
	Bytes    int    `json:"bytes"`
	Lines    int    `json:"lines"`
	Tokens   int    `json:"tokens"`
}

// SecurityEntry lists the files of one security index category.
type SecurityEntry struct {
	Category string   `json:"category"`
	Files    int      `json:"files"`
	Paths    []string `json:"paths"`
}

// Totals sums a collection.
type Totals struct {
	Files       int `json:"files"`
	Directories int `json:"directories"`
	Bytes       int `json:"bytes"`
	Lines       int `json:"lines"`
	Tokens      int `json:"tokens"`
}

// Manifest is repo_manifest's structured result. Totals, Languages and
// Skipped are always complete; Files, Directories and each security
// category's Paths are cut to the byte budget when Cut is set.
type Manifest struct {
	Scope         string           `json:"scope"`
	Totals        Totals           `json:"totals"`
	Languages     []LanguageStat   `json:"languages"`
	Skipped       []SkipCount      `json:"skipped"`
	SecurityIndex *[]SecurityEntry `json:"security_index,omitempty"`
	Directories   []DirStat        `json:"directories"`
	Files         []ManifestFile   `json:"files"`
	Cut           bool             `json:"cut"`
	BudgetBytes   int              `json:"budget_bytes"`
}

type manifestArgs struct {
	Path          *string `json:"path"`
	SecurityIndex *bool   `json:"security_index"`
}

var manifestInputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "directory to inventory: workspace-relative, or absolute inside the workspace; default \".\" (the whole workspace)"},
    "security_index": {"type": "boolean", "description": "also list the files whose paths suggest auth, crypto, secrets handling, deserialization, shell or SQL use; default false"}
  },
  "additionalProperties": false
}`)

var skipCountSchema = `{"type": "object", "properties": {
        "reason": {"type": "string", "enum": ["unusual_name", "likely_secret", "hidden", "gitignored", "dependency_or_build_dir", "lockfile", "generated_report", "symlink", "special_file", "empty", "too_large", "unreadable", "binary", "non_utf8", "over_limit"]},
        "files": {"type": "integer", "minimum": 0},
        "dirs": {"type": "integer", "minimum": 0}},
      "required": ["reason", "files", "dirs"], "additionalProperties": false}`

var manifestOutputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "scope": {"type": "string"},
    "totals": {"type": "object", "properties": {
      "files": {"type": "integer"}, "directories": {"type": "integer"}, "bytes": {"type": "integer"},
      "lines": {"type": "integer"}, "tokens": {"type": "integer"}},
      "required": ["files", "directories", "bytes", "lines", "tokens"], "additionalProperties": false},
    "languages": {"type": "array", "items": {"type": "object", "properties": {
      "language": {"type": "string"}, "files": {"type": "integer"}, "bytes": {"type": "integer"},
      "lines": {"type": "integer"}, "tokens": {"type": "integer"}},
      "required": ["language", "files", "bytes", "lines", "tokens"], "additionalProperties": false}},
    "skipped": {"type": "array", "items": ` + skipCountSchema + `},
    "security_index": {"type": "array", "items": {"type": "object", "properties": {
      "category": {"type": "string", "enum": ["auth", "crypto", "secrets", "deserialization", "shell", "sql"]},
      "files": {"type": "integer"}, "paths": {"type": "array", "items": {"type": "string"}}},
      "required": ["category", "files", "paths"], "additionalProperties": false}},
    "directories": {"type": "array", "items": {"type": "object", "properties": {
      "path": {"type": "string"}, "files": {"type": "integer"}, "bytes": {"type": "integer"}},
      "required": ["path", "files", "bytes"], "additionalProperties": false}},
    "files": {"type": "array", "items": {"type": "object", "properties": {
      "path": {"type": "string"}, "bytes": {"type": "integer"}, "lines": {"type": "integer"},
      "tokens": {"type": "integer"}, "language": {"type": "string"}},
      "required": ["path", "bytes", "lines", "tokens", "language"], "additionalProperties": false}},
    "cut": {"type": "boolean", "description": "files, directories or security paths were cut to the byte budget; totals are complete"},
    "budget_bytes": {"type": "integer"}
  },
  "required": ["scope", "totals", "languages", "skipped", "directories", "files", "cut", "budget_bytes"],
  "additionalProperties": false
}`)

func repoManifestTool(e *env) Tool {
	return Tool{
		Name:  "repo_manifest",
		Group: GroupRepo,
		Description: "Inventory the workspace (or one directory of it), gitignore-aware: every collected file with " +
			"its bytes, lines, language and token estimate (bytes/4, rounded up), totals per directory and per " +
			"language, and optionally a security index of paths suggesting auth, crypto, secrets, " +
			"deserialization, shell or SQL use. Skipped, and counted by reason: gitignored and hidden paths, " +
			"dependency and build directories, lockfiles, generated reports, likely-secret files (.env*, *.pem, " +
			"*.key, id_rsa*, credentials*), symlinks, binary, non-UTF-8 and empty files, and files over 512 KiB. " +
			fmt.Sprintf("Byte budget: %d bytes of text and of structured content each; past it the file, directory "+
				"and security lists are cut (cut: true) while totals stay complete.", BudgetManifest),
		InputSchema:  manifestInputSchema,
		OutputSchema: manifestOutputSchema,
		Handler: func(ctx context.Context, args json.RawMessage) (Result, error) {
			var a manifestArgs
			if err := decodeArgs(args, &a); err != nil {
				return Errorf("repo_manifest: %v", err), nil
			}
			scope := "."
			if a.Path != nil {
				s, err := e.ws.Resolve(*a.Path)
				if err != nil {
					return Errorf("repo_manifest: %v", err), nil
				}
				scope = s
			}
			m, err := buildManifest(ctx, e.ws, scope, a.SecurityIndex != nil && *a.SecurityIndex)
			if err != nil {
				return Errorf("repo_manifest: %v", err), nil
			}
			return m.result(), nil
		},
	}
}

// manifestFull is the complete manifest before budgeting.
type manifestFull struct {
	Manifest
	files    []ManifestFile
	dirs     []DirStat
	security []SecurityEntry
}

func buildManifest(ctx context.Context, ws *Workspace, scope string, security bool) (*manifestFull, error) {
	m := &manifestFull{}
	m.Scope = scope
	langs := map[string]*LanguageStat{}
	dirs := map[string]*DirStat{}
	sec := map[string][]string{}
	skipped, err := collect(ctx, ws, scope, func(f collectedFile, _ []byte) error {
		mf := ManifestFile{Path: f.Path, Bytes: f.Size, Lines: f.Lines, Tokens: tokens(f.Size), Language: Language(f.Path)}
		m.files = append(m.files, mf)
		m.Totals.Files++
		m.Totals.Bytes += mf.Bytes
		m.Totals.Lines += mf.Lines
		m.Totals.Tokens += mf.Tokens
		l := langs[mf.Language]
		if l == nil {
			l = &LanguageStat{Language: mf.Language}
			langs[mf.Language] = l
		}
		l.Files++
		l.Bytes += mf.Bytes
		l.Lines += mf.Lines
		l.Tokens += mf.Tokens
		for d := pathDir(f.Path); d != "."; d = pathDir(d) {
			ds := dirs[d]
			if ds == nil {
				ds = &DirStat{Path: d}
				dirs[d] = ds
			}
			ds.Files++
			ds.Bytes += f.Size
		}
		if security {
			for _, c := range SecurityCategories(f.Path) {
				sec[c] = append(sec[c], f.Path)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.Skipped = skipped.list()
	m.Languages = []LanguageStat{}
	for _, l := range langs {
		m.Languages = append(m.Languages, *l)
	}
	slices.SortFunc(m.Languages, func(a, b LanguageStat) int {
		if a.Bytes != b.Bytes {
			return b.Bytes - a.Bytes
		}
		return strings.Compare(a.Language, b.Language)
	})
	for _, d := range dirs {
		m.dirs = append(m.dirs, *d)
	}
	slices.SortFunc(m.dirs, func(a, b DirStat) int { return strings.Compare(a.Path, b.Path) })
	m.Totals.Directories = len(m.dirs)
	if security {
		m.security = []SecurityEntry{}
		for _, c := range securityCategories {
			if p := sec[c.name]; len(p) > 0 {
				m.security = append(m.security, SecurityEntry{Category: c.name, Files: len(p), Paths: p})
			}
		}
	}
	if m.files == nil {
		m.files = []ManifestFile{}
	}
	if m.dirs == nil {
		m.dirs = []DirStat{}
	}
	return m, nil
}

// take returns the manifest with at most k entries in each list.
func (m *manifestFull) take(k int) Manifest {
	out := m.Manifest
	out.BudgetBytes = BudgetManifest
	out.Files = firstN(m.files, k)
	out.Directories = firstN(m.dirs, k)
	if m.security != nil {
		sec := make([]SecurityEntry, len(m.security))
		for i, s := range m.security {
			sec[i] = SecurityEntry{Category: s.Category, Files: s.Files, Paths: firstN(s.Paths, k)}
		}
		out.SecurityIndex = &sec
	}
	out.Cut = k < max(len(m.files), len(m.dirs), maxPaths(m.security))
	return out
}

func maxPaths(s []SecurityEntry) int {
	n := 0
	for _, e := range s {
		n = max(n, len(e.Paths))
	}
	return n
}

func (m *manifestFull) result() Result {
	n := max(len(m.files), len(m.dirs), maxPaths(m.security))
	return fit(n, BudgetManifest, m.take, Manifest.text)
}

// text renders the manifest for people.
func (m Manifest) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "repo_manifest %s: %s in %s, %d bytes, %d lines, ~%d tokens\n",
		m.Scope, count(m.Totals.Files, "file"), count(m.Totals.Directories, "directory"), m.Totals.Bytes, m.Totals.Lines, m.Totals.Tokens)
	b.WriteString("languages:\n")
	for _, l := range m.Languages {
		fmt.Fprintf(&b, "  %s: %s, %d bytes, %d lines, ~%d tokens\n", l.Language, count(l.Files, "file"), l.Bytes, l.Lines, l.Tokens)
	}
	b.WriteString("skipped:\n")
	if len(m.Skipped) == 0 {
		b.WriteString("  nothing\n")
	}
	for _, s := range m.Skipped {
		fmt.Fprintf(&b, "  %s: %s, %s\n", s.Reason, count(s.Files, "file"), count(s.Dirs, "dir"))
	}
	if m.SecurityIndex != nil {
		b.WriteString("security index:\n")
		if len(*m.SecurityIndex) == 0 {
			b.WriteString("  nothing\n")
		}
		for _, s := range *m.SecurityIndex {
			fmt.Fprintf(&b, "  %s (%s): %s\n", s.Category, count(s.Files, "file"), strings.Join(s.Paths, ", "))
		}
	}
	b.WriteString("directories:\n")
	for _, d := range m.Directories {
		fmt.Fprintf(&b, "  %s/: %s, %d bytes\n", d.Path, count(d.Files, "file"), d.Bytes)
	}
	b.WriteString("files:\n")
	for _, f := range m.Files {
		fmt.Fprintf(&b, "  %s: %d bytes, %d lines, ~%d tokens, %s\n", f.Path, f.Bytes, f.Lines, f.Tokens, f.Language)
	}
	if m.Cut {
		fmt.Fprintf(&b, "[cut: listed %d of %d files and %d of %d directories to stay within %d bytes; totals are complete]\n",
			len(m.Files), m.Totals.Files, len(m.Directories), m.Totals.Directories, m.BudgetBytes)
	}
	return b.String()
}
