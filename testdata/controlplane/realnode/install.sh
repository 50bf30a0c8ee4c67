#!/usr/bin/env bash
# Installs what the control plane's real node runs on (README.md beside this
# file): Debian's containerd (1.6, with its CRI plugin), runc, and the CNI
# plugins (bridge, host-local, loopback) that give each pod its address.
# Nothing is started here: up.sh starts a containerd of its own, with its own
# socket, configuration and state. Idempotent: a second run checks and returns.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../../lib/apt.sh"

# containerd's package ships a systemd unit: apt_ensure keeps the install from starting it
apt_ensure containerd runc containernetworking-plugins iproute2 util-linux

containerd --version
runc --version | head -1
ls /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback >/dev/null
