#!/usr/bin/env bash
# build.sh DIR: builds the control plane's binaries into DIR (which must not
# exist yet): etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, kwok, and kwok-stages.yaml, the stages that kwok's module ships.
# up.sh runs it when its cache has no build for the current tools/ files.
#
# Each tool is its own module under tools/: k8s.io/kubernetes v1.37 wants the
# etcd 3.7 client and the v0.37 staging modules, etcd 3.6's server wants
# etcd 3.6's api, and kwok v0.8.0 is built against the v0.36 libraries, so
# one go.mod cannot hold them all.
set -euo pipefail

out=${1:?usage: build.sh DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools=$here/tools
k8s_version=v1.37.2

export GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly"
mkdir "$out"

step() { printf 'controlplane: build: %s\n' "$*" >&2; }

step etcd
(cd "$tools/etcd" && go build -trimpath -ldflags '-s -w' -o "$out/etcd" go.etcd.io/etcd/server/v3)

step kwok
(cd "$tools/kwok" && go build -trimpath -ldflags '-s -w' -o "$out/kwok" sigs.k8s.io/kwok/cmd/kwok)

step "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $k8s_version (the long one)"
ld='-s -w'
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ld+=" -X $p.gitVersion=$k8s_version -X $p.gitMajor=1 -X $p.gitMinor=37 -X $p.gitTreeState=clean"
done
(cd "$tools/kubernetes" && go build -trimpath -ldflags "$ld" -o "$out/" \
	k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)

step "kwok stages"
# Read from the very module the kwok binary was built from.
dir=$(cd "$tools/kwok" && go mod download -json sigs.k8s.io/kwok | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
stage=$dir/kustomize/stage
[[ -n $dir && -d $stage ]] || { step "no kwok module folder found"; exit 1; }
first=1
for f in "$stage/node/fast/node-initialize.yaml" "$stage/node/heartbeat/node-heartbeat.yaml" "$stage"/pod/general/pod-*.yaml; do
	[[ $first ]] || echo '---'
	first=
	if [[ $(basename "$f") == pod-ready.yaml ]]; then
		# The project's stages (stages/) decide what becomes of pods labelled
		# toa-test/fail: crashloop or imagepull, so the general pod-ready stage
		# must not make them Ready. Their deletion stays the shipped
		# pod-delete stage's: over the grace period.
		[[ $(grep -c '^    matchExpressions:$' "$f") == 1 ]] || { step "unexpected $f"; exit 1; }
		sed '/^    matchExpressions:$/r /dev/stdin' "$f" <<'EOF'
    - key: '.metadata.labels["toa-test/fail"]'
      operator: 'NotIn'
      values:
      - 'crashloop'
      - 'imagepull'
EOF
	else
		cat "$f"
	fi
done >"$out/kwok-stages.yaml"
grep -q 'toa-test/fail' "$out/kwok-stages.yaml" || { step "patching pod-ready failed"; exit 1; }
