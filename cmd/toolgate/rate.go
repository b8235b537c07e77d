package main

import (
	"flag"
	"fmt"
	"sort"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/server"
)

// rateFlags is serve's --rate: per-principal rate limits of tools/call,
// over either transport.
type rateFlags struct {
	values listFlag
	rules  server.RateRules
}

func (f *rateFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.values, "rate", "PRINCIPAL=N/s[:BURST]: PRINCIPAL's tools/call rate (N may be fractional: 0.5/s; BURST, calls at once after a pause, defaults to N rounded up); * for every principal without a rule of its own, each with a bucket of its own; over stdio the one principal is stdio; a call over it is answered isError (over HTTP 429 with Retry-After), checkpoint_status is never limited (repeatable)")
}

// check parses the values: a malformed one, or a second rule for one
// principal, is an error naming the flag and the value.
func (f *rateFlags) check() error {
	f.rules = server.RateRules{}
	for _, v := range f.values {
		r, err := server.ParseRate(v)
		if err != nil {
			return err
		}
		if err := f.rules.Add(r); err != nil {
			return fmt.Errorf("--rate %q: %w", v, err)
		}
	}
	return nil
}

// warn says, over stdio, which rules can apply to no call: stdio's one
// principal is "stdio", so only its rule and *'s count.
func (f *rateFlags) warn(log *logrus.Logger, stdio bool) {
	if !stdio {
		return
	}
	var unused []string
	for who := range f.rules {
		if who != server.StdioPrincipal && who != server.AnyPrincipal {
			unused = append(unused, who)
		}
	}
	sort.Strings(unused)
	for _, who := range unused {
		log.WithField("principal", who).Warnf("--rate: over stdio the one principal is %q: the rule of %q applies to no call", server.StdioPrincipal, who)
	}
}
