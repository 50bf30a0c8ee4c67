#!/usr/bin/env bash
# Starts the tests' Kubernetes control plane on 127.0.0.1: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and kwok with one
# simulated node. Builds the binaries first (once; cached by the hash of the
# tools' go.mod and go.sum files). Idempotent: returns at once when the
# control plane is already up and healthy. Then starts the real node beside
# kwok's (realnode/up.sh: a kubelet and containerd), or notes why this host
# cannot run one. See README.md beside this file.
#
# Environment (all optional):
#   TOA_CACHE                    cache root (default ~/.cache/toa-deploy)
#   TOA_TEST_STATE               run state: pids, logs, data, kubeconfig
#                                (default $TOA_CACHE/controlplane/run)
#   TOA_ETCD_PORT                etcd client port (default 22379)
#   TOA_ETCD_PEER_PORT           etcd peer port (default 22380)
#   TOA_APISERVER_PORT           kube-apiserver port (default 26443)
#   TOA_CONTROLLER_MANAGER_PORT  kube-controller-manager health port (default 20257)
#   TOA_SCHEDULER_PORT           kube-scheduler health port (default 20259)
#   TOA_CONTROLPLANE_TIMEOUT     seconds to wait for each step (default 120)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TOA_CACHE:-$HOME/.cache/toa-deploy}/controlplane
state=${TOA_TEST_STATE:-$cache/run}
etcd_port=${TOA_ETCD_PORT:-22379}
etcd_peer_port=${TOA_ETCD_PEER_PORT:-22380}
api_port=${TOA_APISERVER_PORT:-26443}
kcm_port=${TOA_CONTROLLER_MANAGER_PORT:-20257}
sched_port=${TOA_SCHEDULER_PORT:-20259}
timeout=${TOA_CONTROLPLANE_TIMEOUT:-120}

k8s_version=v1.37.2
components=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

log() { printf 'controlplane: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

for tool in go openssl curl flock sha256sum; do
	command -v "$tool" >/dev/null || die "$tool is needed (the Go toolchain, openssl, curl, util-linux, coreutils)"
done

mkdir -p "$cache/bin" "$(dirname "$state")"
# One up.sh or down.sh at a time per state folder (tests may call up.sh in
# parallel). The lock file sits beside the folder, which down.sh removes.
exec 9>"$state.lock"
flock 9
export _TOA_CONTROLPLANE_LOCKED=1

# --- binaries -----------------------------------------------------------------

# Keyed by what decides them: a version bump in tools/ or a change of
# build.sh builds anew.
key=$(cat "$here"/tools/*/go.mod "$here"/tools/*/go.sum "$here/build.sh" | sha256sum | cut -c1-16)
bin=$cache/bin/$key
(
	flock 8
	if [[ ! -f $bin/.done ]]; then
		log "building the control-plane binaries into $bin (about 10 minutes on 2 cores, once)"
		began=$(date +%s)
		rm -rf "$bin" "$bin.tmp"
		"$here/build.sh" "$bin.tmp" 9>&- 8>&- || { rm -rf "$bin.tmp"; die "building the control-plane binaries failed"; }
		touch "$bin.tmp/.done"
		mv "$bin.tmp" "$bin"
		log "built in $(($(date +%s) - began)) s"
	fi
	# A stable name for the kubectl of the current build.
	ln -sfn "$key/kubectl" "$cache/bin/kubectl"
) 8>"$cache/bin/.lock"
kubectl=$bin/kubectl

pki=$state/pki
logs=$state/logs

# Fail with the tail of the component's log.
fail() {
	local c=$1
	shift
	log "$c: $*"
	if [[ -f $logs/$c.log ]]; then
		log "last lines of $logs/$c.log:"
		tail -n 40 "$logs/$c.log" >&2
	fi
	exit 1
}

# start NAME ARGS...: runs a component in the background, in its own session
# so that a signal to the caller's process group does not reach it.
start() {
	local c=$1
	shift
	setsid "$@" </dev/null >"$logs/$c.log" 2>&1 9>&- &
	echo $! >"$state/$c.pid"
}

# wait_for NAME WHAT COMMAND...: polls COMMAND until it succeeds.
wait_for() {
	local c=$1 what=$2 deadline=$((SECONDS + timeout))
	shift 2
	until "$@" >/dev/null 2>&1; do
		alive "$c" || fail "$c" "exited while waiting for $what"
		((SECONDS < deadline)) || fail "$c" "no $what after ${timeout}s"
		sleep 0.2
	done
}

healthy() { curl -fsSk --max-time 2 "$1" >/dev/null; }

# --- how the API server and its controllers run ----------------------------------

# The three that up.sh reconfigures in place when their flags change (config,
# below): the API server with the audit policy (audit-policy.yaml: one line per
# request of the clients that are not the control plane, which `make bench`
# counts by user agent), the controller manager and the scheduler with the API
# rates kwok's own clusters give them (client-go's default of 20 a second made
# the rollout of a thousand Deployments a measure of the controller manager's
# rate limiter, not of the tools that asked for it).
start_apiserver() {
	start kube-apiserver "$bin/kube-apiserver" \
		--etcd-servers "http://127.0.0.1:$etcd_port" \
		--bind-address 127.0.0.1 \
		--advertise-address 127.0.0.1 \
		--secure-port "$api_port" \
		--endpoint-reconciler-type none \
		--cert-dir "$pki" \
		--tls-cert-file "$pki/apiserver.crt" \
		--tls-private-key-file "$pki/apiserver.key" \
		--token-auth-file "$pki/tokens.csv" \
		--authorization-mode RBAC \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "$pki/sa.pub" \
		--service-account-signing-key-file "$pki/sa.key" \
		--service-cluster-ip-range 10.96.0.0/16 \
		--allow-privileged \
		--profiling=false \
		--audit-policy-file "$here/audit-policy.yaml" \
		--audit-log-path "$logs/audit.log" \
		--audit-log-maxsize 100 \
		--audit-log-maxbackup 1
}

start_controller_manager() {
	start kube-controller-manager "$bin/kube-controller-manager" \
		--kubeconfig "$pki/kube-controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 \
		--secure-port "$kcm_port" \
		--cert-dir "$pki/kube-controller-manager" \
		--controllers '*,-nodeipam,-serviceaccount-token' \
		--root-ca-file "$pki/ca.crt" \
		--cluster-signing-cert-file "$pki/ca.crt" \
		--cluster-signing-key-file "$pki/ca.key" \
		--service-cluster-ip-range 10.96.0.0/16 \
		--leader-elect=false \
		--kube-api-qps 1000 \
		--kube-api-burst 2000 \
		--profiling=false
}

start_scheduler() {
	start kube-scheduler "$bin/kube-scheduler" \
		--kubeconfig "$pki/kube-scheduler.kubeconfig" \
		--bind-address 127.0.0.1 \
		--secure-port "$sched_port" \
		--cert-dir "$pki/kube-scheduler" \
		--leader-elect=false \
		--kube-api-qps 1000 \
		--kube-api-burst 2000 \
		--profiling=false
}

# config: what the running three were started with. A control plane started
# with other flags or another audit policy has the three restarted with these,
# and nothing else: etcd, kwok, the real node and every namespace stay.
config=$(
	declare -f start_apiserver start_controller_manager start_scheduler
	cat "$here/audit-policy.yaml"
)
config=$(sha256sum <<<"$config" | cut -c1-16)

# --- already running? -----------------------------------------------------------

kubeconfig=$state/kubeconfig

# alive NAME: the component runs (a zombie that init has yet to reap does not).
alive() {
	local st
	[[ -f $state/$1.pid ]] && st=$(sed 's/.*) //' "/proc/$(cat "$state/$1.pid")/stat" 2>/dev/null) && [[ ${st:0:1} != Z ]]
}

all_alive() {
	local c
	for c in "${components[@]}"; do alive "$c" || return 1; done
}

api_ready() {
	[[ -f $kubeconfig && -f $state/pki/ca.crt ]] &&
		curl -fsS --max-time 5 --cacert "$state/pki/ca.crt" \
			-H "Authorization: Bearer $(sed -n 's/^ *token: //p' "$kubeconfig")" \
			"https://127.0.0.1:$api_port/readyz" >/dev/null 2>&1
}

report() {
	cat <<EOF
# Kubernetes control plane ($k8s_version, kwok node kwok-node-0) on https://127.0.0.1:$api_port
# real node toa-real-node: $( [[ -f $state/realnode.unavailable ]] && echo "none ($(cat "$state/realnode.unavailable"))" || echo "kubelet and containerd (logs: $state/realnode/logs)")
export KUBECONFIG=$kubeconfig
export TOA_TEST_KUBECONFIG=$kubeconfig
# kubectl: $kubectl
# logs:    $state/logs
# stop:    $here/down.sh
EOF
}

# real_node: the real node beside kwok's (realnode/up.sh, idempotent). A host
# that cannot run it (or TOA_REAL_NODE=0) leaves the reason in
# $state/realnode.unavailable; the rest of the control plane runs without it.
real_node() {
	"$here/realnode/up.sh" || log "the real node toa-real-node is not up: $(cat "$state/realnode.unavailable" 2>/dev/null || echo "realnode/up.sh failed")"
}

# stop NAME...: SIGTERM to those components, then wait for them (SIGKILL after
# 30 s), as down.sh stops them.
stop() {
	local c pid deadline
	for c in "$@"; do
		pid=$(cat "$state/$c.pid")
		kill -TERM "$pid" 2>/dev/null || true
		deadline=$((SECONDS + 30))
		while alive "$c" && ((SECONDS < deadline)); do sleep 0.1; done
		alive "$c" && kill -KILL "$pid" 2>/dev/null || true
		rm -f "$state/$c.pid"
	done
}

# reconfigure: the three restarted with this script's flags and audit policy, in
# a few seconds; clients reconnect (informers list again), and etcd's data, the
# nodes and every namespace stay.
reconfigure() {
	local began=$SECONDS
	log "restarting kube-apiserver, kube-controller-manager and kube-scheduler: their flags or the audit policy changed ($(cat "$state/config" 2>/dev/null || echo none) -> $config)"
	stop kube-scheduler kube-controller-manager kube-apiserver
	start_apiserver
	wait_for kube-apiserver "readiness on port $api_port" api_ready
	start_controller_manager
	start_scheduler
	wait_for kube-controller-manager "health on port $kcm_port" healthy "https://127.0.0.1:$kcm_port/healthz"
	wait_for kube-scheduler "health on port $sched_port" healthy "https://127.0.0.1:$sched_port/healthz"
	echo "$config" >"$state/config"
	log "restarted in $((SECONDS - began)) s"
}

if all_alive && api_ready && [[ $(readlink "$state/bin" 2>/dev/null) == "$bin" ]]; then
	[[ $(cat "$state/config" 2>/dev/null) == "$config" ]] || reconfigure
	real_node
	report
	exit 0
fi

# Anything half-started (or started with other binaries) goes first.
TOA_TEST_STATE=$state "$here/down.sh" >/dev/null

# --- start ----------------------------------------------------------------------

started=$(date +%s)
mkdir -p "$pki" "$logs" "$state/etcd"
ln -sfn "$bin" "$state/bin"

port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
for p in "$etcd_port" "$etcd_peer_port" "$api_port" "$kcm_port" "$sched_port"; do
	port_free "$p" || die "port $p on 127.0.0.1 is taken; stop its user or choose other ports (see the top of $0)"
done

# A CA, the API server's serving certificate, the service-account key pair and
# one token per client (the API server reads them from a static token file).
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=toa-test-ca \
	-keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
	-keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' >"$pki/apiserver.ext"
openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
	-days 3650 -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt" 2>/dev/null
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

declare -A token
{
	for who in admin kube-controller-manager kube-scheduler kwok kubelet; do
		token[$who]=$(openssl rand -hex 24)
	done
	echo "${token[admin]},toa-test-admin,toa-test-admin,system:masters"
	# The controller manager acts as itself for every controller (no
	# --use-service-account-credentials), so its user needs every right.
	echo "${token[kube-controller-manager]},system:kube-controller-manager,system:kube-controller-manager,system:masters"
	echo "${token[kube-scheduler]},system:kube-scheduler,system:kube-scheduler"
	echo "${token[kwok]},kwok,kwok,system:masters"
	# The real node's kubelet (realnode/): a node's name, and every right, as
	# there is no Node authorizer.
	echo "${token[kubelet]},system:node:toa-real-node,system:node:toa-real-node,\"system:nodes,system:masters\""
} >"$pki/tokens.csv"
chmod 600 "$pki"/*.key "$pki/tokens.csv"

# kubeconfig NAME USER: a kubeconfig with that user's token.
write_kubeconfig() {
	local file=$1 who=$2
	cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: toa-test
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority-data: $(base64 -w0 <"$pki/ca.crt")
users:
- name: $who
  user:
    token: ${token[$who]}
contexts:
- name: toa-test
  context:
    cluster: toa-test
    user: $who
    namespace: default
current-context: toa-test
EOF
	chmod 600 "$file"
}
for who in kube-controller-manager kube-scheduler kwok kubelet; do
	write_kubeconfig "$pki/$who.kubeconfig" "$who"
done

start etcd "$bin/etcd" \
	--name toa-test \
	--data-dir "$state/etcd" \
	--listen-client-urls "http://127.0.0.1:$etcd_port" \
	--advertise-client-urls "http://127.0.0.1:$etcd_port" \
	--listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
	--initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
	--initial-cluster "toa-test=http://127.0.0.1:$etcd_peer_port" \
	--unsafe-no-fsync \
	--log-level warn
wait_for etcd "health on port $etcd_port" healthy "http://127.0.0.1:$etcd_port/health"

start_apiserver
write_kubeconfig "$kubeconfig" admin
wait_for kube-apiserver "readiness on port $api_port" api_ready

start_controller_manager

start_scheduler

# kwok plays the shipped stages (joined at build time) and the project's own.
kwok_config=(--config "$bin/kwok-stages.yaml")
for f in "$here"/stages/*.yaml; do
	kwok_config+=(--config "$f")
done
start kwok "$bin/kwok" \
	"${kwok_config[@]}" \
	--kubeconfig "$pki/kwok.kubeconfig" \
	--manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
	--cidr 10.0.0.0/16 \
	--node-ip 192.0.2.1

wait_for kube-controller-manager "health on port $kcm_port" healthy "https://127.0.0.1:$kcm_port/healthz"
wait_for kube-scheduler "health on port $sched_port" healthy "https://127.0.0.1:$sched_port/healthz"

k() { "$kubectl" --kubeconfig "$kubeconfig" --request-timeout 10s "$@"; }
k apply -f "$here/node.yaml" >"$logs/up.log" 2>&1 || fail kube-apiserver "creating the node failed: $(cat "$logs/up.log")"

node_ready() {
	[[ $(k get node kwok-node-0 -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') == True ]]
}
wait_for kwok "Ready node kwok-node-0" node_ready
wait_for kube-controller-manager "default ServiceAccount in namespace default" k get serviceaccount default -n default
all_alive || fail kwok "a component exited"
echo "$config" >"$state/config"
real_node

log "started in $(($(date +%s) - started)) s"
report
