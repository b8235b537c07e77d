package builtin

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeArgs(t *testing.T) {
	type nested struct {
		Title string `json:"title"`
		Line  int    `json:"line,omitempty"`
	}
	type args struct {
		Path  *string   `json:"path"`
		Index *int      `json:"index"`
		Flag  *bool     `json:"flag"`
		Items *[]nested `json:"items"`
	}
	for _, tc := range []struct {
		name    string
		in      string
		wantErr string
		check   func(a args) bool
	}{
		{name: "absent", in: ``, check: func(a args) bool { return a.Path == nil && a.Index == nil }},
		{name: "null payload", in: `null`, check: func(a args) bool { return a.Path == nil }},
		{name: "empty object", in: `{}`, check: func(a args) bool { return a.Path == nil }},
		{
			name: "all set", in: `{"path":"a","index":2,"flag":false,"items":[{"title":"t","line":3}]}`,
			check: func(a args) bool {
				return *a.Path == "a" && *a.Index == 2 && !*a.Flag && (*a.Items)[0].Line == 3
			},
		},
		{name: "array payload", in: `[1]`, wantErr: "must be a JSON object, got an array"},
		{name: "string payload", in: `"x"`, wantErr: "must be a JSON object, got a string"},
		{name: "unknown property", in: `{"path":"a","recursive":true}`, wantErr: `unknown property "recursive"`},
		{name: "unknown nested property", in: `{"items":[{"title":"t","sev":"x"}]}`, wantErr: `unknown property "sev"`},
		{name: "duplicate property", in: `{"path":"a","path":"b"}`, wantErr: `duplicate property "path"`},
		{name: "null value", in: `{"path":null}`, wantErr: `property "path" is null`},
		{name: "string for integer", in: `{"index":"2"}`, wantErr: `property "index": want integer, got string`},
		{name: "fraction for integer", in: `{"index":1.5}`, wantErr: `property "index": want integer`},
		{name: "number for string", in: `{"path":3}`, wantErr: `property "path": want string, got number`},
		{name: "string for boolean", in: `{"flag":"true"}`, wantErr: `property "flag": want boolean`},
		{name: "object for array", in: `{"items":{}}`, wantErr: `property "items": want array`},
		{name: "wrong nested type", in: `{"items":[{"title":1}]}`, wantErr: `want string, got number`},
		{name: "trailing data", in: `{} {}`, wantErr: "trailing data"},
		{name: "malformed", in: `{"path":`, wantErr: "arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a args
			err := decodeArgs(json.RawMessage(tc.in), &a)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("decodeArgs(%s) = %v, want an error containing %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("decodeArgs(%s) = %v", tc.in, err)
			}
			if !tc.check(a) {
				t.Fatalf("decodeArgs(%s) decoded %+v", tc.in, a)
			}
		})
	}
}
