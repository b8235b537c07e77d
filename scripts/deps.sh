#!/usr/bin/env bash
# Install what toolgate's build and tests need on Debian 12, idempotently:
# only what is missing, with one apt-get update (scripts/lib.sh). Run as
# root (or via sudo). Sourced by scripts/test.sh, bench-lib.sh and
# run-example.sh, or run by hand.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

apt_ensure deps git:git bwrap:bubblewrap runc:runc crun:crun runsc:runsc \
	podman:podman mmdebstrap:mmdebstrap newuidmap:uidmap ctags:universal-ctags \
	/usr/include/seccomp.h:libseccomp-dev pkg-config:pkg-config gcc:gcc
go_path
