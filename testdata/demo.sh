#!/usr/bin/env bash
# make demo: the main job, end to end. A local registry on 127.0.0.1:5000 gets the test base
# (node and a stand-in Toa runtime: Toa's own runtime image is not reachable from here), then
# toa-push builds and pushes testdata/apps/pushed for linux/amd64 and linux/arm64 and writes its
# kustomization into deployment/, and toa-apply applies it to the local control plane.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${TOA_CACHE:-$HOME/.cache/toa-deploy}/demo"
mkdir -p "$cache/registry"

if ! curl -fsS -o /dev/null http://127.0.0.1:5000/v2/ 2>/dev/null; then
  cat > "$cache/registry.yml" <<YAML
version: 0.1
storage:
  filesystem:
    rootdirectory: $cache/registry
http:
  addr: 127.0.0.1:5000
YAML
  echo "== starting a registry on 127.0.0.1:5000 (storage in $cache/registry)"
  nohup docker-registry serve "$cache/registry.yml" >"$cache/registry.log" 2>&1 &
  echo $! >"$cache/registry.pid"
  for _ in $(seq 50); do curl -fsS -o /dev/null http://127.0.0.1:5000/v2/ 2>/dev/null && break; sleep 0.1; done
fi

echo "== the test base"
go run ./internal/harness/pushbase 127.0.0.1:5000

# a copy, so that the demo can change a line of code without touching the repository
app="$cache/app"
rm -rf "$app" && cp -rL testdata/apps/pushed "$app" # -L: the stand-in extensions linked under node_modules
echo
echo "== toa-push --plan (what would be built)"
bin/toa-push --plan --path "$app" -k deployment
echo
echo "== toa-push (builds what the registry lacks; a second run sends nothing)"
time bin/toa-push --path "$app" -k deployment
echo
echo "== deployment/ (the kustomization)"
ls deployment
sed -n '1,40p' deployment/kustomization.yaml

kubeconfig="${TOA_TEST_KUBECONFIG:-${TOA_CACHE:-$HOME/.cache/toa-deploy}/controlplane/run/kubeconfig}"
if [ -f "$kubeconfig" ] && bin/toa-apply --help >/dev/null 2>&1; then
  echo
  echo "== toa-apply (the local control plane)"
  time bin/toa-apply deployment --kubeconfig "$kubeconfig"

  echo
  echo "== a one-line code change: toa-push sends one layer, toa-apply waits until the replaced pods are gone"
  echo "// changed by make demo at $(date -u +%FT%TZ)" >> "$app/components/shop.orders/operations.js"
  time bin/toa-push --path "$app" -k deployment
  time bin/toa-apply deployment --kubeconfig "$kubeconfig"
fi

# One rollout on the real node (a kubelet and containerd beside kwok's node), where the control
# plane has one: the pods start for real and turn Ready by their readiness probe. Not fatal: the
# demo above is the job; a host that cannot run a kubelet has no real node.
kubectl="${TOA_CACHE:-$HOME/.cache/toa-deploy}/controlplane/bin/kubectl"
real_ready() {
  [ -x "$kubectl" ] && [ "$("$kubectl" --kubeconfig "$kubeconfig" --request-timeout 5s get node toa-real-node \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
if [ -f "$kubeconfig" ] && real_ready; then
  echo
  echo "== the same application on the real node toa-real-node (namespace toa-demo-real): pods Ready by their probe"
  k() { "$kubectl" --kubeconfig "$kubeconfig" --request-timeout 10s "$@"; }
  overlay="$cache/realnode"
  mkdir -p "$overlay"
  cat > "$overlay/kustomization.yaml" <<YAML
resources:
- $(realpath --relative-to="$overlay" deployment)
patches:
- target: {kind: Deployment}
  patch: |-
    - {op: add, path: /spec/template/spec/nodeSelector, value: {toa-test/node: real}}
    - {op: add, path: /spec/template/spec/tolerations, value: [{key: toa-test/real-node, operator: Equal, value: "true", effect: NoSchedule}]}
YAML
  k create namespace toa-demo-real --dry-run=client -o yaml | k apply -f - >/dev/null
  # the Secrets the workloads read, as a user creates them before the first deploy
  declare -A literals=()
  while read -r name key; do
    literals[$name]+=" --from-literal=$key=demo"
  done < <(bin/toa-apply "$overlay" --render |
    awk '/secretKeyRef:/ {r=1; next} r && /key:/ {k=$2; next} r && /name:/ {print $2, k; r=0}' | sort -u)
  for name in "${!literals[@]}"; do
    # shellcheck disable=SC2086 # the --from-literal flags, split on purpose
    k -n toa-demo-real create secret generic "$name" ${literals[$name]} --dry-run=client -o yaml | k apply -f - >/dev/null
  done
  if time bin/toa-apply "$overlay" -n toa-demo-real --kubeconfig "$kubeconfig" --timeout 2m; then
    k -n toa-demo-real get pods -o wide
  else
    echo "== the rollout on the real node failed (above); its kubelet's logs: ${TOA_CACHE:-$HOME/.cache/toa-deploy}/controlplane/run/realnode/logs"
  fi
fi
