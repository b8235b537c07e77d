# shellcheck shell=bash
# Sourced by the scripts that install what toolgate's build, tests and
# benchmark need (deps.sh, npm-deps.sh, agent-clis.sh, http-deps.sh,
# image.sh, bench.sh, test.sh, fmt.sh): one way to install a missing Debian
# package, a pinned npm tree and the pinned linter, each idempotent and
# quick when everything is present.

toolgate_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# apt_ensure WHO CMD:PACKAGE...: install each Debian PACKAGE whose CMD (a
# command on PATH, or a path that must exist) is missing, in one apt-get
# install. apt-get update runs once per run of the calling scripts
# (TOOLGATE_APT_UPDATED). Needs root or sudo only when something is missing.
apt_ensure() {
	local who=$1 spec cmd need=()
	shift
	for spec; do
		cmd=${spec%:*}
		if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -e "$cmd" ]; then need+=("${spec##*:}"); fi
	done
	if [ ${#need[@]} -eq 0 ]; then return 0; fi
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	echo "$who: installing ${need[*]}" >&2
	if [ -z "${TOOLGATE_APT_UPDATED:-}" ]; then
		$sudo apt-get update -qq
		export TOOLGATE_APT_UPDATED=1
	fi
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

# npm_ensure WHO NAME DEST [npm ci flags...]: make DEST hold exactly the npm
# tree pinned by scripts/npm/NAME/{package.json,package-lock.json}. When
# DEST's tree is another one (npm_current), copy both files into DEST and
# run `npm ci` there, which replaces DEST/node_modules; when it is that
# tree, only refresh DEST's copies of the two files (an install made
# before the lockfiles were committed is kept as it is). Returns 0 when
# DEST is as pinned, 1 when the install failed, 2 when node or npm is
# missing; it says which on stderr, and the caller says what skips.
# npm_ensure_ran is 1 when it ran npm ci, else 0.
npm_ensure() {
	local who=$1 name=$2 dest=$3
	local src=$toolgate_root/scripts/npm/$name f
	shift 3
	npm_ensure_ran=0
	if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
		echo "$who: node and npm not found (apt-get install nodejs npm)" >&2
		return 2
	fi
	if ! npm_current "$src" "$dest"; then
		echo "$who: npm ci of scripts/npm/$name into $dest" >&2
		npm_ensure_ran=1
		mkdir -p "$dest"
		cp "$src/package.json" "$src/package-lock.json" "$dest/"
		if ! (cd "$dest" && npm ci --no-audit --no-fund --loglevel=error "$@" >&2) || ! npm_current "$src" "$dest"; then
			echo "$who: npm ci in $dest FAILED" >&2
			return 1
		fi
	fi
	for f in package.json package-lock.json; do
		cmp -s "$src/$f" "$dest/$f" || cp "$src/$f" "$dest/$f"
	done
}

# npm_current SRC DEST: the tree npm last installed in DEST (its record,
# DEST/node_modules/.package-lock.json, written at the end of an install)
# is the one SRC/package-lock.json pins: every installed package at its
# pinned version and integrity and present on disk, nothing else
# installed, and every package that is not optional installed (optional
# ones are those of other platforms). One `node -e`, about 50 ms.
npm_current() {
	local src=$1 dest=$2
	node -e '
const fs = require("fs"), path = require("path");
const [src, dest] = process.argv.slice(1);
let want, have;
try {
  want = JSON.parse(fs.readFileSync(path.join(src, "package-lock.json"), "utf8")).packages;
  have = JSON.parse(fs.readFileSync(path.join(dest, "node_modules", ".package-lock.json"), "utf8")).packages;
} catch (e) { process.exit(1); }
for (const [key, h] of Object.entries(have)) {
  const w = want[key];
  if (!w || w.version !== h.version || (w.integrity && h.integrity && w.integrity !== h.integrity)) process.exit(1);
  if (!fs.existsSync(path.join(dest, key, "package.json"))) process.exit(1);
}
for (const [key, w] of Object.entries(want)) {
  if (key !== "" && !w.optional && !have[key]) process.exit(1);
}' "$src" "$dest"
}

# npm_readable DIR: DIR and everything under it readable by any uid, and
# every parent directory searchable: the sandbox runs the installed servers
# as nobody.
npm_readable() {
	local d=$1
	chmod -R a+rX "$d"
	while [ "$d" != "/" ]; do
		chmod o+x "$d" 2>/dev/null || true
		d=$(dirname "$d")
	done
}

# go_path: put the Go toolchain on PATH (Go 1.26 at /usr/local/go on the
# project's machines); fails with the version go.mod asks for when there
# is none.
go_path() {
	case ":$PATH:" in *:/usr/local/go/bin:*) ;; *) [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH" ;; esac
	if ! command -v go >/dev/null 2>&1; then
		echo "Go $(sed -n 's/^go //p' "$toolgate_root/go.mod") is required (at /usr/local/go or on PATH)" >&2
		return 1
	fi
}

# golangci_lint: print the path of golangci-lint at the pinned version,
# built from the Go module proxy into GOPATH/bin first when it is missing
# or another version (about a minute).
golangci_lint_version=v2.15.0
golangci_lint() {
	go_path
	local lint
	lint=$(go env GOPATH)/bin/golangci-lint
	if ! "$lint" version 2>/dev/null | grep -q "version ${golangci_lint_version#v} "; then
		echo "installing golangci-lint $golangci_lint_version into $(dirname "$lint")" >&2
		GOBIN=$(dirname "$lint") go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$golangci_lint_version" >&2 || return 1
	fi
	printf '%s\n' "$lint"
}

# helm_bin: print the path of Helm at the pinned version, built from the Go
# module proxy into GOPATH/bin/helm-VERSION first when it is missing or
# another version. `go install PKG@VERSION` builds it as a module of its
# own, with Helm's go.mod and go.sum, outside toolgate's go.mod: Helm's
# k8s.io modules and the rest of its tree never enter toolgate's build.
# The ldflags are Helm's Makefile's for a release (`helm version` names
# it). Cold (no module or build cache) it takes minutes on 2 cores
# (docs/kubernetes.md, "Helm"); warm, a version check.
helm_version=v4.3.2
helm_bin() {
	go_path
	local bin tmp
	bin=$(go env GOPATH)/bin/helm-$helm_version
	if [ "$("$bin" version --template '{{.Version}}' 2>/dev/null)" != "$helm_version" ]; then
		echo "building helm $helm_version into $bin" >&2
		# Built beside bin, so that the mv is a rename: never half a binary.
		mkdir -p "$(dirname "$bin")"
		tmp=$(mktemp -d "$(dirname "$bin")/.helm-build.XXXXXX")
		if ! CGO_ENABLED=0 GOBIN=$tmp GOFLAGS=-buildvcs=false go install -trimpath \
			-ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version -X helm.sh/helm/v4/internal/version.metadata= -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
			"helm.sh/helm/v4/cmd/helm@$helm_version" >&2; then
			rm -rf "$tmp"
			return 1
		fi
		mv "$tmp/helm" "$bin"
		rm -rf "$tmp"
	fi
	printf '%s\n' "$bin"
}

# jaeger: print the path of Jaeger all-in-one at the pinned version (the
# e2e suite's trace backend, e2e/tracing_test.go), built from the Go module
# proxy into a cache outside the checkout first when it is missing: a
# throwaway module (`go get -tool`), never toolgate's go.mod. v1.75.0 is
# the approved release (v1.76.0 is served but not approved). A cold build
# takes minutes on 2 cores; TOOLGATE_CACHE moves the cache
# (default ~/.cache/toolgate).
jaeger_version=v1.75.0
jaeger() {
	go_path
	local dir=${TOOLGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toolgate}/jaeger-$jaeger_version
	local bin=$dir/jaeger
	if [ ! -x "$bin" ]; then
		echo "building jaeger $jaeger_version into $dir (minutes, once)" >&2
		local mod start=$SECONDS
		mod=$(mktemp -d) || return 1
		if ! (cd "$mod" && go mod init toolgate.local/jaeger >/dev/null 2>&1 &&
			GOFLAGS=-mod=mod go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$jaeger_version" >&2 &&
			mkdir -p "$dir" && go build -trimpath -o "$bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger >&2 &&
			mv "$bin.tmp" "$bin"); then
			rm -rf "$mod"
			echo "building jaeger $jaeger_version FAILED" >&2
			return 1
		fi
		rm -rf "$mod"
		echo "built jaeger $jaeger_version in $((SECONDS - start)) s" >&2
	fi
	printf '%s\n' "$bin"
}
