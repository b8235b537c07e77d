#!/usr/bin/env bash
# Run the end-to-end suite (e2e/, build tags seccomp e2e) both ways:
#  1. against the toolgate binary over stdio;
#  2. against the appliance image under `podman run -i --rm`, after building
#     it with scripts/image.sh (the base image is cached; a warm build only
#     rebuilds the binaries and the last layer), with a single-node
#     Kubernetes up for the cluster tests (scripts/k8s-local.sh; always
#     taken down at the end).
#
#   scripts/e2e.sh [binary|image|both]     (default both)
#
# TOOLGATE_IMAGE names the image (default localhost/toolgate:dev);
# TOOLGATE_REQUIRE_ALL=1 turns every skip for a missing binary into a
# failure. Extra `go test` flags can be given in E2E_FLAGS (e.g. -run X -v).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
export CGO_ENABLED=1
which=${1:-both}
image=${TOOLGATE_IMAGE:-localhost/toolgate:dev}
read -r -a flags <<<"${E2E_FLAGS:-}"
# The npm packages the suite runs (idempotent: quick when installed, as
# after scripts/test.sh): the downstream MCP servers and the agent CLIs.
. scripts/npm-deps.sh
. scripts/agent-clis.sh
. scripts/http-deps.sh
# Jaeger all-in-one, the trace backend of TestTracingJaeger: built from the
# Go module proxy once into a cache outside the checkout (scripts/lib.sh;
# tens of minutes cold on 2 busy cores, nothing warm). A failed build
# leaves the test to skip, or to fail under TOOLGATE_REQUIRE_ALL=1.
. scripts/lib.sh
if TOOLGATE_JAEGER=$(jaeger); then
	export TOOLGATE_JAEGER
else
	echo "e2e: building Jaeger failed: TestTracingJaeger skips (TOOLGATE_REQUIRE_ALL=1 makes it fail)" >&2
fi

# k8s_up: the single-node cluster of e2e/cluster_test.go
# (scripts/k8s-local.sh: built from pinned sources or found cached, started
# on 127.0.0.1 with the image imported), taken down when this script ends,
# however it ends. TOOLGATE_K8S=0 leaves it out (the cluster tests then
# skip, or fail under TOOLGATE_REQUIRE_ALL=1).
k8s_up() {
	if [ "${TOOLGATE_K8S:-1}" = 0 ]; then
		echo "e2e: TOOLGATE_K8S=0: no cluster (the cluster tests skip)" >&2
		return 0
	fi
	local k0
	k0=$(date +%s)
	trap 'scripts/k8s-local.sh down || echo "e2e: scripts/k8s-local.sh down FAILED" >&2' EXIT
	if TOOLGATE_K8S_IMAGES=$image scripts/k8s-local.sh up; then
		eval "$(scripts/k8s-local.sh env)"
		echo "== end-to-end: the cluster step (build or cache, up) took $(($(date +%s) - k0)) s" >&2
	elif [ "${TOOLGATE_REQUIRE_ALL:-}" = 1 ]; then
		echo "e2e: scripts/k8s-local.sh up failed (TOOLGATE_REQUIRE_ALL=1)" >&2
		exit 1
	else
		echo "e2e: the cluster did not come up: the cluster tests will SKIP (TOOLGATE_REQUIRE_ALL=1 makes this an error)" >&2
	fi
}

case $which in
binary | image | both) ;;
*)
	echo "usage: scripts/e2e.sh [binary|image|both]" >&2
	exit 2
	;;
esac

if [ "$which" != image ]; then
	echo "== end-to-end: the binary over stdio" >&2
	start=$(date +%s)
	env -u TOOLGATE_E2E_IMAGE go test -tags 'seccomp e2e' -count=1 -timeout 20m "${flags[@]}" ./e2e/
	echo "== end-to-end: binary pass took $(($(date +%s) - start)) s" >&2
fi

if [ "$which" != binary ]; then
	echo "== end-to-end: the image $image under podman" >&2
	start=$(date +%s)
	if ! TOOLGATE_IMAGE=$image scripts/image.sh; then
		if [ "${TOOLGATE_REQUIRE_ALL:-}" = 1 ]; then
			echo "e2e: building the image failed (TOOLGATE_REQUIRE_ALL=1)" >&2
			exit 1
		fi
		echo "e2e: SKIPPING the image pass: building the image failed (TOOLGATE_REQUIRE_ALL=1 makes this an error)" >&2
		exit 0
	fi
	. scripts/podman.sh
	podman_env
	k8s_up
	figures=$(mktemp)
	TOOLGATE_K8S_FIGURES=$figures TOOLGATE_E2E_IMAGE=$image go test -tags 'seccomp e2e' -count=1 -timeout 35m "${flags[@]}" ./e2e/
	if [ -s "$figures" ]; then
		echo "== end-to-end: figures measured on the cluster (e2e/cluster_test.go)" >&2
		cat "$figures" >&2
	fi
	rm -f "$figures"
	echo "== end-to-end: image pass took $(($(date +%s) - start)) s (with the image build)" >&2
fi
