// Package bundle turns a tool and a sandbox policy into an OCI runtime spec
// (specs.Spec). It is pure: it executes nothing, touches no file, and
// imports nothing of this project; the caller (runtime/oci) passes every
// host fact in as a value (which /etc files exist, where the skeleton
// rootfs is, which limits apply).
//
// The spec is built like containerd's: a hardened literal, Default, and
// small options (Opt) applied to it by Apply. Options that weaken the
// default are named for what they relax (WithoutRecursiveReadonly), so
// that grep finds every one.
//
// What the generated spec guarantees, field by field (the bwrap backend's
// semantics, see SANDBOX.md §3 of the design notes):
//
//   - new network, pid, ipc, uts, mount and cgroup namespaces; hostname
//     "sandbox"; only lo exists in the network namespace;
//   - the process runs as an unprivileged uid/gid (65534 by default; 0 is
//     refused), with no terminal, no_new_privs, and every capability set
//     empty;
//   - rlimits nofile, nproc, core and fsize as given;
//   - a read-only root on an empty skeleton rootfs, with read-only binds of
//     /usr and an allow-list of /etc files (never all of /etc), the tool
//     dir at its own canonical path (also the cwd), the toolgate binary at
//     ShimPath, and the executable when it lies outside those binds.
//     Directory binds are recursively read-only ("rro"): plain "ro" leaves
//     submounts writable;
//   - a private size-limited tmpfs /tmp, a tmpfs /dev with devpts and
//     /dev/shm, /proc with runc's default masked and read-only paths, and
//     no /sys;
//   - the environment exactly as given (runtime/oci passes the four
//     variables; the init shim removes the HOME that runtimes inject);
//   - pids and memory cgroup limits when asked, an explicit cgroupsPath,
//     and a deny-all device cgroup on top of the runtime's default devices;
//   - the containers/common default seccomp profile converted for an empty
//     capability set and tightened so that nested user namespaces are
//     refused (clone and unshare with CLONE_NEWUSER, and clone3, fail).
//     This needs the seccomp build tag; without it asking for seccomp is
//     an error (ErrNoSeccomp), never a silent downgrade.
package bundle
