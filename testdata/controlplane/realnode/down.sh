#!/usr/bin/env bash
# Stops the real node that up.sh started and removes what it left on the
# host, so that the next up.sh starts clean: the node's pods (deleted through
# the API while the kubelet still runs, so that it stops them as it would:
# their network torn down by CNI), the kubelet, every container of its
# containerd, containerd and its shims, the mounts under its state, the pods'
# network namespaces and bridge, and the run state. ../down.sh calls it first.
# Every wait is bounded. The built kubelet stays in the cache.
set -euo pipefail

cache=${TOA_CACHE:-$HOME/.cache/toa-deploy}/controlplane
state=${TOA_TEST_STATE:-$cache/run}
dir=$state/realnode
node=toa-real-node
bridge=toa-cni0
sock=$dir/containerd.sock

log() { printf 'realnode: %s\n' "$*" >&2; }

running() {
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
	[[ ${st:0:1} != Z ]]
}
pid_of() {
	local pid
	[[ -f $dir/$1.pid ]] && pid=$(cat "$dir/$1.pid") && running "$pid" &&
		[[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */"$1" ]] && echo "$pid"
}
# stop NAME SECONDS: SIGTERM, then SIGKILL after SECONDS.
stop() {
	local pid deadline=$((SECONDS + $2))
	pid=$(pid_of "$1") || { rm -f "$dir/$1.pid"; return 0; }
	kill -TERM "$pid" 2>/dev/null || true
	while running "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
	if running "$pid"; then
		log "$1 (pid $pid) ignored SIGTERM for $2 s; killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$dir/$1.pid"
}
ctr() { command ctr --address "$sock" --timeout 5s -n k8s.io "$@"; }

[[ -d $dir ]] || { rm -f "$state/realnode.unavailable"; exit 0; }

kubeconfig=$state/kubeconfig
kubectl=$state/bin/kubectl
k() { "$kubectl" --kubeconfig "$kubeconfig" --request-timeout 5s "$@"; }
api=
[[ -f $kubeconfig && -x $kubectl ]] && k get --raw /readyz >/dev/null 2>&1 && api=1

# 1. The node's pods, by the kubelet itself, while it runs: at most 20 s.
if [[ $api ]] && pid_of kubelet >/dev/null && pid_of containerd >/dev/null; then
	k delete pods -A --field-selector "spec.nodeName=$node" --grace-period 0 --force --wait=false >/dev/null 2>&1 || true
	deadline=$((SECONDS + 20))
	while ((SECONDS < deadline)) && [[ -n $(ctr containers ls -q 2>/dev/null) ]]; do sleep 0.2; done
fi

# 2. The kubelet, and the node it registered (a restart registers it anew).
stop kubelet 15
[[ $api ]] && k delete node "$node" --wait=false >/dev/null 2>&1 || true

# 3. What is left of the containers, then containerd and its shims.
if pid_of containerd >/dev/null; then
	for t in $(ctr tasks ls -q 2>/dev/null); do ctr tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
	deadline=$((SECONDS + 10))
	while ((SECONDS < deadline)) && ctr tasks ls 2>/dev/null | grep -q RUNNING; do sleep 0.2; done
	for t in $(ctr tasks ls -q 2>/dev/null); do ctr tasks delete -f "$t" >/dev/null 2>&1 || true; done
	for c in $(ctr containers ls -q 2>/dev/null); do ctr containers delete "$c" >/dev/null 2>&1 || true; done
fi
stop containerd 15
# Containers whose shim outlived containerd: by the pods' cgroups.
for procs in $(find /sys/fs/cgroup/pids/kubepods /sys/fs/cgroup/kubepods -name cgroup.procs 2>/dev/null); do
	while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$procs"
done
for pid in $(pgrep -f -- "containerd-shim-runc-v2 .*-address $sock( |$)" || true); do
	kill -KILL "$pid" 2>/dev/null || true
done

# 4. Mounts under the state (deepest first), the pods' network namespaces
# (CRI names them cni-<uuid>; nothing else on a test host runs CRI) and
# the bridge.
awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
	umount -l "$m" 2>/dev/null || true
done
for ns in /run/netns/cni-*; do
	[[ -e $ns ]] || continue
	ip netns delete "$(basename "$ns")" 2>/dev/null || { umount -l "$ns" 2>/dev/null; rm -f "$ns"; }
done
ip link delete "$bridge" 2>/dev/null || true
if [[ -f $dir/ip_forward.before ]]; then
	cat "$dir/ip_forward.before" >/proc/sys/net/ipv4/ip_forward 2>/dev/null || true
fi
# The pods' cgroups that runc left (empty ones only).
for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
	[[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
done

# 5. The run state. A restart keeps nothing either: each up.sh imports its image anew.
rm -rf "$dir/containerd" "$dir/kubelet" "$dir/cni" "$dir/pki" "$dir/logs" "$dir/pod-logs" "$dir"/*.pid \
	"$dir/containerd.toml" "$dir/kubelet.yaml" "$dir/ip_forward.before" "$sock" "$sock.ttrpc"
rmdir "$dir" 2>/dev/null || log "left $dir: it holds files up.sh did not make"
[[ ${_TOA_REALNODE_RESTART:-} ]] || rm -f "$state/realnode.unavailable"
