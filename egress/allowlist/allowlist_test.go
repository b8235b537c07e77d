package allowlist

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in, want, wantErr string
	}{
		{in: "api.example.com:443", want: "api.example.com:443"},
		{in: "API.Example.COM:443", want: "api.example.com:443"},
		{in: "*.example.org:443", want: "*.example.org:443"},
		{in: "127.0.0.1:8080", want: "127.0.0.1:8080"},
		{in: "[::1]:8080", want: "[::1]:8080"},
		{in: "[::ffff:10.0.0.1]:80", want: "10.0.0.1:80"},
		{in: "example.com", wantErr: "host:port"},
		{in: "example.com:", wantErr: "host:port"},
		{in: ":443", wantErr: "host:port"},
		{in: "example.com:0", wantErr: "1 to 65535"},
		{in: "example.com:65536", wantErr: "1 to 65535"},
		{in: "example.com:044", wantErr: "1 to 65535"},
		{in: "https://example.com:443", wantErr: "no scheme"},
		{in: "example.com:443/x", wantErr: "no scheme, path"},
		{in: "user@example.com:443", wantErr: "no scheme, path, user"},
		{in: "localhost:8080", want: "localhost:8080"},
		{in: "gitea:3000", want: "gitea:3000"},
		{in: "*.com:443", wantErr: "two labels"},
		{in: "*.localhost:443", wantErr: "two labels"},
		{in: "*:443", wantErr: "letters, digits"},
		{in: "a.*.example.com:443", wantErr: "letters, digits"},
		{in: "*example.com:443", wantErr: "letters, digits"},
		{in: "ex_ample.com:443", wantErr: "letters, digits"},
		{in: "-x.example.com:443", wantErr: "inner hyphens"},
		{in: "::1:80", wantErr: "[addr]:port"},
		{in: "[fe80::1%eth0]:80", wantErr: "zone"},
	} {
		r, err := ParseRule(tc.in)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseRule(%q) = %v, %v; want an error with %q", tc.in, r, err, tc.wantErr)
			}
		case err != nil || r.String() != tc.want:
			t.Errorf("ParseRule(%q) = %v, %v; want %s", tc.in, r, err, tc.want)
		}
	}
	if _, err := ParseList(nil); err == nil {
		t.Error("an empty allowlist was accepted")
	}
	if _, err := ParseList([]string{"a.example.com:1", "A.example.com:1"}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a duplicate was accepted: %v", err)
	}
}

func TestMatch(t *testing.T) {
	l, err := ParseList([]string{"api.example.com:443", "*.example.org:443", "10.1.2.3:22"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		port uint16
		want bool
	}{
		{"api.example.com", 443, true}, {"API.example.com.", 443, true}, {"api.example.com", 80, false},
		{"x.api.example.com", 443, false}, {"example.com", 443, false},
		{"a.example.org", 443, true}, {"a.b.example.org", 443, true}, {"example.org", 443, false},
		{"badexample.org", 443, false}, {"a.example.org", 8443, false},
	} {
		if _, ok := l.MatchName(tc.name, tc.port); ok != tc.want {
			t.Errorf("MatchName(%s, %d) = %v, want %v", tc.name, tc.port, ok, tc.want)
		}
	}
	if !l.ListsIP(netip.MustParseAddr("10.1.2.3"), 22) || l.ListsIP(netip.MustParseAddr("10.1.2.3"), 23) ||
		!l.ListsIP(netip.MustParseAddr("::ffff:10.1.2.3"), 22) {
		t.Error("ListsIP")
	}
	for ip, want := range map[string]bool{
		"127.0.0.1": true, "10.0.0.5": true, "172.20.1.1": true, "192.168.1.1": true, "169.254.169.254": true,
		"100.64.0.1": true, "0.0.0.0": true, "::1": true, "fe80::1": true, "fd00:ec2::254": true, "::ffff:127.0.0.1": true,
		"93.184.216.34": false, "2606:2800:220:1::1": false, "8.8.8.8": false,
	} {
		if _, got := Forbidden(netip.MustParseAddr(ip)); got != want {
			t.Errorf("Forbidden(%s) = %v, want %v", ip, got, want)
		}
	}
}
