package registry

// Pins: the downstream tool definitions the operator approved. `toolgate
// registry pin` lists each server and writes, for each enabled tool, the
// SHA-256 of its definition in canonical JSON and the definition itself
// (readable, and what a drift is diffed against) into PinsFile in the
// registry directory. serve then serves a tool only while the definition
// its server lists has that digest. The file is trusted as the fragments
// are (owned by root or toolgate's uid, writable by no one else, on a
// trusted path) and loaded with them: a pins file that is refused refuses
// the registry.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// PinsFile is the name of the pins file in the registry directory. It
// does not end in .toml, so it is never read as a fragment.
const PinsFile = "pins.json"

// PinsVersion is the only pins_version a pins file may declare.
const PinsVersion = 1

// MaxPinsSize bounds the pins file (32 MiB: 128 definitions at the
// 256 KiB a served downstream tool may have).
const MaxPinsSize = 32 << 20

// MaxPinDiff bounds the diff of a drifted definition as the log, the
// audit record and checkpoint_status carry it.
const MaxPinDiff = 16 << 10

// maxJSONDepth bounds the nesting of a canonicalised JSON value.
const maxJSONDepth = 512

// Pins are the approved definitions: for each server id, for each tool
// (its downstream name), its pin. A nil *Pins is a registry without a
// pins file: every tool is unpinned.
type Pins struct {
	// Path is the pins file.
	Path string
	// Servers maps a server id and a tool name to its pin.
	Servers map[string]map[string]Pin
}

// Pin is one approved definition.
type Pin struct {
	// SHA256 is the hex SHA-256 of Definition.
	SHA256 string
	// Definition is the tool's definition in canonical JSON
	// (CanonicalJSON): every key of the tool's object in its server's
	// tools/list.
	Definition []byte
}

// Lookup returns the pin of a server's tool.
func (p *Pins) Lookup(id, tool string) (Pin, bool) {
	if p == nil {
		return Pin{}, false
	}
	pin, ok := p.Servers[id][tool]
	return pin, ok
}

// Count is the number of pins, and of servers with any.
func (p *Pins) Count() (tools, servers int) {
	if p == nil {
		return 0, 0
	}
	for _, ts := range p.Servers {
		if len(ts) > 0 {
			tools += len(ts)
			servers++
		}
	}
	return tools, servers
}

// PinState is how a listed definition compares with its pin.
type PinState string

// The outcomes of PinCheck.
const (
	// PinMatch: the definition is the pinned one.
	PinMatch PinState = "match"
	// PinDrift: the tool is pinned, and the definition differs.
	PinDrift PinState = "drift"
	// PinNone: the tool has no pin.
	PinNone PinState = "none"
)

// PinCheck is the comparison of a listed definition with its pin.
type PinCheck struct {
	State PinState
	// Pin is the pinned digest (match and drift).
	Pin string
	// Diff is, for a drift, the unified diff from the pinned definition to
	// the listed one (DefinitionText of each), at most MaxPinDiff bytes.
	Diff string
}

// Check compares the listed definition of a server's tool (canonical JSON,
// and its Digest) with its pin.
func (p *Pins) Check(id, tool string, def []byte, digest string) PinCheck {
	pin, ok := p.Lookup(id, tool)
	switch {
	case !ok:
		return PinCheck{State: PinNone}
	case pin.SHA256 == digest:
		return PinCheck{State: PinMatch, Pin: pin.SHA256}
	}
	return PinCheck{State: PinDrift, Pin: pin.SHA256, Diff: DefinitionDiff("pinned "+tool+" (sha256 "+short(pin.SHA256)+")", pin.Definition,
		"listed "+tool+" (sha256 "+short(digest)+")", def)}
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

// DefinitionDiff is the unified diff between two definitions (canonical
// JSON) as DefinitionText renders them, cut at MaxPinDiff bytes.
func DefinitionDiff(aName string, a []byte, bName string, b []byte) string {
	d := UnifiedDiff(aName, bName, DefinitionText(a), DefinitionText(b))
	if len(d) > MaxPinDiff {
		cut := MaxPinDiff
		for cut > 0 && !utf8.RuneStart(d[cut]) {
			cut--
		}
		d = d[:cut] + fmt.Sprintf("\n[diff cut at %d of %d bytes]\n", cut, len(d))
	}
	return d
}

// DefinitionText renders a definition (canonical JSON) for a reader: one
// key per line, indented, keys in canonical order.
func DefinitionText(def []byte) string {
	var b bytes.Buffer
	if err := json.Indent(&b, def, "", "  "); err != nil {
		return string(def)
	}
	b.WriteByte('\n')
	return b.String()
}

// Digest is the hex SHA-256 of a canonical definition.
func Digest(def []byte) string {
	sum := sha256.Sum256(def)
	return hex.EncodeToString(sum[:])
}

// CanonicalJSON returns raw, one JSON value, in the canonical form pins
// are computed over: no insignificant whitespace; object keys sorted by
// their UTF-16 code units (as RFC 8785 sorts them); strings escaped only
// where JSON requires (", \, and control characters, as \b \t \n \f \r or
// \u00xx); numbers as written. It refuses what could be read two ways:
// bytes that are not UTF-8, an unpaired surrogate escape, a key repeated
// in one object, and anything but exactly one value.
func CanonicalJSON(raw []byte) ([]byte, error) {
	if !utf8.Valid(raw) {
		return nil, errors.New("not UTF-8")
	}
	if !json.Valid(raw) {
		var v any
		err := json.Unmarshal(raw, &v) // says what is wrong, and where
		if err == nil {
			err = errors.New("invalid JSON")
		}
		if strings.Contains(err.Error(), "after top-level value") {
			return nil, errors.New("more than one JSON value")
		}
		return nil, fmt.Errorf("decode: %w", err)
	}
	if err := checkSurrogates(raw); err != nil {
		return nil, err
	}
	c := canonicaliser{in: raw}
	c.out.Grow(len(raw))
	if err := c.value(0); err != nil {
		return nil, err
	}
	return c.out.Bytes(), nil
}

// canonicaliser re-encodes a valid JSON value; path is where it is (keys
// and [i] indexes), rendered only for a refusal.
type canonicaliser struct {
	in   []byte
	pos  int
	out  bytes.Buffer
	path []pathSeg
}

func (c *canonicaliser) where() string { return renderPath(c.path) }

func (c *canonicaliser) skipSpace() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canonicaliser) value(depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("%s: nested deeper than %d", c.where(), maxJSONDepth)
	}
	c.skipSpace()
	switch c.in[c.pos] {
	case '{':
		return c.object(depth)
	case '[':
		c.pos++
		c.out.WriteByte('[')
		for i := 0; ; i++ {
			c.skipSpace()
			if c.in[c.pos] == ']' {
				c.pos++
				break
			}
			if i > 0 {
				c.pos++ // the comma
				c.out.WriteByte(',')
			}
			c.path = append(c.path, pathSeg{index: i})
			err := c.value(depth + 1)
			c.path = c.path[:len(c.path)-1]
			if err != nil {
				return err
			}
		}
		c.out.WriteByte(']')
	case '"':
		raw := c.stringToken()
		if bytes.IndexByte(raw, '\\') < 0 {
			c.out.Write(raw) // nothing to unescape: already canonical
			break
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("%s: %w", c.where(), err)
		}
		writeJSONString(&c.out, s)
	default: // a number, true, false or null: as written
		start := c.pos
		for c.pos < len(c.in) && !strings.ContainsRune(" \t\n\r,]}", rune(c.in[c.pos])) {
			c.pos++
		}
		c.out.Write(c.in[start:c.pos])
	}
	return nil
}

// stringToken returns the string literal at pos, quotes included.
func (c *canonicaliser) stringToken() []byte {
	start := c.pos
	c.pos++
	for c.in[c.pos] != '"' {
		if c.in[c.pos] == '\\' {
			c.pos++
		}
		c.pos++
	}
	c.pos++
	return c.in[start:c.pos]
}

func (c *canonicaliser) object(depth int) error {
	type member struct {
		key        string
		start, end int // of its canonical value in out
	}
	c.pos++
	base := c.out.Len()
	var members []member
	seen := map[string]bool{}
	for {
		c.skipSpace()
		if c.in[c.pos] == '}' {
			c.pos++
			break
		}
		if c.in[c.pos] == ',' {
			c.pos++
			c.skipSpace()
		}
		raw := c.stringToken()
		key := string(raw[1 : len(raw)-1])
		if bytes.IndexByte(raw, '\\') >= 0 {
			if err := json.Unmarshal(raw, &key); err != nil {
				return fmt.Errorf("%s: %w", c.where(), err)
			}
		}
		if seen[key] {
			return fmt.Errorf("%s: key %s twice in one object (a reader could take either)", c.where(), strconv.QuoteToASCII(key))
		}
		seen[key] = true
		c.skipSpace()
		c.pos++ // the colon
		start := c.out.Len()
		c.path = append(c.path, keySeg(key))
		err := c.value(depth + 1)
		c.path = c.path[:len(c.path)-1]
		if err != nil {
			return err
		}
		members = append(members, member{key, start - base, c.out.Len() - base})
	}
	vals := bytes.Clone(c.out.Bytes()[base:])
	c.out.Truncate(base)
	slices.SortFunc(members, func(x, y member) int { return compareUTF16(x.key, y.key) })
	c.out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			c.out.WriteByte(',')
		}
		writeJSONString(&c.out, m.key)
		c.out.WriteByte(':')
		c.out.Write(vals[m.start:m.end])
	}
	c.out.WriteByte('}')
	return nil
}

// compareUTF16 orders strings by their UTF-16 code units.
func compareUTF16(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

func writeJSONString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// checkSurrogates refuses a \u escape of half a surrogate pair without
// its other half: a JSON decoder turns it into U+FFFD (Go) or keeps it
// (JavaScript), so two readers would not read the same text.
func checkSurrogates(raw []byte) error {
	hex4 := func(i int) (uint64, bool) {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		return v, err == nil
	}
	in := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !in {
			in = c == '"'
			continue
		}
		switch c {
		case '"':
			in = false
		case '\\':
			v, ok := hex4(i)
			if !ok {
				i++ // a one-character escape
				continue
			}
			if v >= 0xD800 && v <= 0xDBFF {
				if w, ok := hex4(i + 6); ok && w >= 0xDC00 && w <= 0xDFFF {
					i += 11
					continue
				}
			}
			if v >= 0xD800 && v <= 0xDFFF {
				return fmt.Errorf("an unpaired surrogate escape \\u%04x at byte %d", v, i)
			}
			i += 5
		}
	}
	return nil
}

// --- the pins file ---------------------------------------------------------

// pinsDoc is the pins file as written.
type pinsDoc struct {
	PinsVersion *int                     `json:"pins_version"`
	Servers     map[string]pinsServerDoc `json:"servers"`
}

type pinsServerDoc struct {
	Tools map[string]pinDoc `json:"tools"`
}

type pinDoc struct {
	SHA256     string          `json:"sha256"`
	Definition json.RawMessage `json:"definition"`
}

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// loadPins reads dir's pins file: nil when there is none.
func loadPins(dir string) (*Pins, []error) {
	path := filepath.Join(dir, PinsFile)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	data, err := readTrusted(path, MaxPinsSize, "approve any definition of a downstream tool")
	if err != nil {
		return nil, []error{err}
	}
	return ParsePins(path, data)
}

// ParsePins decodes and checks the bytes of a pins file named path.
// Every pin must be the digest of its definition, name its own tool, and
// hold only text CheckDefinitionText accepts: a file edited by hand, or
// truncated, is refused rather than trusted.
func ParsePins(path string, data []byte) (*Pins, []error) {
	fail := func(p string, err error) []error {
		return []error{&Error{File: path, Path: p, Err: err}}
	}
	if _, err := CanonicalJSON(data); err != nil {
		return nil, fail("", err)
	}
	var doc pinsDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fail("", fmt.Errorf("decode: %w", err))
	}
	switch {
	case doc.PinsVersion == nil:
		return nil, fail("pins_version", fmt.Errorf("required: want %d", PinsVersion))
	case *doc.PinsVersion != PinsVersion:
		return nil, fail("pins_version", fmt.Errorf("%d is not supported: want %d", *doc.PinsVersion, PinsVersion))
	}
	p := &Pins{Path: path, Servers: map[string]map[string]Pin{}}
	var errs []error
	for _, id := range sortedKeys(doc.Servers) {
		if !serverIDRE.MatchString(id) {
			errs = append(errs, &Error{File: path, Path: jsonPath("servers", id), Err: errors.New("not a server id")})
			continue
		}
		tools := map[string]Pin{}
		for _, tool := range sortedKeys(doc.Servers[id].Tools) {
			where := jsonPath("servers."+id+".tools", tool)
			pin, err := checkPin(tool, doc.Servers[id].Tools[tool])
			if err != nil {
				errs = append(errs, &Error{File: path, Path: where, Err: err})
				continue
			}
			tools[tool] = pin
		}
		p.Servers[id] = tools
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

// checkPin checks one entry of the pins file.
func checkPin(tool string, d pinDoc) (Pin, error) {
	if !downstreamToolRE.MatchString(tool) {
		return Pin{}, errors.New("not a tool name")
	}
	if !sha256RE.MatchString(d.SHA256) {
		return Pin{}, errors.New("sha256: want 64 lowercase hex digits")
	}
	if len(d.Definition) == 0 {
		return Pin{}, errors.New("definition: required")
	}
	def, err := CanonicalJSON(d.Definition)
	if err != nil {
		return Pin{}, fmt.Errorf("definition: %w", err)
	}
	var head struct {
		Name *string `json:"name"`
	}
	if json.Unmarshal(def, &head) != nil || head.Name == nil || *head.Name != tool {
		return Pin{}, fmt.Errorf("definition: its name is not %q", tool)
	}
	if got := Digest(def); got != d.SHA256 {
		return Pin{}, fmt.Errorf("sha256 %s is not the digest of its definition (%s): the file was changed by hand or cut short; run `toolgate registry pin` again", short(d.SHA256), short(got))
	}
	if err := CheckDefinitionText(def); err != nil {
		return Pin{}, fmt.Errorf("definition: %w", err)
	}
	return Pin{SHA256: d.SHA256, Definition: def}, nil
}

// RenderPins renders p as a pins file: indented JSON, servers and tools
// in sorted order, each definition readable in place. ParsePins reads it
// back to the same pins.
func RenderPins(p *Pins) ([]byte, error) {
	doc := struct {
		PinsVersion int                      `json:"pins_version"`
		Servers     map[string]pinsServerDoc `json:"servers"`
	}{PinsVersion, map[string]pinsServerDoc{}}
	if p != nil {
		for id, tools := range p.Servers {
			if len(tools) == 0 {
				continue
			}
			sd := pinsServerDoc{Tools: map[string]pinDoc{}}
			for tool, pin := range tools {
				sd.Tools[tool] = pinDoc{SHA256: pin.SHA256, Definition: pin.Definition}
			}
			doc.Servers[id] = sd
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("render pins: %w", err)
	}
	return b.Bytes(), nil
}
