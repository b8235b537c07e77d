#!/usr/bin/env bash
# Install what toolgate's build and tests need on Debian 12, idempotently:
# only what is missing, with one apt-get update. Run as root (or via sudo).
set -euo pipefail

need_pkgs=()
want() { # want <command-or-path> <debian package>
	if ! command -v "$1" >/dev/null 2>&1 && [ ! -e "$1" ]; then need_pkgs+=("$2"); fi
}
want git git
want bwrap bubblewrap
want runc runc
want crun crun
want runsc runsc
want podman podman
want mmdebstrap mmdebstrap
want newuidmap uidmap
want ctags universal-ctags
want /usr/include/seccomp.h libseccomp-dev
want pkg-config pkg-config
want gcc gcc

if [ ${#need_pkgs[@]} -gt 0 ]; then
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	echo "deps: installing ${need_pkgs[*]}" >&2
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

if ! command -v go >/dev/null 2>&1; then
	if [ -x /usr/local/go/bin/go ]; then
		export PATH="/usr/local/go/bin:$PATH"
	else
		echo "deps: Go 1.26 is required (go.mod says $(sed -n 's/^go //p' "$(dirname "$0")/../go.mod"))" >&2
		exit 1
	fi
fi
