#!/usr/bin/env bash
# Stops the control plane that up.sh started (SIGTERM, then waits; SIGKILL
# after 30 s) and removes its run state: pids, logs, data, certificates,
# kubeconfig; and first the real node (realnode/down.sh). The built binaries
# stay in the cache.
set -euo pipefail

cache=${TOA_CACHE:-$HOME/.cache/toa-deploy}/controlplane
state=${TOA_TEST_STATE:-$cache/run}

[[ -d $state ]] || exit 0

if [[ -z ${_TOA_CONTROLPLANE_LOCKED:-} ]]; then
	exec 9>"$state.lock"
	flock 9
fi

# running PID: the process runs (a zombie, not yet reaped by init, does not).
running() {
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
	[[ ${st:0:1} != Z ]]
}

# stop NAME...: SIGTERM to those components, then wait for them all.
stop() {
	local c f pid pids=() deadline=$((SECONDS + 30))
	for c in "$@"; do
		f=$state/$c.pid
		[[ -f $f ]] || continue
		pid=$(cat "$f")
		# Only a process that still runs the binary up.sh started.
		if running "$pid" && [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */"$c" ]]; then
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$pid:$c")
		fi
	done
	for p in "${pids[@]}"; do
		pid=${p%%:*}
		while running "$pid" && ((SECONDS < deadline)); do
			sleep 0.1
		done
		if running "$pid"; then
			printf 'controlplane: %s (pid %s) ignored SIGTERM for 30 s; killing it\n' "${p#*:}" "$pid" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
	for c in "$@"; do rm -f "$state/$c.pid"; done
}

# The real node first, while the API server can still tell its kubelet to
# stop the node's pods; then the API server's clients, the API server, etcd.
_TOA_CONTROLPLANE_LOCKED=1 TOA_TEST_STATE=$state "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/realnode/down.sh" || true
stop kwok kube-scheduler kube-controller-manager
stop kube-apiserver
stop etcd

# Only what up.sh made, so that a TOA_TEST_STATE pointing elsewhere by
# mistake loses nothing else.
rm -rf "$state/etcd" "$state/pki" "$state/logs" "$state/bin" "$state/kubeconfig" "$state/config" "$state/realnode.unavailable"
rmdir "$state" 2>/dev/null || printf 'controlplane: left %s: it holds files up.sh did not make\n' "$state" >&2
