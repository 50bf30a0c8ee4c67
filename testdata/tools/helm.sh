#!/usr/bin/env bash
# Builds Helm v3 (helm.sh/helm/v3, the version testdata/tools/helm/go.mod pins) from its Go module
# into ${TOA_CACHE:-$HOME/.cache/toa-deploy}/tools/helm-<version>-<key>/helm, and links
# tools/helm to it. Only `make bench` uses it (bench/large.go: `helm upgrade --install --wait`,
# the way Toa 289 deployed, beside toa-apply and kubectl); no test does. A script of its own, as
# flux.sh: a tool added to install.sh would change the key of the oras and cosign builds. The
# key is a hash of the module's go.mod, go.sum and this script. Prints `helm <path>`. Idempotent.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TOA_CACHE:-$HOME/.cache/toa-deploy}/tools

log() { printf 'tools: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

command -v go >/dev/null || die "go is needed to build helm (Go 1.26)"
command -v flock >/dev/null || die "flock is needed (util-linux)"

v=$(sed -n 's|^require helm.sh/helm/v3 \(v[^ ]*\)$|\1|p' "$here/helm/go.mod")
[[ -n $v ]] || die "no version of helm.sh/helm/v3 in $here/helm/go.mod"
key=$(cat "$here/helm/go.mod" "$here/helm/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
dir=$cache/helm-$v-$key
mkdir -p "$cache"
(
	flock 8
	if [[ ! -x $dir/helm ]]; then
		log "building helm $v into $dir (a few minutes on 2 cores, once)"
		began=$(date +%s)
		rm -rf "$dir.tmp"
		mkdir -p "$dir.tmp"
		# the -X flags of Helm's Makefile that say what it is
		ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$v -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
		(cd "$here/helm" && GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
			go build -trimpath -ldflags "$ldflags" -o "$dir.tmp/helm" helm.sh/helm/v3/cmd/helm) 8>&- ||
			{ rm -rf "$dir.tmp"; die "building helm $v failed"; }
		rm -rf "$dir"
		mv "$dir.tmp" "$dir"
		log "built helm in $(($(date +%s) - began)) s"
	fi
	ln -sfn "helm-$v-$key/helm" "$cache/helm"
) 8>"$cache/.helm.lock"
echo "helm $dir/helm"
