package policy

import (
	"github.com/toolgate/toolgate/conf"
	"github.com/toolgate/toolgate/conf/registry"
	"github.com/toolgate/toolgate/status"
)

// Builtin is the resource of a built-in tool: no class, no server, no
// network (its helpers run sandboxed without one).
func Builtin(name string) Tool { return Tool{Name: name, Kind: status.KindBuiltin} }

// External is the resource of a tools.conf tool: its class, and network
// when it has an egress line or is read class (it runs on the host).
func External(t conf.Tool) Tool {
	return Tool{
		Name: t.Name, Kind: status.KindExternal, Class: string(t.Class),
		Network: t.Class == conf.ClassRead || len(t.Egress) > 0,
	}
}

// Downstream is the resource of the tool served as name from server s:
// its server's id, and network when the server can reach one: network =
// true, allowed_hosts, no sandbox (it runs on the host), or a server
// reached over HTTP (it runs elsewhere).
func Downstream(name string, s registry.ToolServer) Tool {
	return Tool{
		Name: name, Kind: status.KindDownstream, Server: s.ID,
		Network: s.Transport != registry.TransportStdio || !s.Sandbox || s.Network || len(s.AllowedHosts) > 0,
	}
}
