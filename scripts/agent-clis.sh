#!/usr/bin/env bash
# Install the real agent CLIs the agents end-to-end suite drives
# (e2e/agents_test.go), idempotently: npm runs only when a pinned version is
# missing. Their native binaries come as npm optional dependencies
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
# When they are missing, or a pinned version cannot be installed, it says so
# and returns 0: the agents tests then skip loudly, or fail under
# TOOLGATE_REQUIRE_ALL=1.
set -euo pipefail

agents_dir="${TOOLGATE_AGENTS_DIR:-/var/cache/toolgate/agents}"
agent_packages=(
	"@openai/codex@0.169.0"
	"@anthropic-ai/claude-code@2.1.328"
	"opencode-ai@1.18.33"
)

agent_clis_install() {
	if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
		echo "agent-clis: node and npm not found: the agent CLI tests will skip (apt-get install nodejs npm)" >&2
		return 0
	fi
	local installed=() missing=() p name version pj
	for p in "${agent_packages[@]}"; do
		name="${p%@*}" version="${p##*@}"
		pj="$agents_dir/node_modules/$name/package.json"
		if [ -f "$pj" ] && node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' "$pj" "$version"; then
			installed+=("$p")
		else
			missing+=("$p")
		fi
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "agent-clis: installing ${missing[*]} into $agents_dir" >&2
		mkdir -p "$agents_dir"
		# All pins in one install: npm prunes what a later install does not
		# name. --include=optional: the native binaries are optional deps.
		if ! npm install --prefix "$agents_dir" --no-audit --no-fund --loglevel=error \
			--include=optional "${agent_packages[@]}" >&2; then
			echo "agent-clis: npm install of ${missing[*]} FAILED: the agent CLI tests will skip (fail under TOOLGATE_REQUIRE_ALL=1)" >&2
			return 0
		fi
	fi
	local bin
	for bin in codex claude opencode; do
		if ! "$agents_dir/node_modules/.bin/$bin" --version >/dev/null 2>&1; then
			echo "agent-clis: $agents_dir/node_modules/.bin/$bin does not run (its native binary is missing?): the agent CLI tests will skip" >&2
		fi
	done
	export TOOLGATE_AGENTS_DIR="$agents_dir"
}

agent_clis_install
