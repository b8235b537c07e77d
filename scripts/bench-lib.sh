#!/usr/bin/env bash
# Sourced by scripts/bench.sh and scripts/soak.sh: installs what both need
# (scripts/deps.sh: bubblewrap, runc, crun, runsc, podman, gcc and
# libseccomp-dev for the seccomp build, Go 1.26) and builds, into
# $bench_dir/bin (every directory traversable by the sandbox uid):
# toolgate (cgo, -tags seccomp), toolgate-shim next to it (static), the
# probe test tool (static) and the bench program (e2e/bench).
#
#   TOOLGATE_BENCH_DIR  work directory (default /var/cache/toolgate/bench)

bench_dir=${TOOLGATE_BENCH_DIR:-/var/cache/toolgate/bench}

bench_build() {
	. scripts/deps.sh
	export PATH="/usr/local/go/bin:$PATH"
	mkdir -p "$bench_dir/bin"
	# The sandbox uid (65534) runs the probe and the shim from here.
	local d="$bench_dir/bin"
	while [ "$d" != "/" ]; do chmod o+rx "$d" 2>/dev/null || true; d=$(dirname "$d"); done
	local version
	version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
	echo "bench: building toolgate $version, toolgate-shim, probe, minimal and the bench program into $bench_dir/bin" >&2
	CGO_ENABLED=1 go build -tags seccomp -ldflags "-X main.version=$version" -o "$bench_dir/bin/toolgate" ./cmd/toolgate
	CGO_ENABLED=0 go build -o "$bench_dir/bin/toolgate-shim" ./cmd/toolgate-shim
	CGO_ENABLED=0 go build -o "$bench_dir/bin/probe" ./internal/probe
	CGO_ENABLED=0 go build -o "$bench_dir/bin/minimal" ./e2e/bench/minimal
	# cgo and the seccomp tag: the raw bwrap floors load the backend's own
	# compiled filter.
	CGO_ENABLED=1 go build -tags seccomp -o "$bench_dir/bin/bench" ./e2e/bench
	chmod 0755 "$bench_dir/bin"/*
}
