#!/usr/bin/env bash
# Regenerate the lockfile of one pinned npm tree (scripts/lib.sh
# npm_ensure) after a change to its package.json:
#
#   scripts/npm/lock.sh NAME      (NAME: servers, agents, http, bench)
#
# The direct dependencies are pinned by exact version in
# scripts/npm/NAME/package.json; the lockfile pins everything else, with
# integrity hashes. The existing lockfile is kept as the start, so that
# versions it already pins stay as they are.
#
# Native-binary packages list one optional dependency per platform, and a
# registry mirror may serve only some of them (this project's serves
# opencode-linux-x64 but not opencode-darwin-arm64, for one). npm install
# skips an optional dependency it cannot fetch, but `npm ci` then refuses
# the lockfile ("Missing: opencode-darwin-arm64@ from lock file"): the
# optional dependencies that have no entry of their own in the lockfile
# are dropped from their parent's entry, which `npm ci` reads instead of
# the registry's metadata.
set -euo pipefail
name=${1:?usage: scripts/npm/lock.sh NAME}
dir=$(cd "$(dirname "$0")/$name" && pwd)
cd "$dir"
npm install --package-lock-only --no-audit --no-fund --loglevel=error
node -e '
const fs = require("fs");
const lock = JSON.parse(fs.readFileSync("package-lock.json", "utf8"));
const dropped = [];
for (const [key, entry] of Object.entries(lock.packages)) {
  const opt = entry.optionalDependencies;
  if (!opt) continue;
  for (const dep of Object.keys(opt)) {
    // Resolved as Node would: under the parent, or under an ancestor.
    let found = false;
    for (let at = key; ; at = at.replace(/\/?node_modules\/(@[^/]+\/)?[^/]+$/, "")) {
      if (lock.packages[(at ? at + "/" : "") + "node_modules/" + dep]) { found = true; break; }
      if (at === "") break;
    }
    if (!found) {
      delete opt[dep];
      dropped.push(dep);
    }
  }
}
fs.writeFileSync("package-lock.json", JSON.stringify(lock, null, 2) + "\n");
if (dropped.length) console.error("lock: dropped optional dependencies the registry does not serve: " + dropped.join(", "));
'
echo "lock: scripts/npm/$name/package-lock.json written" >&2
