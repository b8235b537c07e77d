package builtin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// decodeArgs decodes a call's arguments into v (a pointer to a struct whose
// optional fields are pointers) strictly: the payload must be one JSON
// object (absent or null counts as {}), without duplicate or unknown
// properties, without null values, and with every value of the declared
// type. Nothing is defaulted here: a field that is absent stays nil and the
// tool applies the default its schema documents.
func decodeArgs(args json.RawMessage, v any) error {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		trimmed = []byte("{}")
	}
	if err := checkObject(trimmed); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return argError(err)
	}
	return nil
}

// checkObject checks that b is exactly one JSON object whose top-level
// properties are unique and not null.
func checkObject(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("arguments: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("arguments must be a JSON object, got %s", jsonKind(tok))
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("arguments: %w", err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("arguments: duplicate property %q", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("arguments: property %q: %w", key, err)
		}
		if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return fmt.Errorf("arguments: property %q is null: omit it instead", key)
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("arguments: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("arguments: trailing data after the object")
	}
	return nil
}

func jsonKind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			return "an array"
		}
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", tok)
}

// argError rewrites encoding/json's errors in the terms of the schema.
func argError(err error) error {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		field := te.Field
		if field == "" {
			field = "(arguments)"
		}
		return fmt.Errorf("arguments: property %q: want %s, got %s", field, schemaType(te.Type.Kind().String()), te.Value)
	}
	if msg, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("arguments: unknown property %s", msg)
	}
	return fmt.Errorf("arguments: %w", err)
}

func schemaType(goKind string) string {
	switch goKind {
	case "int", "int64", "int32", "uint", "uint64":
		return "integer"
	case "float64":
		return "number"
	case "bool":
		return "boolean"
	case "string":
		return "string"
	case "slice":
		return "array"
	case "struct", "map":
		return "object"
	}
	return goKind
}
