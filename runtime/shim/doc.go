// Package shim is the inside of toolgate's process boundary: the exec
// shims that run as toolgate-shim (or as the toolgate binary, or a test
// binary, given Arg first) between the server and a tool. They join
// cgroups, drop privileges and lower limits before bwrap (enter), are a
// sandbox's first process (init, service, standby), keep a prepared OCI
// container (hold), reap a direct tool's tree (reap), or outlive a
// killed server by a moment to kill what it left (guard); see Arg.
//
// It is also the protocol the server speaks to them: Spec and its Args,
// the modes, and the release channel's bytes (ReadyByte, GoByte,
// Streams). It imports the standard library, golang.org/x/sys/unix,
// bundle (the environment and the egress port), internal/proc and
// runtime/cgroup (the guard kills with it; it imports nothing of
// toolgate), and
// nothing of the server's side (package runtime, egress, net/http):
// a shim starts on every sandboxed call, and what it links it pays for
// in start-up time.
package shim
