#!/usr/bin/env bash
# Commit subjects of at most 72 characters (docs/development.md): checked
# for every commit after a fixed base, the start of the round that made it
# a rule (the history before it is left as it is). Run by scripts/test.sh.
#
#   TOOLGATE_COMMITS_BASE   the base (default b460a25, issue 22's start)
#
# It needs the history from the base to HEAD: on a checkout without git,
# on a shallow clone, or when the base is not an ancestor of HEAD, it says
# why and checks nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${TOOLGATE_COMMITS_BASE:-b460a25adebd387ad84b468d4eb45921e0ac24a2}
max=72
export LC_ALL=C.UTF-8 # ${#subject} counts characters, not bytes

if ! git rev-parse --git-dir >/dev/null 2>&1; then
	echo "commit-subjects: SKIPPED: not a git checkout" >&2
	exit 0
fi
if ! git merge-base --is-ancestor "$base" HEAD 2>/dev/null; then
	why="$base is not an ancestor of HEAD"
	if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
		why="a shallow clone (git fetch --unshallow to check)"
	fi
	echo "commit-subjects: SKIPPED: $why" >&2
	exit 0
fi

bad=0 n=0
while IFS= read -r -d '' line; do
	n=$((n + 1))
	subject=${line#* }
	len=${#subject}
	if [ "$len" -gt "$max" ]; then
		echo "commit-subjects: ${line%% *}: subject is $len characters (at most $max): $subject" >&2
		bad=$((bad + 1))
	fi
done < <(git log -z --format='%h %s' "$base..HEAD")
if [ "$bad" -gt 0 ]; then
	echo "commit-subjects: $bad of $n commits after $(git rev-parse --short "$base") have a subject over $max characters (git rebase -i to reword)" >&2
	exit 1
fi
echo "commit-subjects: $n commits after $(git rev-parse --short "$base"), every subject at most $max characters" >&2
