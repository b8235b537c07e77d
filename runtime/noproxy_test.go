package runtime

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/egress/allowlist"
)

// TestEgressNoProxy: a listed loopback IP literal leaves NO_PROXY, so that
// tools send it through the proxy; without one the defaults stay (nil).
func TestEgressNoProxy(t *testing.T) {
	for _, tc := range []struct {
		rules []string
		want  string // NO_PROXY's value; "-" for nil
	}{
		{[]string{"api.example.com:443"}, "-"},
		{[]string{"localhost:8080"}, "-"},
		{[]string{"127.0.0.1:11434"}, "localhost,::1"},
		{[]string{"[::1]:8080", "api.example.com:443"}, "localhost,127.0.0.1"},
		{[]string{"127.0.0.1:1", "[::1]:2"}, "localhost"},
		{[]string{"127.0.0.2:1"}, "localhost,127.0.0.1,::1"},
	} {
		l, err := allowlist.ParseList(tc.rules)
		if err != nil {
			t.Fatal(err)
		}
		got := EgressNoProxy(l)
		if tc.want == "-" {
			if got != nil {
				t.Errorf("EgressNoProxy(%v) = %q, want nil (the defaults)", tc.rules, got)
			}
			continue
		}
		if strings.Join(got, " ") != "NO_PROXY="+tc.want+" no_proxy="+tc.want {
			t.Errorf("EgressNoProxy(%v) = %q, want NO_PROXY and no_proxy = %q", tc.rules, got, tc.want)
		}
	}
}
