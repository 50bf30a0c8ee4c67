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
