package server

// The checks every HTTP request passes before it reaches MCP: the Host
// header against the names served, the browser Origin, and the bearer
// token (a static token or an OAuth access token), with the RFC 6750
// challenge a refused request gets.

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/toolgate/toolgate/auth"
)

// authenticated wraps next in the same Origin and token checks as /mcp.
func (h *HTTP) authenticated(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.checkOrigin(w, r) {
			return
		}
		if _, ok := h.authenticate(w, r); !ok {
			return
		}
		next(w, r)
	}
}

// normalOrigin parses an Origin value: scheme://host[:port], nothing else.
func normalOrigin(o string) (string, error) {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", errors.New("want scheme://host[:port]")
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// checkOrigin answers 403 for a browser request from an origin that is
// neither loopback nor allowed (DNS-rebinding protection, as the MCP
// transport asks: a page of evil.example whose name now resolves to this
// server still sends Origin: http://evil.example). A request without
// Origin (any non-browser client) passes. The Host is checked before, on
// every path (checkHost).
func (h *HTTP) checkOrigin(w http.ResponseWriter, r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	n, err := normalOrigin(o)
	if err == nil {
		if u, _ := url.Parse(n); auth.IsLoopbackHost(u.Hostname()) {
			return true
		}
		for _, a := range h.opts.AllowOrigins {
			if an, _ := normalOrigin(a); an == n {
				return true
			}
		}
	}
	h.metrics.authFailure("origin")
	http.Error(w, "Forbidden: Origin "+strconv.Quote(bounded(o, 256))+" is not allowed (toolgate serve --allow-origin)", http.StatusForbidden)
	return false
}

// normalHostName checks an --allow-host value, a host name without port
// or scheme, and returns it lowercased.
func normalHostName(name string) (string, error) {
	n := strings.TrimSuffix(strings.ToLower(name), ".")
	if n == "" || strings.ContainsAny(n, ":/[]@ ") {
		return "", errors.New("want a host name, without port or scheme (toolgate.example.com)")
	}
	return n, nil
}

// checkHost wraps next in the Host check (DNS-rebinding protection) of
// every path: a page of evil.example whose name now resolves to this
// server's address sends Host: evil.example, which is refused 403; a
// request naming the server by an IP literal (a kubelet probe,
// Prometheus, a client given an address), by localhost, or by an allowed
// name passes, as does one over a unix socket (no browser reaches one).
func (h *HTTP) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, unix := r.Context().Value(http.LocalAddrContextKey).(*net.UnixAddr); unix || h.hostAllowed(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		h.metrics.authFailure("host")
		http.Error(w, "Forbidden: Host "+strconv.Quote(bounded(r.Host, 256))+
			" is not allowed: name this server by its IP address, localhost, the host of --listen or --oauth-resource, or a name given to toolgate serve --allow-host (DNS-rebinding protection)",
			http.StatusForbidden)
	})
}

// hostAllowed reports whether a Host value names this server in a way DNS
// rebinding cannot produce: an IP literal (a rebinding page's requests
// carry its own name), localhost, or an allowed name. No Host (HTTP/1.0)
// is no browser's.
func (h *HTTP) hostAllowed(host string) bool {
	name := host
	if n, _, err := net.SplitHostPort(host); err == nil {
		name = n
	}
	name = strings.TrimSuffix(strings.ToLower(strings.Trim(name, "[]")), ".")
	if name == "" || name == "localhost" || h.hosts[name] {
		return true
	}
	_, err := netip.ParseAddr(name)
	return err == nil
}

// challenge writes the WWW-Authenticate header of a refusal.
func (h *HTTP) challenge(w http.ResponseWriter, code, desc, scope string) {
	var parts []string
	if h.prmURL != "" {
		parts = append(parts, `resource_metadata="`+h.prmURL+`"`)
	} else {
		parts = append(parts, `realm="toolgate"`)
	}
	if code != "" {
		parts = append(parts, `error="`+code+`"`)
	}
	if desc != "" {
		parts = append(parts, `error_description="`+strings.ReplaceAll(desc, `"`, `'`)+`"`)
	}
	if scope != "" {
		parts = append(parts, `scope="`+scope+`"`)
	}
	w.Header().Set("WWW-Authenticate", "Bearer "+strings.Join(parts, ", "))
}

func writeAuthError(w http.ResponseWriter, status int, code, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
}

// authenticate returns the request's principal, or answers 401 (no or a
// refused token) or 503 (the token could not be checked now) and returns
// false. Nothing of the token is ever logged or echoed.
func (h *HTTP) authenticate(w http.ResponseWriter, r *http.Request) (auth.Principal, bool) {
	if h.opts.Auth == nil {
		// Serve takes no TCP listener without authentication: a request
		// without a unix socket peer reached this handler some other
		// way, and is refused.
		uid, ok := unixPeer(r.Context())
		if !ok {
			h.metrics.authFailure("missing")
			h.challenge(w, "", "", "")
			writeAuthError(w, http.StatusUnauthorized, "invalid_request", "a bearer token is required (only a unix socket listener serves without one)")
			return auth.Principal{}, false
		}
		return auth.Local(uid), true
	}
	token, present, err := auth.BearerToken(r)
	if !present {
		h.metrics.authFailure("missing")
		h.challenge(w, "", "", "")
		writeAuthError(w, http.StatusUnauthorized, "invalid_request", "a bearer token is required")
		return auth.Principal{}, false
	}
	var p auth.Principal
	if err == nil {
		p, err = h.opts.Auth.Authenticate(r.Context(), token)
	}
	if err == nil {
		return p, true
	}
	if ae, ok := errors.AsType[*auth.Error](err); ok {
		h.metrics.authFailure("invalid")
		h.s.log.WithFields(logrus.Fields{"remote": r.RemoteAddr, "reason": ae.Description}).Info("http: token refused")
		h.challenge(w, ae.Code, ae.Description, "")
		status := http.StatusUnauthorized
		if ae.Code == "invalid_request" {
			status = http.StatusBadRequest
		}
		writeAuthError(w, status, ae.Code, ae.Description)
		return auth.Principal{}, false
	}
	h.metrics.authFailure("unavailable")
	h.s.log.WithError(err).Warn("http: a token could not be checked")
	w.Header().Set("Retry-After", "5")
	writeAuthError(w, http.StatusServiceUnavailable, "temporarily_unavailable", "the token cannot be checked now: "+err.Error())
	return auth.Principal{}, false
}
