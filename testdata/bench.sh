#!/usr/bin/env bash
# make bench: Go benchmarks, then the end-to-end comparisons of BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench . -benchmem ./...
