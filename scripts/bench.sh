#!/usr/bin/env bash
# The side-by-side benchmark of every execution path (issues 7 and 27):
# floors (fork+exec, raw bwrap with the backend's own argv and the same call
# one step at a time, raw runc run of a minimal bundle, git_diff_input's git
# runs on the host), toolgate over MCP stdio (direct, bwrap, oci/runc,
# oci/crun, oci/runsc, the built-ins) and over streamable HTTP on loopback
# (direct and bwrap in a 2025-11-25 session, direct stateless 2026-07-28;
# throughput with 1, 8, 32 and 128 clients on one server), and what
# operators would use instead (srt from @anthropic-ai/sandbox-runtime,
# mcp-server-commands over MCP, podman run --rm per call), each call 40 ms
# after the one before (-pace); then the breakdown of a pool-off bwrap
# call, throughput, start-up, a capped 1 GB flood and the server's RSS.
# Prints a markdown table and writes bench.md and bench.json, with each
# target held or missed, and the same figures, with the date and the
# machine, to docs/performance.md (a full run only).
#
# Installs what it needs, idempotently (Debian 12, as root): the build and
# sandbox packages (scripts/deps.sh), socat and ripgrep (srt needs them),
# node and npm when missing, the two npm peers at pinned versions under
# $TOOLGATE_BENCH_DIR/npm, and a local podman image (no registry is needed:
# localhost/toolgate-base:bookworm when scripts/image.sh built it, else a
# one-file image holding the static probe, made with podman import).
# Nothing is sent off this machine.
#
#   TOOLGATE_BENCH_DIR   work directory (default /var/cache/toolgate/bench)
#   BENCH_CALLS          measured calls per path (default 200)
#   BENCH_DOC            the page the figures are written to (default
#                        docs/performance.md; empty: none)
#   BENCH_BASELINE       a git revision: toolgate built from it is measured in
#                        the same rounds (direct, bwrap, oci/runc), for
#                        before/after figures of a change
#   extra arguments go to the bench program (e2e/bench: run -h)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh

. scripts/lib.sh
apt_ensure bench socat:socat rg:ripgrep node:nodejs npm:npm
bench_build

# The peers, pinned by scripts/npm/bench/package-lock.json.
npm_dir=$bench_dir/npm
npm_ensure bench bench "$npm_dir"
args=(-srt "$npm_dir/node_modules/.bin/srt" -srt-settings "$bench_dir/srt-settings.json"
	-commands "$npm_dir/node_modules/mcp-server-commands/build/index.js" -node "$(command -v node)")
# srt with nothing allowed: no network, no writes (the same probe, read-only).
cat >"$bench_dir/srt-settings.json" <<'JSON'
{"network": {"allowedDomains": [], "deniedDomains": []}, "filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []}}
JSON

if [ -n "${BENCH_BASELINE:-}" ]; then
	base_dir=$bench_dir/baseline
	rev=$(git rev-parse --verify "$BENCH_BASELINE^{commit}")
	wt=$(mktemp -d)
	git worktree add --detach --quiet "$wt" "$rev"
	echo "bench: building the baseline toolgate from $rev" >&2
	mkdir -p "$base_dir"
	(cd "$wt" && CGO_ENABLED=1 go build -tags seccomp -ldflags "-X main.version=$(git rev-parse --short "$rev")" -o "$base_dir/toolgate" ./cmd/toolgate &&
		CGO_ENABLED=0 go build -o "$base_dir/toolgate-shim" ./cmd/toolgate-shim)
	git worktree remove --force "$wt"
	chmod 0755 "$base_dir" "$base_dir"/*
	args+=(-baseline "$base_dir/toolgate")
fi

# podman: the host's quirks are detected by scripts/podman.sh (runc under
# hybrid cgroups, cgroupfs without systemd, lowered rlimits without
# CAP_SYS_RESOURCE), never assumed.
. scripts/podman.sh
podman_note=""
if podman_env "$bench_dir"; then
	[ -z "${CONTAINERS_CONF:-}" ] || podman_note="host settings from scripts/podman.sh: $(grep -E '^(runtime|cgroup_manager|default_ulimits)' "$CONTAINERS_CONF" | tr '\n' ' ' | sed 's/ *$//')"
	image=localhost/toolgate-base:bookworm
	if ! podman image exists "$image"; then
		image=localhost/toolgate-bench:probe
		if ! podman image exists "$image"; then
			echo "bench: building $image (just the static probe) with podman import" >&2
			tmp=$(mktemp -d)
			cp "$bench_dir/bin/probe" "$tmp/probe"
			tar -C "$tmp" -cf "$tmp/probe.tar" probe
			podman import --change 'CMD ["/probe"]' "$tmp/probe.tar" "$image" >/dev/null
			rm -rf "$tmp"
		fi
	fi
	args+=(-podman-image "$image" -podman-note "$podman_note")
else
	echo "bench: podman cannot run here: the container-per-call row is skipped" >&2
fi

exec "$bench_dir/bin/bench" run -toolgate "$bench_dir/bin/toolgate" -probe "$bench_dir/bin/probe" \
	-cache "$bench_dir" -calls "${BENCH_CALLS:-200}" -doc "${BENCH_DOC-docs/performance.md}" "${args[@]}" "$@"
