package main

import (
	"bytes"
	"flag"
	"maps"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/server"
)

// TestServeRateFlag: a malformed --rate, or a second one for a principal,
// is refused at parse with the flag and the value (exit 2, nothing on
// stdout).
func TestServeRateFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "alice=fast"}, `toolgate serve: --rate "alice=fast": the rate is not N/s`},
		{[]string{"--rate", "alice=0/s"}, `toolgate serve: --rate "alice=0/s": the rate must be above 0 calls a second`},
		{[]string{"--rate", "*=1/s:0"}, `toolgate serve: --rate "*=1/s:0": the burst "0" is not a whole number of 1 or more`},
		{[]string{"--rate", "2/s"}, `toolgate serve: --rate "2/s": no =`},
		{[]string{"--rate", "alice=1/s", "--rate", "alice=2/s:4"}, `toolgate serve: --rate "alice=2/s:4": principal "alice" already has a rule, alice=1/s:1: give one --rate per principal`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"serve"}, tc.args...), strings.NewReader(""), &stdout, &stderr)
		if code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("serve %v: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, stdout.String(), stderr.String(), tc.want)
		}
	}
}

// TestRateFlagsAccepted: each value is one rule, the burst N rounded up
// when not given; over stdio a rule of a principal other than stdio and *
// is named as applying to no call.
func TestRateFlagsAccepted(t *testing.T) {
	var f rateFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse([]string{"--rate", "alice=2/s:5", "--rate", "*=0.5/s", "--rate", "stdio=10/s", "--rate", "bob=1.5/s"}); err != nil {
		t.Fatal(err)
	}
	if err := f.check(); err != nil {
		t.Fatal(err)
	}
	want := server.RateRules{
		"alice": {Principal: "alice", PerSecond: 2, Burst: 5},
		"*":     {Principal: "*", PerSecond: 0.5, Burst: 1},
		"stdio": {Principal: "stdio", PerSecond: 10, Burst: 10},
		"bob":   {Principal: "bob", PerSecond: 1.5, Burst: 2},
	}
	if !maps.Equal(f.rules, want) {
		t.Errorf("rules = %v, want %v", f.rules, want)
	}
	var buf bytes.Buffer
	log := logrus.New()
	log.SetOutput(&buf)
	f.warn(log, false)
	if buf.Len() != 0 {
		t.Errorf("over HTTP: warned %q", buf.String())
	}
	f.warn(log, true)
	got := buf.String()
	if strings.Count(got, "applies to no call") != 2 || !strings.Contains(got, `the rule of \"alice\"`) || !strings.Contains(got, `the rule of \"bob\"`) {
		t.Errorf("over stdio: warned %q, want alice's and bob's rules named, not stdio's or *'s", got)
	}
}
