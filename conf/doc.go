// Package conf reads and validates the operator's files: tools.conf
// (Load, Parse) and the bearer-token file of serve --listen (LoadTokens).
// It never executes anything. The tool-MCP registry of downstream servers
// is package conf/registry, which uses the rules exported here that both
// share (CheckTrusted, DeniedSubstring, ReadSecret, Positioned); conf
// never imports it.
//
// tools.conf is seed 000's grammar plus the lines a sandboxed tool may
// carry: tool, expose, egress (the tool's network allowlist), env
// (non-secret variables) and credential (a header the egress proxy sets
// from a secret file the sandbox never sees). Loading is fail-closed: one
// refused line gives a Config in state Refused with no tools and no expose
// subtractions, only the errors (*Error: file, line, the line's text,
// field, reason). Never half-loaded; Warnings names accepted lines that
// deserve another look (a read-class git or hg).
//
// Every file is trusted only when it, and each directory on its way from
// /, is root's or toolgate's and writable by no one else (trust.go). The
// package stats what lines name (an executable must be a regular
// executable file, the denylist judges its basename as written and as
// resolved), and checks a credential's secret file (owner, mode, that no
// sandbox sees it); the rules that need the sandbox policy come in as
// Options.Check and Options.Visible. A secret read here is a Secret, which
// prints as [redacted].
package conf
