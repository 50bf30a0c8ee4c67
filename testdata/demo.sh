#!/usr/bin/env bash
# The main job, end to end, on one of the testdata applications. It grows with the project:
# today it plans the push of an application.
set -euo pipefail
cd "$(dirname "$0")/.."
app=testdata/apps/declared
echo "== toa-push --plan $app (environment production)"
bin/toa-push --plan --path "$app" production
echo
echo "== the same plan, as a program reads it"
bin/toa-push --plan --path "$app" -o json production | head -40
