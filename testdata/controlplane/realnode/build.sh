#!/usr/bin/env bash
# build.sh DIR: builds the real node's kubelet into DIR (which must not exist
# yet) from k8s.io/kubernetes v1.37.2, the module and version the control
# plane's binaries come from (../tools/kubernetes), so that node and API server
# are one version. tools/ here is that module's go.mod with what the kubelet
# needs besides (cri-streaming, otelrestful, hnslib); every module both need
# is at the same version. A module of its own, so that the control plane's
# cache key (../tools/*/go.mod|go.sum, ../build.sh) stays as it is: up.sh
# builds the kubelet into a cache folder of its own, keyed by tools/ here and
# this script.
set -euo pipefail

out=${1:?usage: build.sh DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools=$here/tools
k8s_version=v1.37.2

export GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly"
mkdir "$out"

printf 'realnode: build: kubelet %s\n' "$k8s_version" >&2
ld='-s -w'
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ld+=" -X $p.gitVersion=$k8s_version -X $p.gitMajor=1 -X $p.gitMinor=37 -X $p.gitTreeState=clean"
done
(cd "$tools" && nice -n 10 go build -trimpath -ldflags "$ld" -o "$out/kubelet" k8s.io/kubernetes/cmd/kubelet)

# The sandbox image's one program (tools/pause), and the image itself as a
# Docker archive that `ctr images import` reads: one layer holding /pause.
printf 'realnode: build: the sandbox image (pause)\n' >&2
(cd "$tools" && go build -trimpath -ldflags '-s -w' -o "$out/pause" ./pause)
img=$(mktemp -d)
trap 'rm -rf "$img"' EXIT
mkdir "$img/root"
cp "$out/pause" "$img/root/pause"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$img/root" -cf "$img/layer.tar" pause
diff_id=sha256:$(sha256sum "$img/layer.tar" | cut -d' ' -f1)
cat >"$img/config.json" <<JSON
{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["$diff_id"]},"history":[{"created_by":"testdata/controlplane/realnode/build.sh"}]}
JSON
cat >"$img/manifest.json" <<JSON
[{"Config":"config.json","RepoTags":["toa-test.local/pause:1"],"Layers":["layer.tar"]}]
JSON
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$img" -cf "$out/pause.tar" manifest.json config.json layer.tar
