#!/usr/bin/env bash
# The soak test (issue 8): SOAK_CALLS mixed calls (default 10,000) against
# one server per sandbox backend (bwrap; oci with runc), 8 in flight:
# direct and sandboxed tools that succeed, fail, time out, flood past their
# cap, leave a daemon behind, or are cancelled with notifications/cancelled.
# Before and after, it prints the server's open fds, threads, RSS, child
# processes, zombies, leftover containers (runc list under
# /run/toolgate/<pid>), bundles and cgroup directories (toolgate-<pid> under
# /sys/fs/cgroup), and exits non-zero unless every call answered as expected
# and everything is back to its start value.
#
#   SOAK_CALLS           calls in all (default 10000; CI runs 1000)
#   SOAK_OCI_RUNTIME     runtime of the OCI server (default runc; empty skips it)
#   SOAK_POOL            --sandbox-pool of both servers (default 1: prepared
#                        sandboxes, which are then at rest in every snapshot
#                        and must be gone after the server exits; 0: off)
#   SOAK_DOC             a page to write the figures to, as its soak section
#                        (docs/performance.md; default none: CI runs this)
#   TOOLGATE_BENCH_DIR   work directory (default /var/cache/toolgate/bench)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
bench_build
exec "$bench_dir/bin/bench" soak -toolgate "$bench_dir/bin/toolgate" -probe "$bench_dir/bin/probe" \
	-cache "$bench_dir" -calls "${SOAK_CALLS:-10000}" -oci-runtime "${SOAK_OCI_RUNTIME-runc}" -pool "${SOAK_POOL:-1}" -doc "${SOAK_DOC-}" "$@"
