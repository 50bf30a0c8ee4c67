#!/usr/bin/env bash
# Starts the control plane's one real node beside kwok's: a containerd of its
# own (socket, configuration and state under the run state, Debian's runc and
# CNI plugins) and a kubelet that registers as node toa-real-node, labelled
# toa-test/node=real and tainted toa-test/real-node=true:NoSchedule so that
# only a pod that selects and tolerates it lands there. ../up.sh calls it once
# the API server is up; it can be run alone on a running control plane.
# Idempotent: returns at once when the node is up and Ready. See README.md.
#
# When the host cannot run a kubelet (not root, no cgroups, no containerd, no
# overlayfs...), or the node does not turn Ready in time, it stops what it
# started, writes the reason to $TOA_TEST_STATE/realnode.unavailable (which the
# tests that need the node read: they skip, saying why) and exits 3; nothing
# else of the control plane is touched.
#
# Environment (all optional):
#   TOA_CACHE, TOA_TEST_STATE      as for ../up.sh
#   TOA_REAL_NODE=0                do not start it (the reason the tests give)
#   TOA_KUBELET_PORT               the kubelet's API on 127.0.0.1 (default 20250)
#   TOA_KUBELET_HEALTHZ_PORT       its /healthz on 127.0.0.1 (default 20248)
#   TOA_REAL_NODE_SUBNET           the pods' addresses (default 10.244.77.0/24)
#   TOA_REAL_NODE_TIMEOUT          seconds to wait for each step (default 60)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TOA_CACHE:-$HOME/.cache/toa-deploy}/controlplane
state=${TOA_TEST_STATE:-$cache/run}
dir=$state/realnode
unavailable=$state/realnode.unavailable
kubelet_port=${TOA_KUBELET_PORT:-20250}
healthz_port=${TOA_KUBELET_HEALTHZ_PORT:-20248}
subnet=${TOA_REAL_NODE_SUBNET:-10.244.77.0/24}
timeout=${TOA_REAL_NODE_TIMEOUT:-60}
node=toa-real-node
bridge=toa-cni0
sandbox_image=toa-test.local/pause:1

log() { printf 'realnode: %s\n' "$*" >&2; }

# unavailable REASON: the node cannot run here; say so where the tests look.
unavailable() {
	log "no real node: $*"
	mkdir -p "$state"
	printf '%s\n' "$*" >"$unavailable"
	TOA_TEST_STATE=$state "$here/down.sh" >/dev/null 2>&1 || true
	printf '%s\n' "$*" >"$unavailable"
	exit 3
}

kubeconfig=$state/kubeconfig
kubectl=$state/bin/kubectl
[[ -f $kubeconfig && -x $kubectl ]] || { log "the control plane is not up ($kubeconfig, $kubectl): run ../up.sh"; exit 1; }
k() { "$kubectl" --kubeconfig "$kubeconfig" --request-timeout 10s "$@"; }

# --- already up? ----------------------------------------------------------------

alive() {
	local st
	[[ -f $dir/$1.pid ]] && st=$(sed 's/.*) //' "/proc/$(cat "$dir/$1.pid")/stat" 2>/dev/null) && [[ ${st:0:1} != Z ]]
}
node_ready() {
	[[ $(k get node "$node" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}
if alive containerd && alive kubelet && node_ready; then
	rm -f "$unavailable"
	exit 0
fi

# --- can this host run one? -----------------------------------------------------

[[ ${TOA_REAL_NODE:-1} != 0 ]] || unavailable "TOA_REAL_NODE=0 (set when up.sh ran)"
[[ $(id -u) == 0 ]] || unavailable "a kubelet and containerd need root; up.sh ran as $(id -un)"
for tool in containerd containerd-shim-runc-v2 ctr runc ip mountpoint; do
	command -v "$tool" >/dev/null || unavailable "$tool is not installed (testdata/controlplane/realnode/install.sh installs Debian's containerd, runc, containernetworking-plugins)"
done
for plugin in bridge host-local loopback; do
	[[ -x /usr/lib/cni/$plugin ]] || unavailable "the CNI plugin /usr/lib/cni/$plugin is missing (Debian's containernetworking-plugins)"
done
if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
	grep -qw memory /sys/fs/cgroup/cgroup.controllers || unavailable "cgroup v2 without the memory controller"
else
	for c in cpu memory pids; do
		[[ -d /sys/fs/cgroup/$c ]] || unavailable "no cgroup v1 $c hierarchy under /sys/fs/cgroup"
	done
fi
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || unavailable "the kernel has no overlayfs (containerd's snapshotter)"
[[ -w /sys/fs/cgroup/memory || -w /sys/fs/cgroup ]] || unavailable "/sys/fs/cgroup is read-only"

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "$kubelet_port" "$healthz_port"; do
	port_free "$p" || unavailable "port $p on 127.0.0.1 is taken (TOA_KUBELET_PORT, TOA_KUBELET_HEALTHZ_PORT choose others)"
done

# --- the kubelet: built once, in a cache folder of its own ------------------------

key=$(cat "$here/tools/go.mod" "$here/tools/go.sum" "$here/tools/pause/main.go" "$here/build.sh" | sha256sum | cut -c1-16)
bin=$cache/kubelet/$key
mkdir -p "$cache/kubelet"
(
	flock 8
	if [[ ! -f $bin/.done ]]; then
		log "building the kubelet into $bin (4 minutes on 2 idle cores, once)"
		began=$(date +%s)
		rm -rf "$bin" "$bin.tmp"
		"$here/build.sh" "$bin.tmp" 8>&- 9>&- || { rm -rf "$bin.tmp"; exit 1; }
		touch "$bin.tmp/.done"
		mv "$bin.tmp" "$bin"
		log "built in $(($(date +%s) - began)) s"
	fi
) 8>"$cache/kubelet/.lock" || unavailable "building the kubelet failed (see the lines above)"

# --- start ------------------------------------------------------------------------

TOA_TEST_STATE=$state _TOA_REALNODE_RESTART=1 "$here/down.sh" >/dev/null
rm -f "$unavailable"
started=$(date +%s%N)
logs=$dir/logs
sock=$dir/containerd.sock
mkdir -p "$logs" "$dir/cni/net.d" "$dir/cni/ipam" "$dir/kubelet" "$dir/pki" "$dir/pod-logs"
cat /proc/sys/net/ipv4/ip_forward >"$dir/ip_forward.before"

fail() {
	local c=$1
	shift
	if [[ -f $logs/$c.log ]]; then
		log "last lines of $logs/$c.log:"
		tail -n 20 "$logs/$c.log" >&2
	fi
	unavailable "$c: $*"
}

start() {
	local c=$1
	shift
	setsid "$@" </dev/null >"$logs/$c.log" 2>&1 8>&- 9>&- &
	echo $! >"$dir/$c.pid"
}

wait_for() {
	local c=$1 what=$2 deadline=$((SECONDS + timeout))
	shift 2
	until "$@" >/dev/null 2>&1; do
		alive "$c" || fail "$c" "exited while waiting for $what"
		((SECONDS < deadline)) || fail "$c" "no $what after ${timeout}s"
		sleep 0.1
	done
}

# A bridge on the host with the subnet's first address, so that the kubelet's
# probes reach the pods; no default route in the pods and no masquerade, so
# that they reach nothing but the host. Made here rather than by the bridge
# plugin at the first pod: its address is the node's (a kubelet refuses a
# loopback node IP).
gateway=${subnet%/*}
gateway=${gateway%.*}.1
ip link add "$bridge" type bridge 2>/dev/null || ip link show "$bridge" >/dev/null 2>&1 || unavailable "cannot make the bridge $bridge (ip link add: no CAP_NET_ADMIN?)"
ip addr replace "$gateway/${subnet#*/}" dev "$bridge" || unavailable "cannot give the bridge $bridge the address $gateway"
ip link set "$bridge" up || unavailable "cannot set the bridge $bridge up"
cat >"$dir/cni/net.d/10-toa-test.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "toa-test",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$subnet"}]],
        "dataDir": "$dir/cni/ipam"
      }
    }
  ]
}
EOF

# restrict_oom_score_adj: the host's root may lack CAP_SYS_RESOURCE, and
# without it runc's write to oom_score_adj fails every sandbox ("can't get
# final child's PID from pipe: EOF").
cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$sandbox_image"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
    max_conf_num = 1
EOF

start containerd containerd --config "$dir/containerd.toml" --log-level warn
ctr() { command ctr --address "$sock" --timeout 10s "$@"; }
wait_for containerd "an answer on $sock" ctr version
ctr -n k8s.io images import "$bin/pause.tar" >"$logs/import.log" 2>&1 ||
	fail containerd "importing the sandbox image failed: $(cat "$logs/import.log")"
ctr -n k8s.io images ls -q | grep -qx "$sandbox_image" || fail containerd "the sandbox image $sandbox_image is not in namespace k8s.io after the import"

# Its own identity where ../up.sh made one, else the admin's (a control plane
# started before up.sh knew of the node).
node_kubeconfig=$state/pki/kubelet.kubeconfig
[[ -f $node_kubeconfig ]] || node_kubeconfig=$kubeconfig

cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The host has cgroup v1 (a hybrid hierarchy) and no systemd to ask.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$sock
address: 127.0.0.1
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
# Only the loopback API server talks to it (logs, exec).
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
registerNode: true
registerWithTaints:
- key: toa-test/real-node
  value: "true"
  effect: NoSchedule
nodeStatusUpdateFrequency: 5s
nodeStatusReportFrequency: 1m
syncFrequency: 10s
# A shared machine: no image is collected, no pod evicted for the disk the
# others fill.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imageMinimumGCAge: 24h
evictionHard:
  memory.available: 10Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
evictionPressureTransitionPeriod: 5s
serializeImagePulls: false
maxPods: 30
resolvConf: /etc/resolv.conf
podLogsDir: $dir/pod-logs
rotateCertificates: false
EOF

start kubelet "$bin/kubelet" \
	--config "$dir/kubelet.yaml" \
	--kubeconfig "$node_kubeconfig" \
	--root-dir "$dir/kubelet" \
	--cert-dir "$dir/pki" \
	--hostname-override "$node" \
	--node-ip "$gateway" \
	--node-labels "toa-test/node=real" \
	--v 1
healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$healthz_port/healthz" >/dev/null; }
wait_for kubelet "health on port $healthz_port" healthy
wait_for kubelet "Ready node $node" node_ready
log "node $node Ready in $(( ($(date +%s%N) - started) / 1000000 )) ms"
