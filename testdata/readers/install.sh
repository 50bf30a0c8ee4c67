#!/usr/bin/env bash
# Installs the readers that are not ours (DESIGN.md, "Readers that are not ours"): Debian's
# skopeo (containers/image) and umoci (opencontainers' image tools), which the end-to-end tests
# run on every image toa-push writes (internal/harness/readers.go), and podman with runc, which
# one test uses to run an image. podman runs with `--runtime runc`: crun, its default, did not
# start a container on the machines this was written on. GNU patch reads the unified diffs
# toa-apply --diff writes (rollout's TestUnifiedPatches). Nothing here starts a service.
# Idempotent: a second run checks and returns.
set -euo pipefail

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "install.sh: need root (or sudo) to run: $*" >&2; exit 1
  fi
}

packages=(skopeo umoci podman runc patch)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # podman's package ships systemd units: keep the install from starting anything
  policy_made=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    as_root sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d'
    policy_made=1
  fi
  cleanup() { if [ -n "$policy_made" ]; then as_root rm -f /usr/sbin/policy-rc.d; fi; }
  trap cleanup EXIT
  export DEBIAN_FRONTEND=noninteractive
  if ! as_root apt-get install -y --no-install-recommends "${missing[@]}"; then
    as_root apt-get update
    as_root apt-get install -y --no-install-recommends "${missing[@]}"
  fi
fi

skopeo --version
umoci --version
podman --version
runc --version | head -1
