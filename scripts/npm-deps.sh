#!/usr/bin/env bash
# Install the MCP servers the downstream-server tests run (a real stdio
# server under toolgate's sandbox), idempotently: `npm ci` of the tree
# pinned by scripts/npm/servers/package-lock.json, run only when the
# installed tree is not that one (scripts/lib.sh npm_ensure).
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
# Sourced by scripts/test.sh and scripts/e2e.sh, or run by hand. Needs node
# and npm (Debian: apt-get install nodejs npm). When they are missing or
# the install fails it says so and returns 0: the tests then skip, or fail
# under TOOLGATE_REQUIRE_ALL=1.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

npm_dir="${TOOLGATE_NPM_DIR:-/var/cache/toolgate/npm}"
if npm_ensure npm-deps servers "$npm_dir"; then
	npm_readable "$npm_dir"
	export TOOLGATE_NPM_DIR="$npm_dir"
else
	echo "npm-deps: the downstream MCP server tests will skip (fail under TOOLGATE_REQUIRE_ALL=1)" >&2
fi
