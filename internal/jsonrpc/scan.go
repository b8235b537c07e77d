package jsonrpc

import (
	"bytes"
	"encoding/json"
)

// maxIDBytes bounds the JSON of an id Scan keeps: a JSON-RPC id is
// a short string or a number; a longer one is treated as unreadable.
const maxIDBytes = 256

// Scan reads one JSON-RPC message as it streams past, without
// keeping it, and records what its top level says: the "id" member (a
// string or a number of at most maxIDBytes of JSON) and whether it has a
// "method" member (a request or a notification rather than a response).
// Its memory is constant whatever the size of the message, and members may
// come in any order: mcp-go writes the id first, the TypeScript SDK last.
//
// It is a tokenizer, not a validator: on malformed JSON it reports what it
// saw, which is at worst an id that matches no pending request.
type Scan struct {
	depth int  // nesting of objects and arrays
	str   bool // inside a string
	esc   bool // after a backslash inside a string
	kind  strKind
	top   topState // where we are in the top-level object (depth 1)
	field field    // which member's value is being read

	key     [8]byte // the current top-level key, if short
	keyN    int
	keyLong bool

	val     []byte // the id's JSON while it is read
	valLong bool

	id     []byte // the last complete id member, nil when none (or unreadable)
	method bool
	bad    bool // not an object: nothing to read
	done   bool // the top-level object ended
}

type strKind uint8

const (
	strOther strKind = iota
	strKey           // a key of the top-level object
	strID            // the value of its "id"
)

type topState uint8

const (
	topKey     topState = iota // before a key (or a comma)
	topColon                   // after a key, before its colon
	topValue                   // after the colon, before the value
	topLiteral                 // inside a number or literal value
	topNested                  // inside a string, object or array value
	topAfter                   // after a value, before a comma or the end
)

type field uint8

const (
	fieldOther field = iota
	fieldID
	fieldMethod
)

// ID returns the message's id as JSON, or nil when it has none that can be
// read (absent, null, not a scalar, or too long).
func (s *Scan) ID() json.RawMessage {
	if s.bad || len(s.id) == 0 || s.id[0] == 'n' {
		return nil
	}
	return json.RawMessage(s.id)
}

// HasMethod reports a top-level "method" member.
func (s *Scan) HasMethod() bool { return !s.bad && s.method }

// Write feeds the next bytes of the message; it never fails.
func (s *Scan) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 && !s.bad && !s.done {
		if s.str {
			b = s.inString(b)
			continue
		}
		if s.depth >= 2 || (s.depth == 1 && s.top == topNested) {
			// Inside a nested value: only quotes and brackets matter.
			i := bytes.IndexAny(b, "\"{}[]")
			if i < 0 {
				return n, nil
			}
			b = b[i:]
		}
		s.byte(b[0])
		b = b[1:]
	}
	return n, nil
}

// inString consumes string bytes up to and including the closing quote,
// keeping what a key or an id needs.
func (s *Scan) inString(b []byte) []byte {
	if s.esc {
		s.esc = false
		s.keep(b[:1])
		return b[1:]
	}
	before, after, ok := bytes.Cut(b, []byte{'"'})
	seg := b
	if ok {
		seg = before
	}
	if bs := bytes.IndexByte(seg, '\\'); bs >= 0 {
		s.keep(seg[:bs+1])
		s.esc = true
		return b[bs+1:]
	}
	s.keep(seg)
	if !ok {
		return nil
	}
	s.str = false
	switch s.kind {
	case strKey:
		s.top = topColon
	case strID:
		s.keep([]byte{'"'})
		s.endValue()
	default:
		if s.depth == 1 && s.top == topNested {
			s.top = topAfter
		}
	}
	return after
}

// keep records string bytes of a top-level key or of the id.
func (s *Scan) keep(b []byte) {
	switch s.kind {
	case strKey:
		if s.keyN+len(b) > len(s.key) {
			s.keyLong = true
			return
		}
		s.keyN += copy(s.key[s.keyN:], b)
	case strID:
		s.keepVal(b)
	}
}

func (s *Scan) keepVal(b []byte) {
	if len(s.val)+len(b) > maxIDBytes {
		s.valLong = true
		return
	}
	s.val = append(s.val, b...)
}

// endValue ends the value of the current top-level member.
func (s *Scan) endValue() {
	if s.field == fieldID {
		s.id = nil
		if !s.valLong && json.Valid(s.val) {
			s.id = append([]byte(nil), s.val...)
		}
	}
	s.val, s.valLong, s.field, s.kind = s.val[:0], false, fieldOther, strOther
	s.top = topAfter
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// byte handles one byte outside strings.
func (s *Scan) byte(c byte) {
	if s.depth == 0 {
		switch {
		case isSpace(c):
		case c == '{':
			s.depth, s.top = 1, topKey
		default:
			s.bad = true
		}
		return
	}
	if s.top == topLiteral {
		if isSpace(c) || c == ',' || c == '}' || c == ']' {
			s.endValue()
		} else {
			if s.field == fieldID {
				s.keepVal([]byte{c})
			}
			return
		}
	}
	switch c {
	case '"':
		s.str, s.kind = true, strOther
		if s.depth == 1 {
			switch s.top {
			case topKey:
				s.kind, s.keyN, s.keyLong = strKey, 0, false
			case topValue:
				s.top = topNested
				if s.field == fieldID {
					s.kind = strID
					s.keepVal([]byte{'"'})
				}
			}
		}
	case '{', '[':
		if s.depth == 1 && s.top == topValue {
			if s.field == fieldID {
				s.field = fieldOther // an object or array is no id
				s.id = nil
			}
			s.top = topNested
		}
		s.depth++
	case '}', ']':
		s.depth--
		switch s.depth {
		case 0:
			s.done = true
		case 1:
			s.top = topAfter
		}
	case ':':
		if s.depth == 1 && s.top == topColon {
			s.top, s.field = topValue, fieldOther
			if !s.keyLong {
				switch string(s.key[:s.keyN]) {
				case "id":
					s.field = fieldID
				case "method":
					s.field, s.method = fieldMethod, true
				}
			}
		}
	case ',':
		if s.depth == 1 {
			s.top = topKey
		}
	default:
		if s.depth == 1 && s.top == topValue && !isSpace(c) {
			s.top = topLiteral
			if s.field == fieldID {
				s.keepVal([]byte{c})
			}
		}
	}
}
