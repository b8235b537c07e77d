#!/usr/bin/env bash
# Build the toolgate appliance image:
#  1. install what is missing (podman, mmdebstrap, uidmap, runc, and the
#     seccomp build's gcc, pkg-config, libseccomp-dev) with apt-get;
#  2. on a host that needs them, podman settings in a generated
#     containers.conf (scripts/podman.sh: runc under hybrid cgroups, cgroupfs
#     without systemd, lowered rlimits without CAP_SYS_RESOURCE);
#  3. the base image from Debian packages (images/base.sh) when the base is a
#     localhost/ image that does not exist yet (a cache: it is kept);
#  4. the two binaries on the host (the module needs Go 1.26, which no
#     Debian 12 package or pullable builder image gives here);
#  5. podman build -f Containerfile with a context of just those binaries.
#
#   TOOLGATE_IMAGE  the image to build (default localhost/toolgate:dev)
#   TOOLGATE_BASE   the base (default localhost/toolgate-base:bookworm, built
#                   here; docker.io/library/debian:bookworm-slim on a host
#                   that can pull it)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
image=${TOOLGATE_IMAGE:-localhost/toolgate:dev}
base=${TOOLGATE_BASE:-localhost/toolgate-base:bookworm}
export TOOLGATE_BASE=$base

. scripts/lib.sh
# catatonit: podman kube play builds its pause image with it (e2e/kube_test.go).
apt_ensure image podman:podman mmdebstrap:mmdebstrap newuidmap:uidmap runc:runc \
	catatonit:catatonit git:git gcc:gcc pkg-config:pkg-config \
	/usr/include/seccomp.h:libseccomp-dev
go_path

. scripts/podman.sh
podman_env

t0=$(date +%s)
case $base in
localhost/*) images/base.sh ;;
esac
t1=$(date +%s)

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
chmod 0755 "$ctx"
version=$(git -C "$repo" describe --tags --always --dirty 2>/dev/null || echo dev)
echo "image: building toolgate $version (seccomp) and toolgate-shim (static)" >&2
CGO_ENABLED=1 go build -trimpath -tags seccomp -ldflags "-X main.version=$version" -o "$ctx/toolgate" ./cmd/toolgate
CGO_ENABLED=0 go build -trimpath -o "$ctx/toolgate-shim" ./cmd/toolgate-shim
t2=$(date +%s)

echo "image: podman build $image FROM $base" >&2
previous=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
podman build --quiet -f "$repo/Containerfile" \
	--build-arg BASE="$base" --build-arg VERSION="$version" \
	-t "$image" "$ctx" >/dev/null
t3=$(date +%s)
# The build moved the tag: drop the image it left untagged, so that
# rebuilds do not pile up (kept when a container still uses it).
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$image")" ]; then
	podman rmi "$previous" >/dev/null 2>&1 || true
fi
size=$(podman image inspect --format '{{.Size}}' "$image")
echo "image: $image built ($((size / 1048576)) MiB): base $((t1 - t0)) s, binaries $((t2 - t1)) s, podman build $((t3 - t2)) s" >&2
