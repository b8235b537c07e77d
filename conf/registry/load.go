package registry

// Loading a registry directory. The pipeline is decode → validate →
// normalise, per fragment:
//
//   - decodeFragment (decode.go) decodes one file strictly (unknown keys are
//     errors) and records the line of every key it defines;
//   - validateEntry (check.go) runs the named checks of the list checks
//     on each server entry and collects every reason;
//   - normaliseEntry (normalise.go) fills the defaults and resolves the
//     command, giving a ToolServer.
//
// Then the fragments are merged in lexical filename order: a later fragment
// that defines an id replaces the earlier entry whole. A registry with one
// refused entry anywhere, even one a later fragment replaces, is refused as
// a whole: no server is served, and nothing else in toolgate is affected.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/conf"
)

// Options are what Load needs beyond the directory.
type Options struct {
	// SearchPath are the directories a bare command name is looked up in,
	// in order. Empty means SearchPath. Entries that are not
	// absolute are skipped: a relative entry is never searched.
	SearchPath []string
	// Taken are the tool names served before the registry's (built-ins
	// and tools.conf tools), each with what it is, for the message: a
	// served name (ID__TOOL of an enabled tool) equal to one refuses the
	// registry. TakenNames builds it.
	Taken map[string]string
	// Visible reports whether a canonical host path is one every sandbox
	// sees (conf.Options.Visible): a credential's secret file there is refused.
	Visible func(path string) bool
	// Conf is the loaded tools.conf served beside the registry, if any:
	// no secret file of either may lie where a sandbox of the other binds
	// (a non-root toolgate's sandboxes run as its uid, which owns them).
	Conf *conf.Config
}

// TakenNames is Options.Taken for the built-ins named and the
// tools of c (when it is loaded: a refused conf serves none).
func TakenNames(builtins []string, c *conf.Config) map[string]string {
	taken := map[string]string{}
	for _, b := range builtins {
		taken[b] = "the built-in tool"
	}
	if c != nil && c.State == conf.StateLoaded {
		for _, t := range c.Tools {
			taken[t.Name] = fmt.Sprintf("the tools.conf tool at %s line %d", c.Path, t.Line)
		}
	}
	return taken
}

func (o Options) searchPath() []string {
	dirs := o.SearchPath
	if len(dirs) == 0 {
		dirs = filepath.SplitList(SearchPath)
	}
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		if filepath.IsAbs(d) {
			out = append(out, filepath.Clean(d))
		}
	}
	return out
}

// Load reads every *.toml fragment of dir in lexical filename order
// (names starting with "." are skipped, as are subdirectories), validates
// each entry, and merges them. It never returns a half-loaded Registry:
// either every fragment is accepted (StateLoaded), or the Registry is
// refused and carries no servers, or dir does not exist (StateAbsent, no
// downstream servers).
func Load(dir string, opts Options) *Registry {
	r := &Registry{Dir: dir}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.State = conf.StateAbsent
		r.Reason = "no directory at " + dir
		return r
	case err != nil:
		r.State = conf.StateAbsent
		r.Reason = "unreadable: " + conf.UnwrapPathErr(err).Error()
		return r
	}
	dirErr := func(format string, a ...any) *Registry {
		r.refuse([]error{&Error{File: dir, Err: fmt.Errorf(format, a...)}})
		return r
	}
	if !fi.IsDir() {
		return dirErr("not a directory (mode %s)", fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		if err := conf.ReadOnlyDir(dir, fi); err != nil {
			return dirErr("group- or world-writable (mode %04o): anyone who can add a fragment can run a server as toolgate; chmod go-w %s (not a read-only mount toolgate can trust: %v)", perm, dir, err)
		}
	}
	if err := conf.CheckTrusted(dir, fi); err != nil {
		return dirErr("%w", err)
	}
	ents, err := os.ReadDir(dir) // sorted by filename
	if err != nil {
		return dirErr("unreadable: %v", conf.UnwrapPathErr(err))
	}
	var (
		errs    []error
		entries []*entry
	)
	for _, de := range ents {
		name := de.Name()
		if !strings.HasSuffix(name, ".toml") || strings.HasPrefix(name, ".") || de.IsDir() {
			continue
		}
		path := filepath.Join(dir, name)
		r.Fragments = append(r.Fragments, path)
		data, err := readFragment(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		es, ferrs := parseFragment(path, data, opts)
		errs = append(errs, ferrs...)
		entries = append(entries, es...)
	}
	if len(errs) > 0 {
		r.refuse(errs)
		return r
	}
	servers := mergeEntries(entries)
	if errs := Collisions(servers, opts.Taken); len(errs) > 0 {
		r.refuse(errs)
		return r
	}
	if errs := secretsBound(servers, opts.Conf); len(errs) > 0 {
		r.refuse(errs)
		return r
	}
	pins, errs := loadPins(dir)
	if len(errs) > 0 {
		r.refuse(errs)
		return r
	}
	r.State = conf.StateLoaded
	r.Servers = servers
	r.Pins = pins
	return r
}

// Collisions returns an error for every served name (ID__TOOL of an
// enabled tool) that taken has (a tools.conf name may contain "__"). The
// check uses enabled_tools, not what servers offer, so that the outcome
// does not depend on a server; Load applies it (so registry
// validate sees what serve does), and the server applies it again to what
// it serves.
func Collisions(servers []ToolServer, taken map[string]string) []error {
	var errs []error
	for _, srv := range servers {
		for _, tool := range srv.EnabledTools {
			name := srv.ServedName(tool)
			if what, ok := taken[name]; ok {
				errs = append(errs, &Error{
					File: srv.Fragment, Line: srv.Line,
					Path: "tool_mcp_servers." + srv.ID + ".enabled_tools",
					Err: fmt.Errorf("served name %q collides with %s of the same name: rename the tools.conf tool or remove %q from enabled_tools",
						name, what, tool),
				})
			}
		}
	}
	return errs
}

// ParseFragment validates the bytes of one fragment named path: it is
// Load for a single file without the file checks, for tests and
// fuzzing. It still stats the command and resolves it.
func ParseFragment(path string, data []byte, opts Options) ([]ToolServer, error) {
	es, errs := parseFragment(path, data, opts)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return mergeEntries(es), nil
}

// readFragment reads one fragment, refusing what is not a regular file, a
// file others can write, and an oversized file.
func readFragment(path string) ([]byte, error) {
	return readTrusted(path, MaxFragmentSize, "run a server as toolgate")
}

// readTrusted reads a file of the registry (a fragment, the pins file) of
// at most limit bytes, refusing what is not a regular file, a file others
// can write or that is on a path others could change (conf.CheckTrusted), and
// a larger file. risk says what whoever could write it could do.
func readTrusted(path string, limit int, risk string) ([]byte, error) {
	fileErr := func(format string, a ...any) error {
		return &Error{File: path, Err: fmt.Errorf(format, a...)}
	}
	f, err := conf.OpenFile(path, 0)
	if err != nil {
		return nil, fileErr("unreadable: %v", conf.UnwrapPathErr(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileErr("unreadable: %v", conf.UnwrapPathErr(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, fileErr("not a regular file (mode %s)", fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return nil, fileErr("group- or world-writable (mode %04o): anyone who can write it can %s; chmod go-w %s", perm, risk, path)
	}
	if err := conf.CheckTrusted(path, fi); err != nil {
		return nil, &Error{File: path, Err: err}
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fileErr("unreadable: %v", err)
	}
	if len(data) > limit {
		return nil, fileErr("larger than %d bytes", limit)
	}
	return data, nil
}

// parseFragment runs decode → validate → normalise on one fragment.
func parseFragment(path string, data []byte, opts Options) ([]*entry, []error) {
	frag, errs := decodeFragment(path, data)
	if frag == nil {
		return nil, errs
	}
	var entries []*entry
	for _, id := range sortedKeys(frag.doc.Servers) {
		e := &entry{id: id, frag: frag, raw: frag.doc.Servers[id]}
		verrs := validateEntry(e)
		if len(verrs) == 0 {
			verrs = normaliseEntry(e, opts)
		}
		errs = append(errs, verrs...)
		entries = append(entries, e)
	}
	sortErrors(errs)
	return entries, errs
}

// mergeEntries applies the fragments in order: a later definition of an id
// replaces the earlier one whole. The result is in id order.
func mergeEntries(entries []*entry) []ToolServer {
	byID := map[string]ToolServer{}
	for _, e := range entries {
		s := e.server
		if prev, ok := byID[s.ID]; ok {
			s.Replaces = append(slices.Clone(prev.Replaces), prev.Fragment)
		}
		byID[s.ID] = s
	}
	out := make([]ToolServer, 0, len(byID))
	for _, id := range sortedKeys(byID) {
		out = append(out, byID[id])
	}
	return out
}

// refuse turns r into a refused Registry carrying errs and nothing else.
func (r *Registry) refuse(errs []error) {
	r.State = conf.StateRefused
	r.Servers = nil
	r.Pins = nil
	r.Errors = errs
}

// sortErrors orders refusals by file, then line.
func sortErrors(errs []error) {
	slices.SortStableFunc(errs, func(a, b error) int {
		var ea, eb *Error
		if !errors.As(a, &ea) || !errors.As(b, &eb) {
			return 0
		}
		if c := strings.Compare(ea.File, eb.File); c != 0 {
			return c
		}
		return ea.Line - eb.Line
	})
}
