#!/usr/bin/env bash
# Runs staticcheck (honnef.co/go/tools) on the packages given (default ./...), built first from
# its Go module beside this file (staticcheck/go.mod pins the version) into
# ${TOA_CACHE:-$HOME/.cache/toa-deploy}/tools/staticcheck-<version>-<key>/staticcheck, as
# install.sh builds oras and cosign. The key is a hash of the module's go.mod, go.sum and this
# script, so a version bump builds anew; an existing build is used as it is. `make vet` runs it.
#
# Usage: staticcheck.sh [PACKAGE...]    (run from the module's root)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TOA_CACHE:-$HOME/.cache/toa-deploy}/tools

log() { printf 'staticcheck: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

command -v go >/dev/null || die "go is needed to build staticcheck (Go 1.26)"
command -v flock >/dev/null || die "flock is needed (util-linux)"
command -v sha256sum >/dev/null || die "sha256sum is needed (coreutils)"

v=$(sed -n 's|^require honnef.co/go/tools \(v[^ ]*\)$|\1|p' "$here/staticcheck/go.mod")
[[ -n $v ]] || die "no version of honnef.co/go/tools in $here/staticcheck/go.mod"
key=$(cat "$here/staticcheck/go.mod" "$here/staticcheck/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
dir=$cache/staticcheck-$v-$key
mkdir -p "$cache"
(
	flock 8
	if [[ ! -x $dir/staticcheck ]]; then
		log "building staticcheck $v into $dir (a minute or two on 2 cores, once)"
		began=$(date +%s)
		rm -rf "$dir.tmp"
		mkdir -p "$dir.tmp"
		(cd "$here/staticcheck" && GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
			go build -trimpath -ldflags "-s -w" -o "$dir.tmp/staticcheck" honnef.co/go/tools/cmd/staticcheck) 8>&- ||
			{ rm -rf "$dir.tmp"; die "building staticcheck $v failed"; }
		rm -rf "$dir"
		mv "$dir.tmp" "$dir"
		log "built staticcheck in $(($(date +%s) - began)) s"
	fi
	ln -sfn "staticcheck-$v-$key/staticcheck" "$cache/staticcheck"
) 8>"$cache/.staticcheck.lock"

[[ $# -gt 0 ]] || set -- ./...
exec "$dir/staticcheck" "$@"
