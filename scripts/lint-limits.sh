#!/usr/bin/env bash
# The length and complexity limits of .golangci.yml (funlen, gocognit) hold
# new code only: the functions over them when the limits came in are
# listed, by name, between the "BEGIN limits baseline" and "END limits
# baseline" lines of .golangci.yml. By name and not by path, so that moving
# a function to another file or package keeps its exemption; a function
# that is split or shortened below the limits drops out of the list at the
# next run of this script.
#
#   scripts/lint-limits.sh           print the list the tree needs now
#   scripts/lint-limits.sh --check   fail if the committed list has entries
#                                    no function needs any more
#   scripts/lint-limits.sh --write   rewrite the list in .golangci.yml
#
# --write is for after a pure move or a merge that renamed an exempt
# function; it must not be used to let a new long function in (the diff of
# .golangci.yml shows what it added).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

mode=${1:-print}
case $mode in print | --check | --write) ;; *)
	echo "usage: scripts/lint-limits.sh [--check|--write]" >&2
	exit 2
	;;
esac

lint=$(golangci_lint)
conf=.golangci.yml
grep -q '^ *# BEGIN limits baseline' "$conf" || {
	echo "lint-limits: $conf has no '# BEGIN limits baseline' line" >&2
	exit 1
}
# The same configuration without the list, next to the original so that
# relative paths resolve the same way (run.relative-path-mode: cfg).
tmp=$(mktemp .golangci.limits.XXXXXX.yml)
trap 'rm -f "$tmp"' EXIT
sed '/# BEGIN limits baseline/,/# END limits baseline/{/# BEGIN limits baseline/!{/# END limits baseline/!d}}' "$conf" >"$tmp"

# One rule per function over a limit: funlen names the function without
# its receiver, so its rules also name the file's base name (generic method
# names such as ServeHTTP); gocognit names the receiver.
# golangci-lint exits 1 when it reports something, more on an error.
rc=0
out=$("$lint" run -c "$tmp" --enable-only funlen,gocognit --uniq-by-line=false --allow-serial-runners \
	--output.text.path stdout \
	--output.text.print-issued-lines=false --show-stats=false ./...) || rc=$?
if [ "$rc" -gt 1 ]; then
	echo "lint-limits: golangci-lint failed (exit $rc)" >&2
	exit 1
fi
rules=$(printf '%s\n' "$out" |
	sed -nE \
		-e "s#^([^:]*/)?([^/:]+):[0-9]+:[0-9]+: Function '([A-Za-z0-9_]+)' (is too long|has too many statements).*\\(funlen\\)\$#funlen \\2 \\3#p" \
		-e 's#^.*: cognitive complexity [0-9]+ of func `([^`]+)` is high.*\(gocognit\)$#gocognit \1#p' |
	while read -r linter a b; do
		# Regular-expression metacharacters of Go names and file names.
		a=$(printf '%s' "$a" | sed -e 's/[][().*]/\\&/g')
		case $linter in
		funlen) printf "      - {linters: [funlen], path: '(^|/)%s\$', text: \"^Function '%s' \"}\n" "$a" "$b" ;;
		gocognit) printf "      - {linters: [gocognit], text: 'of func \`%s\` is high'}\n" "$a" ;;
		esac
	done | LC_ALL=C sort -u)

current=$(sed -n '/# BEGIN limits baseline/,/# END limits baseline/{/# BEGIN limits baseline/!{/# END limits baseline/!p}}' "$conf" | grep -v '^ *#' || true)
case $mode in
print) printf '%s\n' "$rules" ;;
--check)
	stale=$(comm -13 <(printf '%s\n' "$rules") <(printf '%s\n' "$current" | LC_ALL=C sort -u))
	if [ -n "$stale" ]; then
		printf 'lint-limits: %s lists functions that are now within the limits; drop them (scripts/lint-limits.sh --write):\n%s\n' "$conf" "$stale" >&2
		exit 1
	fi
	;;
--write)
	{
		sed -n '1,/# BEGIN limits baseline/p' "$conf"
		printf '%s\n' "$rules"
		sed -n '/# END limits baseline/,$p' "$conf"
	} >"$tmp.new"
	mv "$tmp.new" "$conf"
	echo "lint-limits: $(printf '%s\n' "$rules" | grep -c .) functions listed in $conf" >&2
	;;
esac
