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
		{"api.example.com", 443, true},
		{"API.example.com.", 443, true},
		{"api.example.com", 80, false},
		{"x.api.example.com", 443, false},
		{"example.com", 443, false},
		{"a.example.org", 443, true},
		{"a.b.example.org", 443, true},
		{"example.org", 443, false},
		{"badexample.org", 443, false},
		{"a.example.org", 8443, false},
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

// TestForbiddenNAT64: an address of the well-known NAT64 prefix
// 64:ff9b::/96 is judged as the IPv4 address in its last 32 bits, as an
// IPv4-mapped one is: forbidden exactly when that IPv4 is; the local-use
// prefix 64:ff9b:1::/48 is forbidden whole, whatever it carries.
func TestForbiddenNAT64(t *testing.T) {
	for _, tc := range []struct {
		ip, why string // why "": not forbidden
	}{
		{"64:ff9b::7f00:1", "127.0.0.0/8 via 64:ff9b::/96"},       // 127.0.0.1
		{"64:ff9b::127.0.0.1", "127.0.0.0/8 via 64:ff9b::/96"},    // the same, written with its IPv4
		{"64:ff9b::a9fe:a9fe", "169.254.0.0/16 via 64:ff9b::/96"}, // 169.254.169.254, cloud metadata
		{"64:ff9b::a00:1", "10.0.0.0/8 via 64:ff9b::/96"},
		{"64:ff9b::c0a8:101", "192.168.0.0/16 via 64:ff9b::/96"},
		{"64:ff9b::6440:1", "100.64.0.0/10 via 64:ff9b::/96"},
		{"64:ff9b::", "0.0.0.0/8 via 64:ff9b::/96"},
		{"64:ff9b::ffff:ffff", "240.0.0.0/4 via 64:ff9b::/96"},
		{"64:ff9b::5db8:d822", ""}, // 93.184.216.34: public, as it is plainly
		{"64:ff9b::808:808", ""},   // 8.8.8.8
		{"::ffff:127.0.0.1", "127.0.0.0/8"},
		{"64:ff9b:1::", "64:ff9b:1::/48"},
		{"64:ff9b:1::5db8:d822", "64:ff9b:1::/48"}, // a public IPv4 at the /96 place: still refused
		{"64:ff9b:1:5db8:d8:2200::", "64:ff9b:1::/48"},
		{"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "64:ff9b:1::/48"},
		{"64:ff9b:2::7f00:1", ""},   // outside both prefixes: an IPv6 address like any other
		{"64:ff9b:0:1::7f00:1", ""}, // outside the /96
	} {
		why, bad := Forbidden(netip.MustParseAddr(tc.ip))
		if why != tc.why || bad != (tc.why != "") {
			t.Errorf("Forbidden(%s) = %q, %v; want %q, %v", tc.ip, why, bad, tc.why, tc.why != "")
		}
	}
}

// TestListsIPNAT64: a NAT64 address of the well-known prefix is listed
// exactly when the IPv4 address it carries is (and a listed NAT64
// address lists its IPv4), as for IPv4-mapped addresses; a local-use
// NAT64 address only when that very address is listed.
func TestListsIPNAT64(t *testing.T) {
	l, err := ParseList([]string{"127.0.0.1:80", "[64:ff9b::a00:5]:443", "[64:ff9b:1::a00:1]:22"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ip   string
		port uint16
		want bool
	}{
		{"64:ff9b::7f00:1", 80, true},
		{"64:ff9b::127.0.0.1", 80, true},
		{"::ffff:127.0.0.1", 80, true},
		{"127.0.0.1", 80, true},
		{"64:ff9b::7f00:1", 81, false},
		{"64:ff9b::7f00:2", 80, false},
		{"64:ff9b:1::7f00:1", 80, false}, // the local-use prefix carries no IPv4 the list knows
		{"10.0.0.5", 443, true},
		{"64:ff9b::a00:5", 443, true},
		{"::ffff:10.0.0.5", 443, true},
		{"10.0.0.5", 80, false},
		{"64:ff9b:1::a00:1", 22, true},
		{"10.0.0.1", 22, false},
		{"64:ff9b::a00:1", 22, false},
		{"64:ff9b:1::a00:2", 22, false},
	} {
		if got := l.ListsIP(netip.MustParseAddr(tc.ip), tc.port); got != tc.want {
			t.Errorf("ListsIP(%s, %d) = %v, want %v", tc.ip, tc.port, got, tc.want)
		}
	}
}
