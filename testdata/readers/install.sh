#!/usr/bin/env bash
# Installs the readers that are not ours (DESIGN.md, "Readers that are not ours"): Debian's
# skopeo (containers/image) and umoci (opencontainers' image tools), which the end-to-end tests
# run on every image toa-push writes (internal/harness/readers.go), and podman with runc, which
# one test uses to run an image. podman runs with `--runtime runc`: crun, its default, did not
# start a container on the machines this was written on. GNU patch reads the unified diffs
# toa-apply --diff writes (rollout's TestUnifiedPatches). Nothing here starts a service.
# Idempotent: a second run checks and returns.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../lib/apt.sh"

# podman's package ships systemd units: apt_ensure keeps the install from starting them
apt_ensure skopeo umoci podman runc patch

skopeo --version
umoci --version
podman --version
runc --version | head -1
