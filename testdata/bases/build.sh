#!/usr/bin/env bash
# testdata/bases/build.sh ARCH: a base made of Debian bookworm's own packages for ARCH (amd64 or
# arm64), for the tests that build inside a target's base (sandbox/, issue 23): Debian's nodejs
# (Node 18, another major than the runner's), npm 10 from its npm tarball (Debian's npm 9 needs
# some 400 node-* packages), python3, make, g++ and their libraries, and a shell. No public base
# image is reachable here, and no emulation is needed to make it: apt runs with a private state
# folder (the host's apt and dpkg state are not changed, no `dpkg --add-architecture`), the .debs
# are downloaded and unpacked with dpkg-deb -x, and what the maintainer scripts would do is done
# by hand (the /bin/sh and cc links, /etc/passwd, ld.so.cache).
#
# Written once per architecture to ${TOA_CACHE:-$HOME/.cache/toa-deploy}/bases/debian-ARCH.tar
# (never committed); a second run prints the path and returns. The harness pushes it.
set -euo pipefail
arch=${1:?usage: build.sh amd64|arm64}
cache="${TOA_CACHE:-$HOME/.cache/toa-deploy}/bases"
out="$cache/debian-$arch.tar"
apt="$cache/apt-$arch"
# the compiler's own packages, kept as .debs beside the base: the tests remove the compiler from
# the base and install these with build.run lines (internal/harness/toolchain.go)
compiler=(cpp-12 gcc-12 g++-12 make)
have_compiler_debs() {
  local p
  for p in "${compiler[@]}"; do
    compgen -G "$apt/cache/archives/${p}_*_$arch.deb" >/dev/null || return 1
  done
}
if [ -s "$out" ] && have_compiler_debs; then
  echo "$out"
  exit 0
fi
say() { echo "bases: $*" >&2; }
mkdir -p "$cache"
exec 9>"$cache/.lock-$arch"
flock 9
if [ -s "$out" ] && have_compiler_debs; then
  echo "$out"
  exit 0
fi

# apt with its own state, for ARCH alone
mkdir -p "$apt/state/lists/partial" "$apt/cache/archives/partial" "$apt/etc/preferences.d" "$apt/etc/apt.conf.d"
: >"$apt/state/status"
cat >"$apt/apt.conf" <<CONF
Dir::State "$apt/state";
Dir::State::status "$apt/state/status";
Dir::Cache "$apt/cache";
Dir::Etc::Preferences "$apt/etc/preferences";
Dir::Etc::PreferencesParts "$apt/etc/preferences.d";
Dir::Etc::Parts "$apt/etc/apt.conf.d";
APT::Architecture "$arch";
APT::Architectures { "$arch"; };
APT::Install-Recommends "false";
Debug::NoLocking "true";
APT::Sandbox::User "root";
CONF
export APT_CONFIG="$apt/apt.conf"
if [ -s "$out" ]; then
  # a base made before its compiler's .debs were kept (an older cache): fetch those alone
  say "downloading ${compiler[*]} for $arch (the base is made)"
  apt-get update -qq >/dev/null
  (cd "$apt/cache/archives" && apt-get download -qq "${compiler[@]}" >/dev/null)
  echo "$out"
  exit 0
fi
packages=(base-files base-passwd dash bash coreutils sed grep findutils diffutils tar gzip
  libc-bin nodejs libnode-dev python3 make g++ gcc)
say "apt-get update for $arch (private state in $apt)"
apt-get update -qq >/dev/null
say "downloading ${packages[*]} and what they depend on, for $arch"
apt-get install -qq -y --download-only "${packages[@]}" >/dev/null

tmp="$cache/debian-$arch.tmp"
rm -rf "$tmp"
mkdir -p "$tmp"
for deb in "$apt"/cache/archives/*.deb; do
  dpkg-deb -x "$deb" "$tmp"
done

# what the maintainer scripts would have done
ln -sf dash "$tmp/bin/sh"
ln -sf gcc "$tmp/usr/bin/cc"
ln -sf g++ "$tmp/usr/bin/c++"
cp "$tmp/usr/share/base-passwd/passwd.master" "$tmp/etc/passwd"
cp "$tmp/usr/share/base-passwd/group.master" "$tmp/etc/group"
echo 'node:x:1000:' >>"$tmp/etc/group"
echo 'node:x:1000:1000::/home/node:/bin/sh' >>"$tmp/etc/passwd"
mkdir -p "$tmp/home/node" "$tmp/root" "$tmp/tmp" "$tmp/proc" "$tmp/dev" "$tmp/etc/ssl/certs"
chmod 1777 "$tmp/tmp"
: >"$tmp/etc/resolv.conf"
ldconfig -r "$tmp" 2>/dev/null || say "ldconfig -r failed for $arch: the loader searches its default folders"

# npm 10 (its tarball bundles what it needs; JavaScript, the same for every architecture)
pack="$cache/npm-pack"
if [ ! -s "$pack/npm.tgz" ]; then
  rm -rf "$pack" && mkdir -p "$pack"
  say "npm pack npm@10"
  (cd "$pack" && npm pack npm@10 --silent >/dev/null && mv npm-*.tgz npm.tgz)
fi
mkdir -p "$tmp/usr/local/lib/node_modules/npm" "$tmp/usr/local/bin"
tar -xzf "$pack/npm.tgz" -C "$tmp/usr/local/lib/node_modules/npm" --strip-components=1
ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$tmp/usr/local/bin/npm"
ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$tmp/usr/local/bin/npx"
# node-gyp finds the headers beside the node it builds for, with no download
mkdir -p "$tmp/usr/local/etc"
echo 'nodedir=/usr' >"$tmp/usr/local/etc/npmrc"

rm -rf "$tmp/usr/share/doc" "$tmp/usr/share/man" "$tmp/usr/share/info" "$tmp/usr/share/locale"
tar --numeric-owner --owner=0 --group=0 --sort=name -C "$tmp" -cf "$out.partial" .
rm -f "$out.gz" # the harness's compressed copy of an older one
mv "$out.partial" "$out"
rm -rf "$tmp"
say "$out: $(du -h "$out" | cut -f1)"
echo "$out"
