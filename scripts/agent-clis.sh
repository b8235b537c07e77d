#!/usr/bin/env bash
# Install the real agent CLIs the agents end-to-end suite drives
# (e2e/agents_test.go), idempotently: `npm ci` of the tree pinned by
# scripts/npm/agents/package-lock.json, run only when the installed tree is
# not that one (scripts/lib.sh npm_ensure). Their native binaries come as npm optional dependencies
# (@openai/codex-linux-x64, @anthropic-ai/claude-code-linux-x64,
# opencode-linux-x64); npm installs the one of this platform.
#
#   TOOLGATE_AGENTS_DIR   where to install (default /var/cache/toolgate/agents);
#                         the tests read the same variable.
#
# OpenCode's provider package (@ai-sdk/openai-compatible) is bundled in the
# opencode binary: `opencode run` installs nothing at run time (the suite runs
# it without a network and checks that it left no package cache).
#
# Sourced by scripts/test.sh and scripts/e2e.sh (like scripts/npm-deps.sh),
# or run by hand. Needs node and npm (Debian: apt-get install nodejs npm).
# When they are missing, or the pinned tree cannot be installed, it says so
# and returns 0: the agents tests then skip loudly, or fail under
# TOOLGATE_REQUIRE_ALL=1.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

agents_dir="${TOOLGATE_AGENTS_DIR:-/var/cache/toolgate/agents}"

agent_clis_install() {
	# --include=optional: the native binaries are optional dependencies.
	if ! npm_ensure agent-clis agents "$agents_dir" --include=optional; then
		echo "agent-clis: the agent CLI tests will skip (fail under TOOLGATE_REQUIRE_ALL=1)" >&2
		return 0
	fi
	# Each CLI runs once after an install (opencode takes seconds to
	# start); later runs only look for them.
	local bin
	for bin in codex claude opencode; do
		bin=$agents_dir/node_modules/.bin/$bin
		if [ ! -x "$bin" ] || { [ "$npm_ensure_ran" = 1 ] && ! "$bin" --version >/dev/null 2>&1; }; then
			echo "agent-clis: $bin does not run (its native binary is missing?): the agent CLI tests will skip" >&2
		fi
	done
	export TOOLGATE_AGENTS_DIR="$agents_dir"
}

agent_clis_install
