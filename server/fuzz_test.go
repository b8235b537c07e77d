package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	rt "github.com/toolgate/toolgate/runtime"
)

// FuzzServeLine: no line, however malformed, stops the server or makes it
// write anything but JSON-RPC; the next valid request is answered.
func FuzzServeLine(f *testing.F) {
	for _, s := range []string{
		initLine,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"zeta","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/list"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`{"jsonrpc":"2.0","id":{},"method":"ping"}`,
		`garbage`,
	} {
		f.Add([]byte(s))
	}
	conf := loadConf(f, twoTools)
	f.Fuzz(func(t *testing.T, line []byte) {
		if len(line) > 64<<10 {
			return
		}
		for i, c := range line {
			if c == '\n' {
				line = line[:i] // one line per case
				break
			}
		}
		s := New(Options{Conf: conf, Direct: &fakeRunner{}, Sandbox: rt.ReadySandbox("bwrap", &fakeRunner{})})
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- s.ServeStdio(context.Background(), inR, outW)
			outW.Close()
		}()
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			sc := bufio.NewScanner(outR)
			sc.Buffer(make([]byte, 1<<20), 16<<20)
			for sc.Scan() {
				var m map[string]any
				if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m["jsonrpc"] != "2.0" {
					t.Errorf("stdout line is not JSON-RPC: %q", sc.Text())
				}
				if m["id"] == "fuzz-ping" {
					return
				}
			}
			t.Error("the server stopped before answering the next request")
		}()
		go func() {
			inW.Write(append(append([]byte(initLine), '\n'), append(line, '\n')...))
			inW.Write([]byte(`{"jsonrpc":"2.0","id":"fuzz-ping","method":"ping"}` + "\n"))
		}()
		select {
		case <-answered:
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer to the request after %q", line)
		}
		inW.Close()
		go io.Copy(io.Discard, outR)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("server did not stop after stdin closed")
		}
	})
}
