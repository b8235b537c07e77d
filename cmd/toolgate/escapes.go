package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
)

// keepEscapes is serve's --keep-escapes: the tools whose output keeps its
// terminal control sequences. A tools.conf tool line's fields are fixed
// by the seed's grammar (and an unknown directive refuses the file), so
// the exception is a flag of serve, as every other setting is, naming the
// tools (external or downstream, ID__TOOL) by their served names.
type keepEscapes []string

func (k *keepEscapes) register(fs *flag.FlagSet) {
	fs.Func("keep-escapes", "comma-separated names of external or downstream tools (ID__TOOL) whose output keeps its terminal control sequences (colour, cursor moves); every other tool's are replaced by visible stand-ins (ESC by U+241B). Repeatable", func(v string) error {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.TrimSpace(name)
			if name == "" || strings.ContainsAny(name, " \t\n\"'") || len(name) > 256 {
				return fmt.Errorf("%q is not a tool name", name)
			}
			*k = append(*k, name)
		}
		return nil
	})
}

// check matches the names with what serve will serve: an external of the
// loaded tools.conf, or an enabled tool of the loaded registry. A name
// that matches nothing is an error when every name is known (conf and
// registry loaded or absent), and is logged otherwise: a refused conf or
// registry serves none of its tools, so a name of one cannot be told from
// a typo.
func (k keepEscapes) check(c *conf.Config, r *registry.Registry, log *logrus.Logger) error {
	known := map[string]bool{}
	if c.State == conf.StateLoaded {
		for _, t := range c.Tools {
			known[t.Name] = true
		}
	}
	if r.State == conf.StateLoaded {
		for _, srv := range r.Servers {
			for _, tool := range srv.EnabledTools {
				known[srv.ServedName(tool)] = true
			}
		}
	}
	complete := c.State != conf.StateRefused && r.State != conf.StateRefused
	for _, name := range k {
		if known[name] {
			continue
		}
		if complete {
			return fmt.Errorf("--keep-escapes %s: no external (tools.conf %s) or downstream tool of that name; built-in results are never changed", name, c.Path)
		}
		log.WithField("tool", name).Warn("--keep-escapes names no tool served (the tools.conf or the registry is refused)")
	}
	return nil
}
