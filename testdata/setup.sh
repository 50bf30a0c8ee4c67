#!/usr/bin/env bash
# Installs and starts what the tests and the demo talk to. Idempotent: a second run checks and
# returns. Each part has its own script, so that it can be run alone.
set -euo pipefail
cd "$(dirname "$0")"
for part in registry/install.sh readers/install.sh airgap/install.sh tools/install.sh tools/flux.sh qemu/install.sh controlplane/realnode/install.sh controlplane/up.sh; do
  if [ -f "$part" ]; then
    echo "setup: $part"
    bash "$part"
  fi
done
