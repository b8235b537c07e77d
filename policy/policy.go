// Package policy decides, with Cedar policies, whether a principal may
// list or call a tool (toolgate serve --policy, toolgate policy check).
// A policy file is validated whole against the schema toolgate ships
// (Schema, docs/policy.md): it is refused, with the line and the reason,
// when a policy does not parse or does not validate. Everything is denied
// unless a policy permits it and none forbids it; checkpoint_status is
// always permitted (it is never off). One Decide serves listing and
// calling. --tool-scope compiles to the same Engine (FromScopes).
//
// The package is pure: it reads its file under tools.conf's trust rules
// (conf.ReadTrusted) and never executes anything.
package policy

import (
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
	"github.com/cedar-policy/cedar-go/x/exp/schema"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"

	"github.com/toolgate/toolgate/conf"
)

// Schema is the Cedar schema every policy is validated against, as
// docs/policy.md shows it.
//
//go:embed toolgate.cedarschema
var Schema string

// MaxFileSize is the largest policy file accepted (1 MiB, as tools.conf).
const MaxFileSize = conf.MaxFileSize

// NoPermit is what a denial names when no policy decided it: nothing
// permitted the request.
const NoPermit = "no permit"

// StatusTool is always permitted, whatever a policy file says (seed 000:
// checkpoint_status is never off). An Engine of --tool-scope keeps the
// scopes' rule for it (a scope must name it).
const StatusTool = "checkpoint_status"

// maxIDBytes bounds an @id.
const maxIDBytes = 128

// Error is a refused policy file: where (line and column, 0 when the
// whole file is refused), which policy when one is known, and why.
type Error struct {
	File   string
	Line   int
	Column int
	Policy string // the policy's id; "" for a parse error
	Err    error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Policy != "" {
		fmt.Fprintf(&b, "policy %q: ", e.Policy)
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Engine holds one validated policy set. It is immutable and safe for
// concurrent use.
type Engine struct {
	name   string
	set    *cedar.PolicySet
	index  index          // set's policies by the principal and tool their scopes name
	ids    []string       // in file order
	order  map[string]int // id → place in the file
	lines  map[string]int // id → the line the policy starts at
	always map[string]bool
	// reserved denies a token or OAuth principal named stdio or local
	// (a policy file's rule; --tool-scope names no principal).
	reserved bool
}

// Name is the file (or "--tool-scope") the engine was built from.
func (e *Engine) Name() string { return e.name }

// IDs returns the policies' ids in file order.
func (e *Engine) IDs() []string { return append([]string(nil), e.ids...) }

// Line is the line the policy of id starts at (its first annotation);
// 0 for an id the engine does not hold, or a policy built without text.
func (e *Engine) Line(id string) int { return e.lines[id] }

// Load reads the policy file at path under the rules tools.conf is read
// by (conf.ReadTrusted) and parses it (Parse).
func Load(path string) (*Engine, error) {
	data, err := conf.ReadTrusted(path, "policy file", MaxFileSize)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// validator is the schema's, built once: the schema is toolgate's own,
// so a failure here is a bug.
var validator = func() *validate.Validator {
	var s schema.Schema
	s.SetFilename("toolgate.cedarschema")
	if err := s.UnmarshalCedar([]byte(Schema)); err != nil {
		panic("policy: the shipped schema does not parse: " + err.Error())
	}
	rs, err := s.Resolve()
	if err != nil {
		panic("policy: the shipped schema does not resolve: " + err.Error())
	}
	return validate.New(rs)
}()

// Parse parses and validates the policies of src (name is the file
// shown in errors). Either every policy is accepted or the whole file is
// refused: an error joining one *Error per problem found. A policy's id
// is its @id annotation, else policyN (N its 0-based place in the file,
// as the Cedar CLI names them); two policies of one id are refused.
func Parse(name string, src []byte) (*Engine, error) {
	list, err := cedar.NewPolicyListFromBytes(name, src)
	if err != nil {
		return nil, parseError(name, err)
	}
	e, errs := build(name, list, false)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	e.always = map[string]bool{StatusTool: true}
	e.reserved = true
	return e, nil
}

// build gives each policy its id, validates it and adds it to the set;
// scopes lets ids take FromScopes' prefix.
func build(name string, list cedar.PolicyList, scopes bool) (*Engine, []error) {
	e := &Engine{name: name, set: cedar.NewPolicySet(), index: index{}, order: map[string]int{}, lines: map[string]int{}}
	var errs []error
	seen := map[string]int{} // id → line
	for i, p := range list {
		line := p.Position().Line
		fail := func(id string, err error) {
			errs = append(errs, &Error{File: name, Line: line, Column: p.Position().Column, Policy: id, Err: err})
		}
		id := "policy" + strconv.Itoa(i)
		if v, ok := p.Annotations()["id"]; ok {
			id = string(v)
			if err := checkID(id, scopes); err != nil {
				fail("", err)
				continue
			}
		}
		if first, dup := seen[id]; dup {
			fail(id, fmt.Errorf("duplicate id: the policy at line %d has it too", first))
			continue
		}
		seen[id] = line
		if err := validator.Policy("", (*xast.Policy)(p.AST())); err != nil {
			fail(id, fmt.Errorf("does not validate against toolgate's schema: %s", strings.ReplaceAll(err.Error(), "\n", "; ")))
			continue
		}
		e.set.Add(cedar.PolicyID(id), p)
		e.index.add(cedar.PolicyID(id), p)
		e.order[id] = len(e.ids)
		e.lines[id] = line
		e.ids = append(e.ids, id)
	}
	return e, errs
}

// checkID refuses an @id that could not name a policy in an audit
// record or that reads as the engine's own words.
func checkID(id string, scopes bool) error {
	switch {
	case id == "":
		return errors.New(`@id is empty`)
	case len(id) > maxIDBytes:
		return fmt.Errorf("@id is over %d bytes", maxIDBytes)
	case id == NoPermit:
		return fmt.Errorf("@id %q is what a denial no policy decided names", id)
	case strings.HasPrefix(id, scopePrefix) && !scopes:
		return fmt.Errorf("@id %q: ids starting %q are --tool-scope's", id, scopePrefix)
	}
	for _, r := range id {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("@id %q holds a character that does not print", id)
		}
	}
	return nil
}

// cedarPos is where cedar-go's parser says an error is: it names the
// input <input>, whatever the file.
var cedarPos = regexp.MustCompile(`^(?:parser error: )?parse error at [^:]*:(\d+):(\d+) (.*)$`)

// parseError turns cedar-go's parse error into an *Error at its line
// and column.
func parseError(name string, err error) error {
	m := cedarPos.FindStringSubmatch(err.Error())
	if m == nil {
		return &Error{File: name, Err: fmt.Errorf("does not parse: %s", strings.TrimPrefix(err.Error(), "parser error: "))}
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	return &Error{File: name, Line: line, Column: col, Err: fmt.Errorf("does not parse: %s", m[3])}
}

// The entity types of the schema.
const (
	typePrincipal types.EntityType = "Principal"
	typeTool      types.EntityType = "Tool"
	typeAction    types.EntityType = "Action"
	typeArguments types.EntityType = "Arguments"
)
