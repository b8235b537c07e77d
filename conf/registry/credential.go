package registry

import (
	"errors"
	"fmt"
	"maps"
	"net/textproto"
	"path/filepath"
	"slices"

	"github.com/toolgate/toolgate/bundle"
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/egress/allowlist"
)

// checkCredentials: a sandboxed stdio server with allowed_hosts may name a
// credential for a listed destination (never a wildcard), with a header
// that is not the connection's or the proxy's own and an absolute secret
// file; the file itself is read at normalise (entryCredentials).
func checkCredentials(e *entry) []error {
	if e.foreign("egress_credentials") || e.raw.Credentials == nil {
		return nil
	}
	if e.raw.AllowedHosts == nil {
		return []error{e.errf([]string{"egress_credentials"}, errors.New("needs allowed_hosts: a credential goes to a listed destination, through toolgate's proxy"))}
	}
	listedHosts, err := allowlist.ParseList(*e.raw.AllowedHosts)
	if err != nil {
		return nil // checkAllowedHosts says why
	}
	var errs []error
	for _, dest := range slices.Sorted(maps.Keys(e.raw.Credentials)) {
		c := e.raw.Credentials[dest]
		at := []string{"egress_credentials", dest}
		r, err := conf.CredentialDest(dest)
		if err != nil {
			errs = append(errs, e.errf(at, err))
			continue
		}
		if !conf.Listed(listedHosts, r) {
			errs = append(errs, e.errf(at, fmt.Errorf("%s is not in allowed_hosts: a credential goes to a listed destination", r)))
		}
		if c.Header == nil {
			errs = append(errs, e.errf(append(at, "header"), errors.New("missing: the header the proxy sets (Authorization, X-Api-Key)")))
		} else if err := conf.CheckCredentialHeader(*c.Header); err != nil {
			errs = append(errs, e.errf(append(at, "header"), err))
		}
		if c.SecretFile == nil {
			errs = append(errs, e.errf(append(at, "secret_file"), errors.New("missing: the file toolgate reads the header's value from")))
		} else if err := conf.CheckSecretPath(*c.SecretFile); err != nil {
			errs = append(errs, e.errf(append(at, "secret_file"), err))
		}
	}
	return errs
}

// entryCredentials reads the secret files of a checked entry: each is
// refused where the server's own sandbox binds it (its cwd, its read-only
// paths) or every sandbox sees it, as a tools.conf credential is.
func entryCredentials(e *entry, s ToolServer, opts Options) ([]conf.Credential, []error) {
	if len(e.raw.Credentials) == 0 {
		return nil, nil
	}
	bound := map[string]string{}
	who := fmt.Sprintf("server %q's sandbox", s.ID)
	for _, d := range append([]string{s.Cwd}, s.ReadOnly...) {
		if d != "" {
			bound[d] = who
		}
	}
	var out []conf.Credential
	var errs []error
	for _, dest := range slices.Sorted(maps.Keys(e.raw.Credentials)) {
		c := e.raw.Credentials[dest]
		r, _ := allowlist.ParseRule(dest) // checked by checkCredentials
		v, err := conf.ReadSecret(*c.SecretFile, bound, opts.Visible)
		if err != nil {
			errs = append(errs, e.errf([]string{"egress_credentials", dest, "secret_file"}, err))
			continue
		}
		out = append(out, conf.Credential{Dest: r, Header: textproto.CanonicalMIMEHeaderKey(*c.Header), File: *c.SecretFile, Value: v})
	}
	return out, errs
}

// secretsBound returns an error for every secret file (of a server's
// egress_credentials, or of a tools.conf credential line) that lies where
// another sandbox binds: another server's cwd or read-only paths, a
// tools.conf test-class tool's dir. (Each file was checked against its own
// sandbox at load.) A toolgate that is not root runs every sandbox as its
// own uid, which owns the file: mode 0600 does not keep it from a sandbox
// that binds it.
func secretsBound(servers []ToolServer, c *conf.Config) []error {
	type secret struct{ file, whose string }
	var secrets []secret
	bound := map[string]string{}
	if c != nil && c.State == conf.StateLoaded {
		maps.Copy(bound, conf.SandboxDirs(c.Tools))
		for _, t := range c.Tools {
			for _, cr := range t.Credentials {
				secrets = append(secrets, secret{cr.File, fmt.Sprintf("tools.conf line %d", cr.Line)})
			}
		}
	}
	for _, s := range servers {
		if s.Transport != TransportStdio || !s.Sandbox {
			continue
		}
		for _, d := range append([]string{s.Cwd}, s.ReadOnly...) {
			if d != "" {
				bound[d] = fmt.Sprintf("server %q's sandbox", s.ID)
			}
		}
		for _, cr := range s.Credentials {
			secrets = append(secrets, secret{cr.File, fmt.Sprintf("server %q's egress_credentials", s.ID)})
		}
	}
	var errs []error
	for _, sc := range secrets {
		real, err := filepath.EvalSymlinks(sc.file)
		if err != nil {
			real = sc.file
		}
		for _, d := range slices.Sorted(maps.Keys(bound)) {
			if bundle.Within(real, filepath.Clean(d)) {
				errs = append(errs, &Error{File: sc.file, Err: fmt.Errorf("the secret file of %s is inside %s, which %s binds: keep secret files where no sandbox sees them", sc.whose, d, bound[d])})
			}
		}
	}
	return errs
}
