#!/usr/bin/env bash
# Builds the OCI clients the attestation tests read toa-push's output with, from their Go
# modules, into ${TOA_CACHE:-$HOME/.cache/toa-deploy}/tools/<tool>-<version>-<key>/<tool>:
#   oras   (oras.land/oras)              `oras discover` lists an image's referrers
#   cosign (github.com/sigstore/cosign/v3) `cosign verify --key` checks our signatures
#   syft   (github.com/anchore/syft)     `syft convert` reads an attached SBOM alone, `syft scan`
#                                        lists what is in a pushed image
# Each tool is a module of its own beside this file (its go.mod pins the version; one go.mod
# cannot hold them all without moving one's dependencies). The key is a hash of the module's go.mod,
# go.sum and this script, so a version bump builds anew; an existing build is used as it is.
# Prints `<tool> <path>` per tool. Idempotent: a second run checks and returns.
#
# Usage: install.sh [TOOL...]   (default: every tool)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TOA_CACHE:-$HOME/.cache/toa-deploy}/tools

log() { printf 'tools: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

command -v go >/dev/null || die "go is needed to build the test tools (Go 1.26)"
command -v flock >/dev/null || die "flock is needed (util-linux)"
command -v sha256sum >/dev/null || die "sha256sum is needed (coreutils)"

# main package of each tool, and the -ldflags its own Makefile sets for the version it reports
declare -A pkg=(
	[oras]=oras.land/oras/cmd/oras
	[cosign]=github.com/sigstore/cosign/v3/cmd/cosign
	[syft]=github.com/anchore/syft/cmd/syft
)
declare -A module=(
	[oras]=oras.land/oras
	[cosign]=github.com/sigstore/cosign/v3
	[syft]=github.com/anchore/syft
)

# version TOOL: the version the tool's go.mod requires.
version() {
	sed -n "s|^require ${module[$1]} \(v[^ ]*\)$|\1|p" "$here/$1/go.mod"
}

ldflags() {
	local v=$1 tool=$2
	case $tool in
	oras) echo "-s -w -X oras.land/oras/internal/version.BuildMetadata= -X oras.land/oras/internal/version.GitTreeState=clean" ;;
	cosign) echo "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$v -X sigs.k8s.io/release-utils/version.gitTreeState=clean" ;;
	syft) echo "-s -w -X main.version=$v" ;;
	esac
}

build() {
	local tool=$1 v key dir
	v=$(version "$tool")
	[[ -n $v ]] || die "no version of ${module[$tool]} in $here/$tool/go.mod"
	key=$(cat "$here/$tool/go.mod" "$here/$tool/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
	dir=$cache/$tool-$v-$key
	mkdir -p "$cache"
	(
		flock 8
		if [[ ! -x $dir/$tool ]]; then
			log "building $tool $v into $dir (a few minutes on 2 cores, once)"
			began=$(date +%s)
			rm -rf "$dir.tmp"
			mkdir -p "$dir.tmp"
			(cd "$here/$tool" && GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
				go build -trimpath -ldflags "$(ldflags "$v" "$tool")" -o "$dir.tmp/$tool" "${pkg[$tool]}") 8>&- ||
				{ rm -rf "$dir.tmp"; die "building $tool $v failed"; }
			rm -rf "$dir"
			mv "$dir.tmp" "$dir"
			log "built $tool in $(($(date +%s) - began)) s"
		fi
		# a stable name for the current build, for the tests and for people
		ln -sfn "$tool-$v-$key/$tool" "$cache/$tool"
	) 8>"$cache/.$tool.lock"
	echo "$tool $dir/$tool"
}

tools=("$@")
[[ ${#tools[@]} -gt 0 ]] || tools=(oras cosign syft)
for t in "${tools[@]}"; do
	[[ -n ${pkg[$t]:-} ]] || die "unknown tool $t (known: ${!pkg[*]})"
	build "$t"
done
