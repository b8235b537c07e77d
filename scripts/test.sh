#!/usr/bin/env bash
# Set up and run every test toolgate has: installs what is missing (Debian 12),
# then the unit and integration tests (race detector on) and the end-to-end
# suite both ways (scripts/e2e.sh: the binary over stdio, then the appliance
# image under podman, built by scripts/image.sh). TOOLGATE_REQUIRE_ALL=1
# turns every "missing binary" skip into a failure (CI sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
go_path
# What a cold machine builds from the Go module proxy for the tests, tens
# of CPU-minutes (docs/development.md), starts beside the installs, which
# mostly wait on the network: Helm and Jaeger (pure Go) at once, the
# cluster's binaries once Debian's packages are in (runc needs
# libseccomp-dev, the pause image podman). Each is cached; the later calls
# (helm_bin, jaeger, k8s-local.sh up) find it, or build it again and fail
# loudly there.
prebuilt=$(mktemp)
(helm_bin && jaeger) >/dev/null 2>>"$prebuilt" &
prebuild_go=$!
. scripts/deps.sh
if [ "${TOOLGATE_K8S:-1}" != 0 ]; then
	scripts/k8s-local.sh build >/dev/null 2>>"$prebuilt" &
	prebuild_k8s=$!
fi
. scripts/npm-deps.sh
. scripts/agent-clis.sh
. scripts/http-deps.sh
for pid in $prebuild_go ${prebuild_k8s:-}; do
	if ! wait "$pid"; then
		echo "test: a prebuild failed (built again where it is needed):" >&2
		cat "$prebuilt" >&2
	fi
done
rm -f "$prebuilt"
export CGO_ENABLED=1

echo "== commit subjects" >&2
scripts/commit-subjects.sh

echo "== go vet, go mod tidy, golangci-lint" >&2
go vet -tags seccomp ./...
go vet -tags 'seccomp e2e' ./e2e/
if ! go mod tidy -diff >&2; then
	echo "test: go.mod or go.sum is not tidy: run go mod tidy" >&2
	exit 1
fi
# The linter at a pinned version, built from the Go module proxy once
# (about a minute) into $(go env GOPATH)/bin (scripts/lib.sh); then the
# list of functions exempt from the length and complexity limits, which
# may only shrink.
lint=$(golangci_lint)
"$lint" run ./...
scripts/lint-limits.sh --check

echo "== the build without the seccomp tag (plain go build, vet, and the tests of its own path)" >&2
# Without the tag every seccomp request is an error (ErrNoSeccomp), never a
# sandbox without a filter: bundle's tests assert it (seccomp_unsupported_test.go).
go build ./...
go vet ./...
go test -race -count=1 ./bundle/

# The pinned Helm that deploy/helm's tests run (scripts/lib.sh: built from
# the Go module proxy once, minutes cold, into $(go env GOPATH)/bin).
echo "== helm $helm_version" >&2
helm_bin >/dev/null

echo "== unit and integration tests" >&2
go test -race -tags seccomp -count=1 -timeout 20m ./...

echo "== fuzzing, ${FUZZ_TIME:=30s} per target" >&2
for target in ./conf/:FuzzParse ./conf/registry/:FuzzParseFragment ./server/:FuzzServeLine; do
	go test -tags seccomp -run '^$' -fuzz "^${target#*:}\$" -fuzztime "$FUZZ_TIME" -fuzzminimizetime 5s "${target%%:*}"
done

echo "== end-to-end: the binary over stdio, then the image under podman" >&2
scripts/e2e.sh both
SOAK_CALLS=1000 scripts/soak.sh  # issue 8: mixed calls against one server per backend; fails unless it comes back to its start values
