#!/usr/bin/env bash
# A network namespace for the air-gap tests (cmd/toa-push/airgap_test.go), which call it; it can
# also be run by hand to look around (`ip netns exec NAME bash`).
#
#   netns.sh up NAME HOST_ADDR NS_ADDR   make NAME with a veth pair: HOST_ADDR/29 on this side,
#                                        NS_ADDR/29 inside, loopback up, and no other route, so
#                                        that what runs inside reaches only what listens on NS_ADDR
#                                        or on its own loopback (and HOST_ADDR on this side); its
#                                        resolv.conf names 127.0.0.1, where nothing answers, so
#                                        that a name lookup fails at once instead of timing out
#   netns.sh down NAME                   delete it, its veth pair and its resolv.conf
#   netns.sh sweep                       delete the toa-airgap-<pid> namespaces whose test is gone
#
# Needs root and iproute2 (install.sh installs it).
set -euo pipefail

veth() { echo "tag${1##*-}"; } # toa-airgap-1234 -> tag1234 (interface names are 15 bytes at most)

case "${1:-}" in
up)
  name=$2 host=$3 inside=$4
  v=$(veth "$name")
  ip netns add "$name"
  ip link add "${v}h" type veth peer name "${v}n"
  ip link set "${v}n" netns "$name"
  ip addr add "$host/29" dev "${v}h"
  ip link set "${v}h" up
  ip -n "$name" addr add "$inside/29" dev "${v}n"
  ip -n "$name" link set "${v}n" up
  ip -n "$name" link set lo up
  mkdir -p "/etc/netns/$name"
  echo "nameserver 127.0.0.1" >"/etc/netns/$name/resolv.conf"
  ;;
down)
  name=$2
  v=$(veth "$name")
  ip netns del "$name" 2>/dev/null || true # deletes the veth inside, and with it its peer
  ip link del "${v}h" 2>/dev/null || true
  rm -rf "/etc/netns/$name"
  ;;
sweep)
  for name in $(ip netns list | awk '{print $1}' | grep '^toa-airgap-[0-9]*$' || true); do
    if ! kill -0 "${name##*-}" 2>/dev/null; then
      "$0" down "$name"
    fi
  done
  ;;
*)
  echo "usage: netns.sh up NAME HOST_ADDR NS_ADDR | down NAME | sweep" >&2
  exit 2
  ;;
esac
