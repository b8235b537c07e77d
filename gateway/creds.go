package gateway

// A downstream server's credentials: the variables its entry names, read
// from toolgate's environment when it starts and at each HTTP request,
// passed by name, and redacted from everything toolgate logs or answers.

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/propagation"

	"github.com/toolgate/toolgate/internal/telemetry"
)

// lookupEnv reads a variable of toolgate's environment.
func (d *Server) lookupEnv(name string) (string, bool) {
	if f := d.deps.Options.LookupEnv; f != nil {
		return f(name)
	}
	return os.LookupEnv(name)
}

// checkVars reports the referenced variables that are not set (or empty),
// by name.
func (d *Server) checkVars() error {
	var missing []string
	for _, v := range d.srv.Vars() {
		if val, ok := d.lookupEnv(v.Name); !ok || val == "" {
			missing = append(missing, fmt.Sprintf("%s (%s)", v.Name, v.Use))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("variable not set in toolgate's environment: %s", strings.Join(missing, ", "))
	}
	return nil
}

// env is the server's own environment: the literal env, then the
// forwarded env_vars, read now.
func (d *Server) env() ([]string, error) {
	var env []string
	for _, k := range slices.Sorted(maps.Keys(d.srv.Env)) {
		env = append(env, k+"="+d.srv.Env[k])
	}
	for _, name := range d.srv.EnvVars {
		v, ok := d.lookupEnv(name)
		if !ok || v == "" {
			return nil, fmt.Errorf("variable %s (env_vars) not set in toolgate's environment", name)
		}
		env = append(env, name+"="+v)
	}
	return env, nil
}

// headerTransport sets the server's headers on every request to its
// origin.
type headerTransport struct {
	d            *Server
	scheme, host string
	base         http.RoundTripper
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != t.scheme || r.URL.Host != t.host {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for k, v := range t.d.httpHeaders() {
		r.Header.Set(k, v)
	}
	// The call's trace context, as W3C headers (a call's request; nothing
	// for the session's own).
	telemetry.Headers(r.Context(), propagation.HeaderCarrier(r.Header))
	return t.base.RoundTrip(r)
}

// httpHeaders are the headers of each request: the literal http_headers,
// then the bearer token and env_http_headers read from the named variables
// now.
func (d *Server) httpHeaders() map[string]string {
	h := maps.Clone(d.srv.Headers)
	if h == nil {
		h = map[string]string{}
	}
	if name := d.srv.BearerTokenEnvVar; name != "" {
		if v, ok := d.lookupEnv(name); ok && v != "" {
			h["Authorization"] = "Bearer " + v
		}
	}
	for header, name := range d.srv.EnvHeaders {
		if v, ok := d.lookupEnv(name); ok && v != "" {
			h[header] = v
		}
	}
	return h
}

// secrets are the values of the variables the server references, as now
// set: what redact removes.
func (d *Server) secrets() []string {
	var out []string
	for _, v := range d.srv.Vars() {
		if val, ok := d.lookupEnv(v.Name); ok && len(val) >= 4 {
			out = append(out, val)
		}
	}
	return out
}

// redact replaces the values of the referenced variables in s: text that
// reaches the log (the server's stderr, error messages) never carries a
// credential even when the server prints one.
func (d *Server) redact(s string) string {
	for _, v := range d.secrets() {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return s
}

// stderrLine logs one line of the server's stderr.
func (d *Server) stderrLine(line string) {
	d.log.WithField("stderr", d.redact(line)).Info("downstream server stderr")
}
