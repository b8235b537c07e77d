// Package allowlist is the allowlist of a sandbox's narrow network: rules
// of destinations by name (exact, or a "*." suffix) or IP literal, and
// port, parsed and matched the same way by tools.conf's egress directive,
// the registry's allowed_hosts and the egress proxy that enforces them
// (package egress). Pure: no I/O.
package allowlist

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one allowed destination: Host is a lowercase DNS name, a "*."
// suffix of one, or an IP literal (IP set), and Port the one port allowed.
type Rule struct {
	Host string
	IP   netip.Addr
	Port uint16
}

// String renders the rule as it is written: host:port, [v6]:port.
func (r Rule) String() string {
	if r.IP.IsValid() {
		return netip.AddrPortFrom(r.IP, r.Port).String()
	}
	return r.Host + ":" + strconv.Itoa(int(r.Port))
}

// Wildcard reports whether the rule is a "*." suffix.
func (r Rule) Wildcard() bool { return strings.HasPrefix(r.Host, "*.") }

// MaxRules is the most destinations one tool may list.
const MaxRules = 64

// ParseRule parses host:port. The host is a DNS name (letters, digits,
// hyphens, dots; labels of 1 to 63 characters: "localhost" and an
// intranet's one-label names included), a "*." and a name of at least two
// labels (so "*.com" is refused: it would allow a whole top-level domain),
// or an IP literal ([...] for IPv6). The port is 1 to 65535 and always stated. No scheme, path, user
// or other syntax.
func ParseRule(s string) (Rule, error) {
	host, port, err := splitHostPort(s)
	if err != nil {
		return Rule{}, fmt.Errorf("%q: %w", s, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || port[0] == '0' {
		return Rule{}, fmt.Errorf("%q: port %q: want a decimal 1 to 65535", s, port)
	}
	r := Rule{Port: uint16(p)}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return Rule{}, fmt.Errorf("%q: an IP with a zone is not a destination", s)
		}
		r.IP = ip.Unmap()
		return r, nil
	}
	name := strings.ToLower(host)
	labels, wild := strings.CutPrefix(name, "*.")
	// A "*" anywhere but a leading "*." fails checkName's characters.
	if err := checkName(labels, wild); err != nil {
		return Rule{}, fmt.Errorf("%q: %w", s, err)
	}
	r.Host = name
	return r, nil
}

// splitHostPort splits host:port and [v6]:port, refusing anything else.
func splitHostPort(s string) (host, port string, err error) {
	if strings.ContainsAny(s, "/@?#\\ \t") || strings.Contains(s, "://") {
		return "", "", errors.New("want host:port, nothing else (no scheme, path, user or space)")
	}
	if rest, ok := strings.CutPrefix(s, "["); ok {
		h, p, ok := strings.Cut(rest, "]:")
		if !ok || p == "" {
			return "", "", errors.New("want [IPv6]:port")
		}
		return h, p, nil
	}
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return "", "", errors.New("want host:port with both stated")
	}
	if strings.Contains(s[:i], ":") {
		return "", "", errors.New("an IPv6 address is written [addr]:port")
	}
	return s[:i], s[i+1:], nil
}

// checkName checks a DNS name, of at least two labels when it follows a
// wildcard's "*.".
func checkName(name string, wild bool) error {
	if len(name) > 253 {
		return errors.New("name longer than 253 characters")
	}
	labels := strings.Split(name, ".")
	if wild && len(labels) < 2 {
		return errors.New("a wildcard wants a name of at least two labels after \"*.\" (a top-level domain is not a destination)")
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("label %q: want 1 to 63 characters", l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(l)-1
			if !ok {
				return fmt.Errorf("label %q: want letters, digits and inner hyphens", l)
			}
		}
	}
	return nil
}

// List is a tool's allowlist.
type List []Rule

// ParseList parses every rule, collecting the errors; duplicates and more
// than MaxRules are refused.
func ParseList(rules []string) (List, error) {
	var out List
	var errs []error
	seen := map[string]bool{}
	for _, s := range rules {
		r, err := ParseRule(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[r.String()] {
			errs = append(errs, fmt.Errorf("%q: listed twice", s))
			continue
		}
		seen[r.String()] = true
		out = append(out, r)
	}
	if len(out)+len(errs) > MaxRules {
		errs = append(errs, fmt.Errorf("%d destinations: at most %d", len(rules), MaxRules))
	}
	if len(rules) == 0 {
		errs = append(errs, errors.New("no destination: an allowlist names at least one"))
	}
	return out, errors.Join(errs...)
}

// MatchName reports the rule that allows name (a DNS name, not an IP) on
// port: an exact rule, or a "*." rule whose suffix name ends with (a
// subdomain at any depth; never the bare suffix itself).
func (l List) MatchName(name string, port uint16) (Rule, bool) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	for _, r := range l {
		if r.IP.IsValid() || r.Port != port {
			continue
		}
		if r.Host == name {
			return r, true
		}
		if suffix, ok := strings.CutPrefix(r.Host, "*"); ok && strings.HasSuffix(name, suffix) && len(name) > len(suffix) {
			return r, true
		}
	}
	return Rule{}, false
}

// ListsIP reports whether ip itself is listed on port, both sides judged
// as Judged has them: an IPv4-mapped address (::ffff:a.b.c.d) or a
// well-known-prefix NAT64 address (64:ff9b::a.b.c.d) is listed exactly
// when its IPv4 address is (and the other way round).
func (l List) ListsIP(ip netip.Addr, port uint16) bool {
	ip = Judged(ip)
	for _, r := range l {
		if r.IP.IsValid() && Judged(r.IP) == ip && r.Port == port {
			return true
		}
	}
	return false
}

// Strings renders the list as it is written.
func (l List) Strings() []string {
	out := make([]string, len(l))
	for i, r := range l {
		out[i] = r.String()
	}
	return out
}

// NAT64 is the well-known NAT64 prefix (RFC 6052): an address in it
// carries an IPv4 address in its last 32 bits, which a NAT64 gateway
// reaches on the tool's behalf.
var NAT64 = netip.MustParsePrefix("64:ff9b::/96")

// Judged is the address ip is judged as: an IPv4-mapped address
// (::ffff:a.b.c.d) and a well-known-prefix NAT64 address
// (64:ff9b::a.b.c.d, RFC 6052) as the IPv4 address they carry, any other
// as itself. The local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215) is not
// unwrapped: where its IPv4 sits depends on a prefix length that only the
// network's operator knows (RFC 6052 section 2.2), so the whole /48 is
// forbidden instead.
func Judged(ip netip.Addr) netip.Addr {
	ip = ip.Unmap()
	if NAT64.Contains(ip) {
		b := ip.As16()
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return ip
}

// forbidden are the address ranges a name may never resolve into, unless
// the very address is listed: what reaches the host itself, its LAN, or a
// cloud's metadata service. An address of NAT64 is judged by the IPv4
// address it carries (Judged).
var forbidden = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network", unspecified
	netip.MustParsePrefix("10.0.0.0/8"),     // private
	netip.MustParsePrefix("100.64.0.0/10"),  // shared address space (CGNAT)
	netip.MustParsePrefix("127.0.0.0/8"),    // loopback
	netip.MustParsePrefix("169.254.0.0/16"), // link-local, cloud metadata (169.254.169.254)
	netip.MustParsePrefix("172.16.0.0/12"),  // private
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("192.168.0.0/16"), // private
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("224.0.0.0/4"),    // multicast
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, broadcast
	netip.MustParsePrefix("::/128"),         // unspecified
	netip.MustParsePrefix("::1/128"),        // loopback
	netip.MustParsePrefix("fc00::/7"),       // unique local
	netip.MustParsePrefix("fe80::/10"),      // link-local
	netip.MustParsePrefix("ff00::/8"),       // multicast
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64 (RFC 8215): its IPv4's place is the operator's choice, so all of it
	netip.MustParsePrefix("fd00:ec2::/32"),  // AWS metadata over IPv6 (inside fc00::/7; named for the record)
}

// Forbidden reports whether ip lies in a range a name may not resolve
// into (and why), judged as Judged has it: an IPv4-mapped address as its
// IPv4, a 64:ff9b::/96 address as the IPv4 it carries (the reason then
// names both, "127.0.0.0/8 via 64:ff9b::/96").
func Forbidden(ip netip.Addr) (string, bool) {
	j := Judged(ip)
	for _, p := range forbidden {
		if p.Contains(j) {
			if NAT64.Contains(ip.Unmap()) {
				return p.String() + " via " + NAT64.String(), true
			}
			return p.String(), true
		}
	}
	return "", false
}
