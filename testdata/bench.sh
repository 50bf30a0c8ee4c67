#!/usr/bin/env bash
# make bench (after make build and make setup): toa-push against what users would pick instead,
# on this machine, in one run (issue 7). It installs its own peers (idempotent), builds the base
# both sides build on once (cached under $TOA_CACHE/bench), runs `go run ./bench`, which prints
# Markdown tables of medians and ratios, and keeps that output in $TOA_CACHE/bench/last.md;
# BENCHMARKS.md holds the latest one with the notes on every target missed.
#
# BENCH_RUNS (default 5) runs of each measurement, BENCH_PUSH_RUNS (default 3) of item 1, BENCH_ITEMS (default 1,2,3,4,5,6,7,8,9,10,11) which ones,
# BENCH_PEER_MULTI_RUNS (default 1) buildah's runs for linux/amd64 + linux/arm64 (qemu: minutes),
# BENCH_MARKET_PLATFORMS (default linux/amd64) item 7's platforms (linux/amd64,linux/arm64: tens of minutes),
# BENCH_LARGE_SIZES (default 100,300,1000) item 10's compositions, BENCH_LARGE_TOOLS (default toa-apply,kubectl,helm) its tools, BENCH_LARGE_ROUNDS (default 1) how many times, the order turned each round,
# BENCH_SCALE_SIZES (default 300,1000) item 3's larger applications (no-change push and --plan).
set -euo pipefail
cd "$(dirname "$0")/.."
export TOA_CACHE="${TOA_CACHE:-$HOME/.cache/toa-deploy}"
cache="$TOA_CACHE/bench"
mkdir -p "$cache/bin"

say() { echo "bench: $*" >&2; }

# --- the peers and what they need: Debian's buildah, debootstrap, qemu-user-static, time, strace
need=()
command -v buildah >/dev/null || need+=(buildah)
command -v debootstrap >/dev/null || need+=(debootstrap)
[ -x /usr/bin/qemu-aarch64-static ] || need+=(qemu-user-static)
command -v update-binfmts >/dev/null || need+=(binfmt-support)
[ -x /usr/bin/time ] || need+=(time)
command -v pigz >/dev/null || need+=(pigz)
command -v strace >/dev/null || need+=(strace)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]} (Debian's packages)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# crane, at the go-containerregistry version toa-push is built with, outside the product's go.mod
export CRANE="$cache/bin/crane"
if [ ! -x "$CRANE" ]; then
  say "installing crane v0.22.1"
  (cd "$cache" && GOBIN="$cache/bin" GOFLAGS=-mod=mod go install github.com/google/go-containerregistry/cmd/crane@v0.22.1)
fi

# --- emulation for buildah's arm64 RUN: binfmt_misc mounted and qemu-aarch64 registered
export BENCH_PEER_ARM64=0
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
fi
if [ -e /proc/sys/fs/binfmt_misc/register ] && [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
fi
if [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] && grep -q enabled /proc/sys/fs/binfmt_misc/qemu-aarch64; then
  say "qemu-aarch64 is registered with binfmt_misc ($(grep flags /proc/sys/fs/binfmt_misc/qemu-aarch64)): buildah can RUN for linux/arm64"
  BENCH_PEER_ARM64=1
else
  say "no qemu-aarch64 in binfmt_misc: buildah is measured for linux/amd64 only"
fi

# --- the base both build on: Debian minbase with node and npm, per architecture (slow once)
export BENCH_ROOTFS_AMD64 BENCH_ROOTFS_ARM64=""
BENCH_ROOTFS_AMD64=$(bash bench/rootfs.sh amd64)
if [ "$BENCH_PEER_ARM64" = 1 ]; then
  if BENCH_ROOTFS_ARM64=$(bash bench/rootfs.sh arm64); then :; else
    say "no arm64 rootfs: linux/arm64 is left out"
    BENCH_ROOTFS_ARM64="" BENCH_PEER_ARM64=0
  fi
fi

# --- the Debian bases of item 8 (testdata/bases, as make setup makes them; slow once)
for arch in amd64 arm64; do
  bash testdata/bases/build.sh "$arch" >/dev/null || say "no Debian base for $arch: item 8 fails"
done

# --- Helm v3 for item 10, built from its Go module (testdata/tools/helm.sh; idempotent)
export HELM
HELM=$(bash testdata/tools/helm.sh | cut -d' ' -f2) || say "no helm: item 10 measures toa-apply and kubectl alone"

# --- the measurements
out="$cache/last.md"
go run ./bench -runs "${BENCH_RUNS:-5}" -push-runs "${BENCH_PUSH_RUNS:-3}" -items "${BENCH_ITEMS:-1,2,3,4,5,6,7,8,9,10,11}" | tee "$out.partial"
mv "$out.partial" "$out"
say "the tables are in $out"
