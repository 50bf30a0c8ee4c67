#!/usr/bin/env bash
# Installs what the air-gap tests (cmd/toa-push/airgap_test.go) need besides the registry:
# iproute2 (`ip netns`, veth pairs) from Debian, and verdaccio 6.8.0, the local npm registry,
# from the npm registry into ${TOA_CACHE:-$HOME/.cache/toa-deploy}/airgap/verdaccio-6.8.0.
# verdaccio 6.8.0 installs on Node 20 with node-fetch held at 2.7.0 through `overrides`
# (6.10 wants Node 22). Idempotent: a second run checks and returns.
set -euo pipefail

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "install.sh: need root (or sudo) to run: $*" >&2; exit 1
  fi
}

if ! command -v ip >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  if ! as_root apt-get install -y --no-install-recommends iproute2; then
    as_root apt-get update
    as_root apt-get install -y --no-install-recommends iproute2
  fi
fi

version=6.8.0
dir="${TOA_CACHE:-$HOME/.cache/toa-deploy}/airgap/verdaccio-$version"
if [ ! -f "$dir/installed" ]; then
  mkdir -p "$dir"
  rm -rf "$dir/node_modules"
  cat >"$dir/package.json" <<JSON
{
  "private": true,
  "dependencies": { "verdaccio": "$version" },
  "overrides": { "node-fetch": "2.7.0" }
}
JSON
  (cd "$dir" && npm install --omit=dev --no-audit --no-fund --no-update-notifier --loglevel=error)
  touch "$dir/installed"
fi
echo "verdaccio $(node "$dir/node_modules/verdaccio/bin/verdaccio" --version) in $dir"
