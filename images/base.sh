#!/usr/bin/env bash
# Build the appliance's base image from Debian packages, for hosts that
# cannot pull docker.io/library/debian:bookworm-slim (no registry reachable):
# a minimal Debian 12 root filesystem made by mmdebstrap (--variant=apt: the
# Essential set plus apt, so that the Containerfile can apt-get install the
# appliance's packages), trimmed like the -slim images (no man pages, docs
# or translations), without apt lists or caches, imported into podman.
#
#   images/base.sh [--force]
#
# TOOLGATE_BASE names the image (default localhost/toolgate-base:bookworm).
# It is a cache: an existing image is kept unless --force is given.
# mmdebstrap picks the Debian mirror, and adds bookworm-updates and
# bookworm-security itself; TOOLGATE_DEBIAN_MIRROR (a URI, a "deb ..." line
# or a sources file) overrides it. Needs root, or unprivileged user
# namespaces (mmdebstrap then runs in --mode=unshare).
set -euo pipefail

tag=${TOOLGATE_BASE:-localhost/toolgate-base:bookworm}
if [ "${1:-}" != --force ] && podman image exists "$tag"; then
	echo "base: $tag exists (cached; images/base.sh --force rebuilds it)" >&2
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mirror=()
[ -z "${TOOLGATE_DEBIAN_MIRROR:-}" ] || mirror=("$TOOLGATE_DEBIAN_MIRROR")

echo "base: mmdebstrap bookworm (variant apt) -> $tag" >&2
start=$(date +%s)
mmdebstrap --variant=apt --format=tar --quiet \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--aptopt='APT::Install-Recommends "false"' \
	--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/apt/* "$1"/var/log/dpkg.log "$1"/var/log/bootstrap.log' \
	bookworm "$tmp/rootfs.tar" "${mirror[@]}" </dev/null

podman import \
	--change 'CMD ["/bin/bash"]' \
	--change 'LABEL org.opencontainers.image.description="Debian 12 (bookworm) base built by toolgate images/base.sh with mmdebstrap --variant=apt"' \
	--message "mmdebstrap --variant=apt bookworm" \
	"$tmp/rootfs.tar" "$tag" >/dev/null
echo "base: $tag built in $(($(date +%s) - start)) s ($(du -m "$tmp/rootfs.tar" | cut -f1) MiB uncompressed)" >&2
