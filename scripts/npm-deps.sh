#!/usr/bin/env bash
# Install the MCP servers the downstream-server tests run (a real stdio
# server under toolgate's sandbox), idempotently: npm runs only when a
# pinned version is missing.
#  - @modelcontextprotocol/server-everything, server-filesystem: the
#    reference servers;
#  - @tokenizin/mcp-npx-fetch: a fetch server (fetch_html and others take
#    a URL as argument) whose requests go through Node's global fetch, so
#    that it honours HTTP_PROXY under NODE_USE_ENV_PROXY=1 on Node >= 22.21
#    (scripts/http-deps.sh installs one): the allowed_hosts e2e test
#    (e2e/egress_test.go). The directory must be readable by the sandbox
# uid (nobody), so it lives outside any home directory and is made a+rX.
#
#   TOOLGATE_NPM_DIR   where to install (default /var/cache/toolgate/npm);
#                      the tests read the same variable.
# Needs node and npm (Debian: apt-get install nodejs npm). Without them it
# says so and returns 0: the tests then skip, or fail under
# TOOLGATE_REQUIRE_ALL=1.
set -euo pipefail

npm_dir="${TOOLGATE_NPM_DIR:-/var/cache/toolgate/npm}"
packages=(
	"@modelcontextprotocol/server-everything@2026.8.31"
	"@modelcontextprotocol/server-filesystem@2026.8.31"
	"@tokenizin/mcp-npx-fetch@1.0.0"
)

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	echo "npm-deps: node and npm not found: the downstream MCP server tests will skip (apt-get install nodejs npm)" >&2
	return 0 2>/dev/null || exit 0
fi

installed() { # installed <name@version>
	local name="${1%@*}" version="${1##*@}"
	local pj="$npm_dir/node_modules/$name/package.json"
	[ -f "$pj" ] && node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' "$pj" "$version"
}

missing=()
for p in "${packages[@]}"; do
	installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "npm-deps: installing ${missing[*]} into $npm_dir" >&2
	mkdir -p "$npm_dir"
	npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "${packages[@]}" >&2
fi
chmod -R a+rX "$npm_dir"
# Every parent must be searchable by the sandbox uid.
d="$npm_dir"
while [ "$d" != "/" ]; do chmod o+x "$d" 2>/dev/null || true; d="$(dirname "$d")"; done
export TOOLGATE_NPM_DIR="$npm_dir"
