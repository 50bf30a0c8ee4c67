#!/usr/bin/env bash
# Installs what the control plane's real node runs on (README.md beside this
# file): Debian's containerd (1.6, with its CRI plugin), runc, and the CNI
# plugins (bridge, host-local, loopback) that give each pod its address.
# Nothing is started here: up.sh starts a containerd of its own, with its own
# socket, configuration and state. Idempotent: a second run checks and returns.
set -euo pipefail

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"
	elif command -v sudo >/dev/null 2>&1; then sudo "$@"
	else echo "realnode/install.sh: need root (or sudo) to run: $*" >&2; exit 1
	fi
}

packages=(containerd runc containernetworking-plugins iproute2 util-linux)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	# containerd's package ships a systemd unit: keep the install from starting it.
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

containerd --version
runc --version | head -1
ls /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback >/dev/null
