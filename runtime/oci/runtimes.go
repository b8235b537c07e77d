package oci

import (
	"fmt"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/bundle"
)

// Name names an OCI runtime.
type Name string

// The supported runtimes.
const (
	Runc  Name = "runc"
	Crun  Name = "crun"
	Runsc Name = "runsc"
)

// KnownRuntimes lists the runtimes in the order --help shows them.
func KnownRuntimes() []Name { return []Name{Runc, Crun, Runsc} }

// ParseRuntime returns the runtime named s, or an error naming the allowed
// values.
func ParseRuntime(s string) (Name, error) {
	n := Name(s)
	if _, ok := flavours[n]; ok {
		return n, nil
	}
	names := make([]string, 0, len(flavours))
	for _, k := range KnownRuntimes() {
		names = append(names, string(k))
	}
	return "", fmt.Errorf("unknown oci runtime %q: want one of %s", s, strings.Join(names, ", "))
}

// flavour is what differs between runtimes: spellings, global flags, spec
// adjustments. Everything else is the same OCI command line.
type flavour struct {
	// global flags, after --root STATE and before the subcommand.
	global []string
	// force is the spelling of delete's force flag.
	force string
	// quiet is the spelling of list's ids-only flag.
	quiet string
	// killAll makes kill signal every process of the container (--all),
	// not just its init.
	killAll bool
	// opts adjust the spec for this runtime.
	opts []bundle.Opt
	// pidsFloor is the lowest pids cgroup limit the runtime tolerates
	// (0: none).
	pidsFloor int64
	// egress are global flags a call with an egress allowlist needs: what
	// lets the sandbox connect to the proxy's socket bound into it.
	egress []string
}

// runscPidsFloor keeps runsc's pids cgroup high: it counts the Sentry's own
// host tasks, and reaching it kills the whole sandbox (exit 2, no output).
// The tool's processes are bounded by RLIMIT_NPROC, which runsc's Sentry
// enforces itself.
const runscPidsFloor = 4096

var flavours = map[Name]flavour{
	Runc: {force: "--force", quiet: "-q", killAll: true},
	Crun: {force: "--force", quiet: "-q", killAll: true},
	Runsc: {
		// --network=none: no network stack at all, not even a netstack
		// loopback to the host. --oci-seccomp: apply the spec's seccomp
		// profile inside the sandbox (runsc ignores it otherwise).
		global:    []string{"--network=none", "--oci-seccomp"},
		force:     "-force",
		quiet:     "-quiet",
		opts:      []bundle.Opt{bundle.WithoutRecursiveReadonly(), bundle.WithClone3Allowed()},
		pidsFloor: runscPidsFloor,
		// --host-uds=open: connect(2) to a host socket bound into the
		// sandbox (the egress proxy's; gVisor refuses it by default).
		egress: []string{"--host-uds=open"},
	},
}

// The runtime's command lines, pure functions of the flavour, the runtime
// binary, the state dir root and the operation (golden-tested): the global
// --root, the flavour's global flags, then the subcommand.

func (fl flavour) argv(bin, root, sub string, args ...string) []string {
	a := []string{bin, "--root", root}
	a = append(a, fl.global...)
	a = append(a, sub)
	return append(a, args...)
}

// runArgv runs container id from bundle b in the foreground.
func (fl flavour) runArgv(bin, root, b, id string) []string {
	return fl.argv(bin, root, "run", "--bundle", b, id)
}

// runArgvEgress is runArgv of a call with an egress allowlist.
func (fl flavour) runArgvEgress(bin, root, b, id string) []string {
	fl.global = append(slices.Clone(fl.global), fl.egress...)
	return fl.runArgv(bin, root, b, id)
}

// createArgv creates container id from bundle b, waiting in the runtime's
// own init until startArgv, and writes its init's pid to pidFile: the
// runtime's split of run, which a prepared sandbox (rt.Pool) uses.
func (fl flavour) createArgv(bin, root, b, pidFile, id string) []string {
	return fl.argv(bin, root, "create", "--bundle", b, "--pid-file", pidFile, id)
}

// startArgv starts container id, created by createArgv: its process runs.
func (fl flavour) startArgv(bin, root, id string) []string {
	return fl.argv(bin, root, "start", id)
}

// killArgv sends SIGKILL to container id.
func (fl flavour) killArgv(bin, root, id string) []string {
	if fl.killAll {
		return fl.argv(bin, root, "kill", "--all", id, "KILL")
	}
	return fl.argv(bin, root, "kill", id, "KILL")
}

// deleteArgv removes container id and its state, forcefully.
func (fl flavour) deleteArgv(bin, root, id string) []string {
	return fl.argv(bin, root, "delete", fl.force, id)
}

// listArgv lists the ids of the containers in root.
func (fl flavour) listArgv(bin, root string) []string {
	return fl.argv(bin, root, "list", fl.quiet)
}
