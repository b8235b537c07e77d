package runtime

import (
	"slices"
	"strings"

	"github.com/toolgate/toolgate/egress/allowlist"
)

// EgressNoProxy returns the NO_PROXY variables (both spellings) of a tool
// whose allowlist lists a loopback IP literal (a local model server, a
// package mirror or a sidecar on the host's 127.0.0.1): the default
// "localhost,127.0.0.1,::1" less every loopback address listed, so that a
// tool that honours NO_PROXY (git, curl, Python) sends those through the
// proxy, which reaches the host's listed port, instead of to the
// sandbox's own empty loopback. Nil when none is listed: the defaults
// (bundle.ProxyEnv) stay. A name is never made loopback this way: the
// proxy refuses a listed name that resolves to loopback anyway.
func EgressNoProxy(allow allowlist.List) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	drop := false
	for _, r := range allow {
		if r.IP.IsValid() && r.IP.IsLoopback() {
			drop = true
			hosts = slices.DeleteFunc(hosts, func(h string) bool { return h == r.IP.String() })
		}
	}
	if !drop {
		return nil
	}
	v := strings.Join(hosts, ",")
	return []string{"NO_PROXY=" + v, "no_proxy=" + v}
}
