package jsonrpc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestEnvelopeScan(t *testing.T) {
	big := strings.Repeat(`a\"{[}]`, 1000)
	for _, tc := range []struct {
		name, in string
		id       string // "" for none
		method   bool
	}{
		{name: "id first", in: `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"` + big + `"}]}}`, id: "7"},
		{name: "id last", in: `{"result":{"content":[{"text":"` + big + `","x":[1,{"id":9}]}]},"jsonrpc":"2.0","id":7}`, id: "7"},
		{name: "string id", in: `{"id":"toolgate-tools-list-1","result":{}}`, id: `"toolgate-tools-list-1"`},
		{name: "string id with escapes", in: `{"id":"a\"b\\","result":{}}`, id: `"a\"b\\"`},
		{name: "spaces", in: " {\n \"id\" : 12 ,\"result\" : null } ", id: "12"},
		{name: "nested id is not the id", in: `{"result":{"id":5},"error":null}`},
		{name: "null id", in: `{"id":null,"error":{"code":1}}`},
		{name: "object id", in: `{"id":{"a":1},"result":{}}`},
		{name: "too long id", in: `{"id":"` + strings.Repeat("x", maxIDBytes) + `","result":{}}`},
		{name: "long key", in: `{"idididididid":3,"result":{}}`},
		{name: "a request", in: `{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{"x":"` + big + `"}}`, id: "3", method: true},
		{name: "a notification", in: `{"method":"notifications/message","params":{"data":"` + big + `"}}`, method: true},
		{name: "an array", in: `[{"id":1}]`},
		{name: "garbage", in: `xx{"id":1}`},
		{name: "last id wins", in: `{"id":1,"result":{},"id":2}`, id: "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Fed whole, then byte by byte: the result must not depend on
			// how the stream is cut.
			for _, step := range []int{len(tc.in), 1, 3, 64} {
				var s Scan
				for i := 0; i < len(tc.in); i += step {
					s.Write([]byte(tc.in[i:min(i+step, len(tc.in))]))
				}
				if got := string(s.ID()); got != tc.id || s.HasMethod() != tc.method {
					t.Errorf("step %d: id %q method %v, want %q %v", step, got, s.HasMethod(), tc.id, tc.method)
				}
			}
		})
	}
}

// TestLineCap: lines up to the cap pass through unchanged, however the
// reads fall; a longer line reaches the reader as at most the cap, ended
// at once, then what the oversize function returns, and the next line is
// whole again.
func TestLineCap(t *testing.T) {
	long := `{"id":4,"result":"` + strings.Repeat("x", 100) + `"}`
	in := `{"id":1}` + "\n" + long + "\n" + `{"id":2}` + "\n" + `{"method":"m","x":"` + strings.Repeat("y", 100) + `"}` + "\n" + `{"id":3}` + "\n" + `{"result":"` + strings.Repeat("z", 100) + `"}`
	for _, reader := range []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{{"whole", func(r io.Reader) io.Reader { return r }}, {"one byte at a time", iotest.OneByteReader}} {
		t.Run(reader.name, func(t *testing.T) {
			var got []Oversize
			c := NewLineCap(reader.wrap(strings.NewReader(in)), 70, func(o Oversize) ([]byte, error) {
				got = append(got, o)
				if o.ID != nil {
					return ErrorLine(o.ID, -32099, "over"), nil
				}
				return nil, nil
			})
			out, err := io.ReadAll(iotest.OneByteReader(c))
			if err != nil {
				t.Fatal(err)
			}
			// What passes of an oversized line depends on how the reads
			// fall; it is never more than the cap, and never valid JSON
			// (mcp-go skips it).
			var lines []string
			for l := range strings.SplitSeq(string(out), "\n") {
				if len(l) > 70 {
					t.Errorf("a line of %d bytes passed: %.80q", len(l), l)
				}
				if json.Valid([]byte(l)) {
					lines = append(lines, l)
				}
			}
			want := []string{`{"id":1}`, `{"jsonrpc":"2.0","id":4,"error":{"code":-32099,"message":"over"}}`, `{"id":2}`, `{"id":3}`}
			if strings.Join(lines, "\n") != strings.Join(want, "\n") {
				t.Errorf("LineCap passed\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
			}
			if len(got) != 3 || got[0].Size != int64(len(long)) || string(got[0].ID) != "4" || !got[1].Method || got[2].ID != nil || got[2].Method {
				t.Errorf("oversize calls = %+v", got)
			}
		})
	}
}

// TestSSECap: events up to the cap pass through unchanged; a longer one
// is ended where the reader is and followed by the answer for its id, read
// from its data lines whatever their number.
func TestSSECap(t *testing.T) {
	big := "event: message\r\ndata: {\"result\":\"" + strings.Repeat("x", 60) + "\",\r\ndata: \"id\":5}\r\n\r\n"
	in := "id: 1\ndata: {\"id\":1}\n\n" + big + "data:{\"id\":2}\n\n"
	for _, reader := range []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{{"whole", func(r io.Reader) io.Reader { return r }}, {"one byte at a time", iotest.OneByteReader}} {
		t.Run(reader.name, func(t *testing.T) {
			var got []Oversize
			c := NewSSECap(io.NopCloser(reader.wrap(strings.NewReader(in))), 50, func(o Oversize) ([]byte, error) {
				got = append(got, o)
				return ErrorLine(o.ID, -32099, "over"), nil
			})
			out, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			s := string(out)
			if !strings.HasPrefix(s, "id: 1\ndata: {\"id\":1}\n\nevent: message\r\n") || !strings.HasSuffix(s, "\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":-32099,\"message\":\"over\"}}\n\ndata:{\"id\":2}\n\n") {
				t.Errorf("SSECap passed %q", s)
			}
			if strings.Contains(s, strings.Repeat("x", 60)) {
				t.Errorf("the oversized event passed whole: %q", s)
			}
			if len(got) != 1 || got[0].Size != int64(len(big)-2) || string(got[0].ID) != "5" {
				t.Errorf("oversize calls = %+v, want one of %d bytes, id 5", got, len(big)-2)
			}
		})
	}
}

// TestLineReader: lines up to the cap come whole, however the reads fall;
// a longer one is never returned, only reported with its size and what
// its envelope said, and the next line is whole again; the input may end
// inside either.
func TestLineReader(t *testing.T) {
	long := `{"id":4,"method":"tools/call","params":{"x":"` + strings.Repeat("x", 100) + `"}}`
	for _, tc := range []struct {
		name, in string
		want     []string // a line, or "over SIZE ID METHOD"
	}{
		{"lines", "{\"id\":1}\n\n{\"id\":2}\n", []string{"{\"id\":1}\n", "\n", "{\"id\":2}\n"}},
		{"long between", "{\"id\":1}\n" + long + "\n{\"id\":2}\n", []string{"{\"id\":1}\n", fmt.Sprintf("over %d 4 true", len(long)), "{\"id\":2}\n"}},
		{"exactly the cap", strings.Repeat("a", 70) + "\n", []string{strings.Repeat("a", 70) + "\n"}},
		{"one over", strings.Repeat("a", 71) + "\n", []string{"over 71  false"}},
		{"last line unended", "{\"id\":1}\n{\"id\":2}", []string{"{\"id\":1}\n", "{\"id\":2}"}},
		{"ends inside a long line", "{\"id\":1}\n" + long, []string{"{\"id\":1}\n", fmt.Sprintf("over %d 4 true", len(long))}},
	} {
		for _, reader := range []struct {
			name string
			wrap func(io.Reader) io.Reader
		}{{"whole", func(r io.Reader) io.Reader { return r }}, {"one byte at a time", iotest.OneByteReader}} {
			t.Run(tc.name+"/"+reader.name, func(t *testing.T) {
				l := NewLineReader(reader.wrap(strings.NewReader(tc.in)), 70)
				var got []string
				for {
					line, over, err := l.Next()
					switch {
					case over != nil:
						got = append(got, fmt.Sprintf("over %d %s %v", over.Size, over.ID, over.Method))
					case len(line) > 0:
						got = append(got, string(line))
					}
					if err != nil {
						if !errors.Is(err, io.EOF) {
							t.Fatal(err)
						}
						break
					}
				}
				if strings.Join(got, "|") != strings.Join(tc.want, "|") {
					t.Errorf("Next gave %q, want %q", got, tc.want)
				}
			})
		}
	}
}
