package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

// parseHTTPFlags parses args as serve's HTTP flags and checks them.
func parseHTTPFlags(t *testing.T, args ...string) (*httpFlags, error) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f httpFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &f, f.check()
}

// TestHTTPFlagsListen: --listen takes host:port or unix:/PATH;
// --listen-group only with a unix socket, as a name or a gid; the
// connection bounds and the idle timeout are checked.
func TestHTTPFlagsListen(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for accepted
	}{
		{[]string{"--listen", "127.0.0.1:8080"}, ""},
		{[]string{"--listen", "unix:/run/toolgate/mcp.sock"}, ""},
		{[]string{"--listen", "unix:/run/toolgate/mcp.sock", "--listen-group", "nogroup"}, ""},
		{[]string{"--listen", "unix:/run/toolgate/mcp.sock", "--listen-group", "65534"}, ""},
		{[]string{"--listen", "unix:run/mcp.sock"}, `--listen "unix:run/mcp.sock": want unix:/PATH, an absolute path`},
		{[]string{"--listen", "127.0.0.1"}, `--listen "127.0.0.1": want host:port (127.0.0.1:8080, [::1]:8080, :8080) or unix:/PATH`},
		{[]string{"--listen", "127.0.0.1:8080", "--listen-group", "nogroup"}, `--listen-group is the group of a unix socket listener, and --listen "127.0.0.1:8080" is a TCP address: give --listen unix:/PATH, or drop --listen-group`},
		{[]string{"--listen-group", "nogroup"}, "--listen-group is the group of a unix socket listener: give --listen unix:/PATH too"},
		{[]string{"--listen", "unix:/run/toolgate/mcp.sock", "--listen-group", "no-such-group-here"}, `--listen-group "no-such-group-here": no such group (want a group name or a gid)`},
		{[]string{"--allow-host", "toolgate.internal"}, "--allow-host are flags of the HTTP transport: give --listen too"},
		{[]string{"--listen", ":8080", "--max-connections", "-1"}, "--max-connections and --max-connections-per-client: want 0 (no bound) or more"},
		{[]string{"--listen", ":8080", "--max-connections-per-client", "-1"}, "--max-connections and --max-connections-per-client: want 0 (no bound) or more"},
		{[]string{"--listen", ":8080", "--max-connections", "0", "--max-connections-per-client", "0"}, ""},
		{[]string{"--listen", ":8080", "--idle-timeout", "0s"}, "--idle-timeout: want a duration above 0"},
	} {
		f, err := parseHTTPFlags(t, tc.args...)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("serve %v: %v, want %q", tc.args, err, tc.want)
		}
		if err == nil && slices.Contains(tc.args, "--listen-group") && f.gid != 65534 {
			t.Errorf("serve %v: gid %d, want 65534", tc.args, f.gid)
		}
	}
	f, _ := parseHTTPFlags(t, "--listen", ":8080")
	if f.maxConns != 1024 || f.maxConnsClient != 64 || f.idleTimeout.String() != "1m0s" || f.gid != -1 {
		t.Errorf("defaults: --max-connections %d, --max-connections-per-client %d, --idle-timeout %s, gid %d; want 1024, 64, 1m0s, -1",
			f.maxConns, f.maxConnsClient, f.idleTimeout, f.gid)
	}
}

func TestListenHostNames(t *testing.T) {
	got := listenHostNames("toolgate.internal:8080", ":9090", "10.0.0.1:1", "[::1]:2", "unix:/run/x.sock", "metrics.internal:9090")
	if want := []string{"toolgate.internal", "metrics.internal"}; !slices.Equal(got, want) {
		t.Errorf("listenHostNames = %q, want %q", got, want)
	}
}
