// Package conf parses and validates tools.conf, the operator's extension
// surface, exactly as seed 000 specifies it: whitespace-separated directives
// `expose <name> on|off` and
// `tool <name> <abspath> <read|test> <timeout-s> <max-bytes> <on|off> <dir> -- <fixed args...>`.
//
// Loading is fail-closed: a file with one malformed or unsafe line yields a
// Config in state Refused that carries no tools and no expose subtractions,
// only the errors (each with file, line number, the line's text and the
// reason). A Config is never half-loaded.
//
// The package never executes anything. It does stat the files a line names
// (the executable must be a regular executable file, the dir a directory, and
// the denylist is applied to the fully resolved path as well as to the path as
// written), because a denylist by name is bypassed by a symlink. It also
// lstats every directory on the way to tools.conf and to each registry
// fragment (checkTrusted): a file another user could change is refused.
package conf
