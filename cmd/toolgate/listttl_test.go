package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// TestServeListTTLFlag: --list-ttl takes a Go duration, 0 included, and
// defaults to a minute; a negative one, or one that is no duration, stops
// serve (exit 2, nothing on stdout) naming the flag and the value.
func TestServeListTTLFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, time.Minute},
		{[]string{"--list-ttl", "0"}, 0},
		{[]string{"--list-ttl", "90s"}, 90 * time.Second},
		{[]string{"--list-ttl", "1h"}, time.Hour},
	} {
		var f serveFlags
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("serve %v: %v", tc.args, err)
		}
		if err := f.check(); err != nil || f.listTTL != tc.want {
			t.Errorf("serve %v: --list-ttl %s (%v), want %s", tc.args, f.listTTL, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--list-ttl", "-1s"}, "toolgate serve: --list-ttl -1s: want 0 (immediately stale) or more"},
		{[]string{"--list-ttl", "-1ms"}, "toolgate serve: --list-ttl -1ms: want 0 (immediately stale) or more"},
		{[]string{"--list-ttl", "60"}, `invalid value "60" for flag -list-ttl: parse error`},
		{[]string{"--list-ttl", "soon"}, `invalid value "soon" for flag -list-ttl: parse error`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"serve", "--conf", "/nonexistent/tools.conf"}, tc.args...), strings.NewReader(""), &stdout, &stderr)
		if code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("serve %v: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, stdout.String(), stderr.String(), tc.want)
		}
	}
}
