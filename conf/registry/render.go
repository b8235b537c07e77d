package registry

// Rendering of a normalised tool-MCP registry entry, for `toolgate registry
// show`: as a fragment that loads back to the same server, or as JSON.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// serverDoc is a normalised entry in the registry's own field names. It
// holds variable names, never credential values: the only literal values
// are those the credential checks accepted.
type serverDoc struct {
	Transport Transport `toml:"transport" json:"transport"`

	Command string            `toml:"command,omitempty" json:"command,omitempty"`
	Args    []string          `toml:"args,omitempty" json:"args,omitempty"`
	Cwd     string            `toml:"cwd,omitempty" json:"cwd,omitempty"`
	Env     map[string]string `toml:"env,omitempty,inline" json:"env,omitempty"`
	EnvVars []string          `toml:"env_vars,omitempty" json:"env_vars,omitempty"`
	Sandbox *bool             `toml:"sandbox,omitempty" json:"sandbox,omitempty"`
	Network *bool             `toml:"network,omitempty" json:"network,omitempty"`
	// AllowedHosts: the server's network allowlist.
	AllowedHosts []string `toml:"allowed_hosts,omitempty" json:"allowed_hosts,omitempty"`
	// Credentials: by destination, the header and the secret file, never
	// the value.
	Credentials map[string]credentialDoc `toml:"egress_credentials,omitempty" json:"egress_credentials,omitempty"`

	URL               string            `toml:"url,omitempty" json:"url,omitempty"`
	BearerTokenEnvVar string            `toml:"bearer_token_env_var,omitempty" json:"bearer_token_env_var,omitempty"`
	HTTPHeaders       map[string]string `toml:"http_headers,omitempty,inline" json:"http_headers,omitempty"`
	EnvHTTPHeaders    map[string]string `toml:"env_http_headers,omitempty,inline" json:"env_http_headers,omitempty"`

	EnabledTools              []string           `toml:"enabled_tools" json:"enabled_tools"`
	DefaultToolsApprovalMode  ApprovalMode       `toml:"default_tools_approval_mode" json:"default_tools_approval_mode"`
	StartupTimeoutSec         int64              `toml:"startup_timeout_sec" json:"startup_timeout_sec"`
	ToolTimeoutSec            int64              `toml:"tool_timeout_sec" json:"tool_timeout_sec"`
	SupportsParallelToolCalls bool               `toml:"supports_parallel_tool_calls" json:"supports_parallel_tool_calls"`
	Pinned                    bool               `toml:"pinned" json:"pinned"`
	Tools                     map[string]toolDoc `toml:"tools,omitempty" json:"tools,omitempty"`
}

type toolDoc struct {
	ApprovalMode ApprovalMode `toml:"approval_mode" json:"approval_mode"`
}

func newServerDoc(s ToolServer) serverDoc {
	d := serverDoc{
		Transport:                 s.Transport,
		EnabledTools:              s.EnabledTools,
		DefaultToolsApprovalMode:  s.DefaultApproval,
		StartupTimeoutSec:         int64(s.StartupTimeout / time.Second),
		ToolTimeoutSec:            int64(s.ToolTimeout / time.Second),
		SupportsParallelToolCalls: s.SupportsParallelToolCalls,
		Pinned:                    s.Pinned,
	}
	if len(s.ToolApproval) > 0 {
		d.Tools = make(map[string]toolDoc, len(s.ToolApproval))
		for t, m := range s.ToolApproval {
			d.Tools[t] = toolDoc{ApprovalMode: m}
		}
	}
	switch s.Transport {
	case TransportStdio:
		sandbox, network := s.Sandbox, s.Network
		d.Command, d.Args, d.Cwd, d.Env, d.EnvVars = s.Command, s.Args, s.Cwd, s.Env, s.EnvVars
		d.Sandbox = &sandbox
		if sandbox {
			d.Network = &network
		}
		if s.AllowedHosts != nil {
			d.AllowedHosts = s.AllowedHosts.Strings()
		}
		if len(s.Credentials) > 0 {
			d.Credentials = map[string]credentialDoc{}
			for _, c := range s.Credentials {
				d.Credentials[c.Dest.String()] = credentialDoc{Header: c.Header, SecretFile: c.File}
			}
		}
	case TransportStreamableHTTP:
		d.URL, d.BearerTokenEnvVar, d.HTTPHeaders, d.EnvHTTPHeaders = s.URL, s.BearerTokenEnvVar, s.Headers, s.EnvHeaders
	}
	return d
}

// RenderServerTOML renders s as a complete fragment with every default
// written out and the command resolved: loading it gives back the same
// server. A comment header says where the entry was defined, and comment
// lines at the end give each enabled tool's pin of pins (when there is a
// pins file, or the entry says pinned = true).
func RenderServerTOML(s ToolServer, pins *Pins) ([]byte, error) {
	doc := struct {
		SchemaVersion int                  `toml:"schema_version"`
		Servers       map[string]serverDoc `toml:"tool_mcp_servers"`
	}{SchemaVersion, map[string]serverDoc{s.ID: newServerDoc(s)}}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s: defined in %s", s.ID, s.Fragment)
	if s.Line > 0 {
		fmt.Fprintf(&b, " line %d", s.Line)
	}
	b.WriteByte('\n')
	for _, r := range s.Replaces {
		fmt.Fprintf(&b, "# replaces the definition in %s\n", r)
	}
	if s.Transport == TransportStdio && s.CommandAsWritten != s.Command {
		fmt.Fprintf(&b, "# command %q resolved at load through %s\n", s.CommandAsWritten, SearchPath)
	}
	enc := toml.NewEncoder(&b)
	enc.SetIndentTables(false)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("render %q as TOML: %w", s.ID, err)
	}
	if pins != nil || s.Pinned {
		where := "no " + PinsFile
		if pins != nil {
			where = pins.Path
		}
		fmt.Fprintf(&b, "\n# pins (%s):\n", where)
		for _, t := range s.EnabledTools {
			if pin, ok := pins.Lookup(s.ID, t); ok {
				fmt.Fprintf(&b, "#   %s: sha256 %s\n", t, pin.SHA256)
			} else {
				fmt.Fprintf(&b, "#   %s: no pin (%s)\n", t, s.UnpinnedPolicy(false))
			}
		}
	}
	return b.Bytes(), nil
}

// servedToolDoc is one tool as toolgate would serve it.
type servedToolDoc struct {
	Name         string       `json:"name"`
	Tool         string       `json:"tool"`
	ApprovalMode ApprovalMode `json:"approval_mode"`
	// PinSHA256 is the digest its pin approves; none without a pin.
	PinSHA256 string `json:"pin_sha256,omitempty"`
}

// RenderServerJSON renders s as one indented JSON object: the fields of
// RenderServerTOML plus the id, where it was defined, the command as
// written and resolved, and the served tool names with their effective
// approval modes and the digests pins approve.
func RenderServerJSON(s ToolServer, pins *Pins) ([]byte, error) {
	served := make([]servedToolDoc, 0, len(s.EnabledTools))
	for _, t := range s.EnabledTools {
		pin, _ := pins.Lookup(s.ID, t)
		served = append(served, servedToolDoc{Name: s.ServedName(t), Tool: t, ApprovalMode: s.Approval(t), PinSHA256: pin.SHA256})
	}
	doc := struct {
		ID               string   `json:"id"`
		Fragment         string   `json:"fragment"`
		Line             int      `json:"line,omitempty"`
		Replaces         []string `json:"replaces,omitempty"`
		CommandAsWritten string   `json:"command_as_written,omitempty"`
		CommandResolved  string   `json:"command_resolved,omitempty"`
		serverDoc
		Served []servedToolDoc `json:"served_tools"`
	}{
		ID: s.ID, Fragment: s.Fragment, Line: s.Line, Replaces: s.Replaces,
		CommandAsWritten: s.CommandAsWritten, CommandResolved: s.CommandResolved,
		serverDoc: newServerDoc(s), Served: served,
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render %q as JSON: %w", s.ID, err)
	}
	return append(out, '\n'), nil
}

// credentialDoc is a credential as show renders it: never its value.
type credentialDoc struct {
	Header     string `toml:"header" json:"header"`
	SecretFile string `toml:"secret_file" json:"secret_file"`
}
