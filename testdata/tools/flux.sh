#!/usr/bin/env bash
# Builds Flux's own code, which the artifact tests read toa-push --artifact's output with, from
# their Go modules, into ${TOA_CACHE:-$HOME/.cache/toa-deploy}/tools/<tool>-<version>-<key>/:
#   flux                 (github.com/fluxcd/flux2/v2)           `flux pull artifact`, `flux build kustomization`
#   source-controller    (github.com/fluxcd/source-controller)    reconciles an OCIRepository, cosign verification
#   kustomize-controller (github.com/fluxcd/kustomize-controller) reconciles a Kustomization
# with the controllers' CRDs beside them (crds/). A script of its own, not install.sh: changing
# install.sh would change the key of the oras and cosign builds.
#
# Versions: the newest whose go.mod asks for no Go newer than this machine's 1.26 (flux2 v2.9.5,
# source-controller and kustomize-controller v1.9.6, which go together; v1.10 needs Go 1.27).
# Each module is built as its own main module, from a writable copy of the folder `go mod
# download` gives (the controllers' go.mod has replace directives, which `go install mod@v`
# refuses; see fixes below). flux2's cmd/flux embeds manifests/*.yaml, which its Makefile generates by running
# kustomize on release URLs and which the module lacks: the copy gets one placeholder file
# there, read only by `flux install` (never run here), so every other command is Flux's own.
#
# Prints `<tool> <path>` per tool. Idempotent; a second run checks and returns.
# Usage: flux.sh [TOOL...]   (default: every tool)
set -euo pipefail

cache=${TOA_CACHE:-$HOME/.cache/toa-deploy}/tools

log() { printf 'flux tools: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

command -v go >/dev/null || die "go is needed to build Flux's tools (Go 1.26)"
command -v flock >/dev/null || die "flock is needed (util-linux)"

declare -A module=(
	[flux]=github.com/fluxcd/flux2/v2
	[source-controller]=github.com/fluxcd/source-controller
	[kustomize-controller]=github.com/fluxcd/kustomize-controller
)
declare -A version=(
	[flux]=v2.9.5
	[source-controller]=v1.9.6
	[kustomize-controller]=v1.9.6
)
# what the module as the proxy serves it needs before it builds: the controllers' go.mod replaces
# their api module by ./api, a nested module their zip leaves out, so the replace goes and the
# api module of the same version is used; source-controller asks for github.com/fluxcd/pkg/artifact
# v0.18.3, which the module proxy here does not serve, so v0.18.0 (same minor) is used
declare -A fixes=(
	[flux]=""
	[source-controller]="-dropreplace=github.com/fluxcd/source-controller/api -replace=github.com/fluxcd/pkg/artifact=github.com/fluxcd/pkg/artifact@v0.18.0"
	[kustomize-controller]="-dropreplace=github.com/fluxcd/kustomize-controller/api"
)
# the main package inside the module
declare -A main=(
	[flux]=./cmd/flux
	[source-controller]=.
	[kustomize-controller]=.
)
ldflags() {
	case $1 in
	flux) echo "-s -w -X main.VERSION=${version[flux]#v}" ;;
	*) echo "-s -w" ;;
	esac
}

build() {
	local tool=$1 v=${version[$1]} key dir src
	# what makes the build: a change to one tool's line builds that tool anew, not the others
	key=$(printf '%s\n' "build-1" "${module[$tool]}@$v" "${fixes[$tool]}" "${main[$tool]}" "$(ldflags "$tool")" | sha256sum | cut -c1-12)
	dir=$cache/$tool-$v-$key
	mkdir -p "$cache"
	(
		flock 8
		if [[ ! -x $dir/$tool ]]; then
			log "building $tool $v into $dir (many minutes on 2 cores, once)"
			began=$(date +%s)
			src=$(GOWORK=off GOFLAGS=-mod=mod go mod download -json "${module[$tool]}@$v" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
			[[ -d $src ]] || die "go mod download ${module[$tool]}@$v gave no folder"
			rm -rf "$dir.tmp"
			mkdir -p "$dir.tmp"
			cp -r "$src" "$dir.tmp/src"
			chmod -R u+w "$dir.tmp/src"
			if [[ -n ${fixes[$tool]} ]]; then
				# shellcheck disable=SC2086 # the fixes are separate flags
				(cd "$dir.tmp/src" && go mod edit ${fixes[$tool]})
			fi
			if [[ $tool == flux ]]; then
				mkdir -p "$dir.tmp/src/cmd/flux/manifests"
				printf '# placeholder: toa-deploy builds flux without the manifests `flux install` writes\n' >"$dir.tmp/src/cmd/flux/manifests/placeholder.yaml"
			fi
			(cd "$dir.tmp/src" && GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod" \
				go build -trimpath -ldflags "$(ldflags "$tool")" -o "$dir.tmp/$tool" "${main[$tool]}") 8>&- ||
				{ rm -rf "$dir.tmp"; die "building $tool $v failed"; }
			if [[ -d $dir.tmp/src/config/crd/bases ]]; then
				mkdir -p "$dir.tmp/crds"
				cp "$dir.tmp/src/config/crd/bases/"*.yaml "$dir.tmp/crds/"
			fi
			rm -rf "$dir.tmp/src"
			rm -rf "$dir"
			mv "$dir.tmp" "$dir"
			log "built $tool in $(($(date +%s) - began)) s"
		fi
		ln -sfn "$tool-$v-$key/$tool" "$cache/$tool"
		[[ ! -d $dir/crds ]] || ln -sfn "$tool-$v-$key/crds" "$cache/$tool-crds"
	) 8>"$cache/.$tool.lock"
	echo "$tool $dir/$tool"
}

tools=("$@")
[[ ${#tools[@]} -gt 0 ]] || tools=(flux source-controller kustomize-controller)
for t in "${tools[@]}"; do
	[[ -n ${module[$t]:-} ]] || die "unknown tool $t (known: ${!module[*]})"
	build "$t"
done
