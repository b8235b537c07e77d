#!/usr/bin/env bash
# Format every Go file the way .golangci.yml's formatters check it: gofmt,
# then gofumpt (STYLE.md §19), through golangci-lint fmt at the pinned
# version (scripts/lib.sh).
#
#   scripts/fmt.sh          rewrite the files that need it
#   scripts/fmt.sh --diff   print the changes and change nothing (exit 1
#                           when there are any)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
lint=$(golangci_lint)
case ${1:-} in
"") exec "$lint" fmt ./... ;;
--diff) exec "$lint" fmt --diff ./... ;;
*)
	echo "usage: scripts/fmt.sh [--diff]" >&2
	exit 2
	;;
esac
