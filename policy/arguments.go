package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cedar-policy/cedar-go/types"
)

// The bounds of what a call's arguments may be for a policy to judge
// them. Over any, the call is denied (the arguments cannot be given to the
// policy, so no policy can permit it).
const (
	// MaxArgumentDepth bounds how deeply objects and arrays nest (the
	// arguments object itself is depth 1).
	MaxArgumentDepth = 32
	// MaxArgumentValues bounds the JSON values of all the arguments
	// (objects, arrays and scalars, counted each).
	MaxArgumentValues = 10000
	// MaxArgumentBytes bounds the text of all the arguments (Argument's
	// text, summed).
	MaxArgumentBytes = 1 << 20
)

// The types of an Argument (its type attribute).
const (
	argString  = "string"
	argInteger = "integer"
	argNumber  = "number"
	argBoolean = "boolean"
	argNull    = "null"
	argArray   = "array"
	argObject  = "object"
)

// maxExactFloat is 2^53: a float64 at or above it in magnitude may not be
// the integer the client sent.
const maxExactFloat = 1 << 53

// arguments converts a call's arguments (as encoding/json decodes them)
// into the tags of the Arguments entity: one Argument record per
// top-level argument, {type, text, long?}. A string's text is itself;
// any other value's is its canonical JSON (object keys sorted, no HTML
// escaping). An integer is "integer" with its value as long when it is
// exact (a json.Number in int64, or a float64 below 2^53 in magnitude);
// any other number is "number", text only, so a policy comparing longs
// never sees a rounded one. null is "null". nil arguments have no tags.
func arguments(v any) (types.Record, error) {
	if v == nil {
		return types.Record{}, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return types.Record{}, fmt.Errorf("the arguments are %s, not an object", kindOf(v))
	}
	b := &bounds{values: 1}
	if err := b.walk(v, 1); err != nil {
		return types.Record{}, err
	}
	m := make(types.RecordMap, len(obj))
	for k, val := range obj {
		a, err := argument(val)
		if err != nil {
			return types.Record{}, fmt.Errorf("argument %q: %w", bounded(k), err)
		}
		if b.bytes += len(a.text); b.bytes > MaxArgumentBytes {
			return types.Record{}, fmt.Errorf("over %d bytes", MaxArgumentBytes)
		}
		m[types.String(k)] = a.record()
	}
	return types.NewRecord(m), nil
}

// bounds counts what walk has seen.
type bounds struct {
	values, bytes int
}

// walk checks v's depth and count before anything renders it.
func (b *bounds) walk(v any, depth int) error {
	var children []any
	switch x := v.(type) {
	case map[string]any:
		for _, c := range x {
			children = append(children, c)
		}
	case []any:
		children = x
	default:
		return nil
	}
	if depth > MaxArgumentDepth {
		return fmt.Errorf("nested deeper than %d", MaxArgumentDepth)
	}
	for _, c := range children {
		if b.values++; b.values > MaxArgumentValues {
			return fmt.Errorf("over %d values", MaxArgumentValues)
		}
		if err := b.walk(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// arg is one Argument before it is a Cedar record.
type arg struct {
	typ   string
	text  string
	long  int64
	exact bool // long is set
}

func (a arg) record() types.Record {
	m := types.RecordMap{"type": types.String(a.typ), "text": types.String(a.text)}
	if a.exact {
		m["long"] = types.Long(a.long)
	}
	return types.NewRecord(m)
}

func argument(v any) (arg, error) {
	switch x := v.(type) {
	case nil:
		return arg{typ: argNull, text: "null"}, nil
	case string:
		return arg{typ: argString, text: x}, nil
	case bool:
		return arg{typ: argBoolean, text: strconv.FormatBool(x)}, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return arg{}, errors.New("not a JSON number")
		}
		text, err := canonical(x)
		if err != nil {
			return arg{}, err
		}
		if x == math.Trunc(x) && math.Abs(x) < maxExactFloat {
			return arg{typ: argInteger, text: strconv.FormatInt(int64(x), 10), long: int64(x), exact: true}, nil
		}
		return arg{typ: argNumber, text: text}, nil
	case json.Number:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return arg{typ: argInteger, text: strconv.FormatInt(n, 10), long: n, exact: true}, nil
		}
		f, err := x.Float64()
		if err != nil {
			return arg{}, fmt.Errorf("not a JSON number: %w", err)
		}
		text, err := canonical(f)
		if err != nil {
			return arg{}, err
		}
		return arg{typ: argNumber, text: text}, nil
	case []any:
		text, err := canonical(x)
		return arg{typ: argArray, text: text}, err
	case map[string]any:
		text, err := canonical(x)
		return arg{typ: argObject, text: text}, err
	}
	return arg{}, fmt.Errorf("a %T is not a JSON value", v)
}

// canonical renders v as JSON with its object keys sorted and nothing
// escaped for HTML.
func canonical(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

func kindOf(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, json.Number:
		return "a number"
	}
	return fmt.Sprintf("a %T", v)
}

// bounded cuts a name quoted in an error.
func bounded(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "") + "..."
	}
	return s
}

// ArgumentsOf is what a policy judges of a call's raw arguments: their
// decoding, once it is shown that every reader decodes them alike. JSON
// that names a key twice in one object, or two keys equal but for case,
// means one thing to this decoder (the last wins, case matters) and
// another to a tool's (the first may win; Go's encoding/json matches
// fields regardless of case): the policy would judge arguments the tool
// never sees, so such arguments are refused.
func ArgumentsOf(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	if err := unambiguous(json.NewDecoder(bytes.NewReader(raw)), 1); err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("the arguments are not JSON: %w", err)
	}
	return v, nil
}

// unambiguous reads one JSON value from dec and fails on an object that
// names a key twice, or two keys that fold to the same case.
func unambiguous(dec *json.Decoder, depth int) error {
	if depth > MaxArgumentDepth {
		return fmt.Errorf("nested deeper than %d", MaxArgumentDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("the arguments are not JSON: %w", err)
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]string{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return fmt.Errorf("the arguments are not JSON: %w", err)
			}
			k, _ := kt.(string)
			fold := strings.ToLower(strings.ToUpper(k))
			if prev, ok := seen[fold]; ok {
				return fmt.Errorf("keys %q and %q of one object are the same to some decoders (a key twice, or two equal but for case): refused under a policy", bounded(prev), bounded(k))
			}
			seen[fold] = k
			if err := unambiguous(dec, depth+1); err != nil {
				return err
			}
		}
		_, err = dec.Token() // }
	case json.Delim('['):
		for dec.More() {
			if err := unambiguous(dec, depth+1); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ]
	}
	if err != nil {
		return fmt.Errorf("the arguments are not JSON: %w", err)
	}
	return nil
}
