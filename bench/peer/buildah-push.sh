#!/usr/bin/env bash
# The peer of toa-push in the push benchmarks: what the 289 Node tool does on `toa push`
# (reference/toa-deployment.md §6.5, §6.7), with buildah (daemonless, --isolation chroot) in place
# of docker buildx:
#   1. the images and their tags: taken from `toa-push --plan -o json` (the same names and tags,
#      so both tools find the same images in the registry; the time counts here);
#   2. every image probed (dependencies and composition), concurrently, one HEAD each;
#   3. missing dependencies images built from the 289 dependencies.Dockerfile and pushed, three at
#      a time; then missing composition images from composition.Dockerfile (COPY, not COPY --link:
#      buildah 1.28 refuses --link), three at a time.
# usage: buildah-push.sh APP_DIR PLATFORMS(comma-separated) [--no-cache]
# env: BUILDAH (the buildah command with its storage flags), TOA_PUSH (bin/toa-push), WORK (a
# scratch folder); optional: LOCAL_PACKAGES (a folder of the application the lockfiles name as
# file:../../FOLDER/...: copied into the dependencies image at /FOLDER, where that path leads from
# /composition/<label>), DEPS_ENV (NAME=VALUE... set in the dependencies image's build, such as
# npm_config_nodedir for node-gyp). Every line of the build logs starts with its time (seconds).
set -euo pipefail
app=$1 platforms=$2 nocache=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
: "${BUILDAH:?}" "${TOA_PUSH:?}" "${WORK:?}"
mkdir -p "$WORK"
plan="$WORK/plan.txt"
"$TOA_PUSH" --plan -o json --path "$app" -k "$WORK/plan-kustomization" 2>"$WORK/plan.err" | node "$here/plan.js" >"$plan"

accept='application/vnd.oci.image.index.v1+json,application/vnd.oci.image.manifest.v1+json,application/vnd.docker.distribution.manifest.list.v2+json,application/vnd.docker.distribution.manifest.v2+json'
# exists REF: the registry has the tag (`docker manifest inspect` in the 289 tool)
exists() {
  local ref=$1 host repo tag
  host=${ref%%/*}; repo=${ref#*/}; tag=${repo##*:}; repo=${repo%:*}
  [ "$(curl -s -o /dev/null -w '%{http_code}' -I -H "Accept: $accept" "http://$host/v2/$repo/manifests/$tag")" = 200 ]
}

IFS=, read -r -a plist <<<"$platforms"
stamp() { while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }
# build DOCKERFILE CONTEXT REF, once more if it fails: buildah 1.28's concurrent builds for several
# platforms from one base race on the base's local name ("locating pulled image ...: image not
# known"); a user would run it again, and the time of both tries counts
build() {
  once "$@" || {
    echo "buildah-push.sh: the build failed; once more"
    [ ${#plist[@]} -gt 1 ] && { $BUILDAH manifest rm "$3" >/dev/null 2>&1 || true; }
    once "$@"
  }
}
once() {
  local file=$1 ctx=$2 ref=$3
  if [ ${#plist[@]} -gt 1 ]; then
    $BUILDAH bud --tls-verify=false --isolation chroot --layers $nocache --platform "$platforms" --manifest "$ref" -f "$file" "$ctx" &&
      $BUILDAH manifest push --all --tls-verify=false "$ref" "docker://$ref"
  else
    $BUILDAH bud --tls-verify=false --isolation chroot --layers $nocache --platform "$platforms" -t "$ref" -f "$file" "$ctx" &&
      $BUILDAH push --tls-verify=false "$ref" "docker://$ref"
  fi
}

# deps NAME DEPS_REF BASE COMPONENTS: the 289 dependencies image
deps() {
  local name=$1 ref=$2 base=$3 components=$4 ctx="$WORK/deps-$1" pair label id
  rm -rf "$ctx" && mkdir -p "$ctx/context"
  for pair in ${components//,/ }; do
    label=${pair%%=*} id=${pair#*=}
    for f in package.json package-lock.json; do
      if [ -f "$app/components/$id/$f" ]; then
        mkdir -p "$ctx/context/$label" && cp "$app/components/$id/$f" "$ctx/context/$label/"
      fi
    done
  done
  local extra=""
  if [ -n "${LOCAL_PACKAGES:-}" ]; then
    cp -a "$app/$LOCAL_PACKAGES" "$ctx/context/.local-packages"
    extra+="COPY .local-packages /$LOCAL_PACKAGES"$'\n'
  fi
  for pair in ${DEPS_ENV:-}; do extra+="ENV $pair"$'\n'; done
  cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $base
$extra
ENV NODE_ENV=production
RUN if [ "" != "" ]; then npm set registry ; fi
RUN if [ "" != "" ]; then npm set proxy ; fi

WORKDIR /composition
COPY --chown=node:node . /composition

# the context holds the manifests alone, so this is every dependency and none of the sources
RUN --mount=type=cache,target=/root/.npm,sharing=locked \\
  for entry in *; do if grep -qs '"dependencies"' "\$entry/package.json"; then (cd \$entry && npm i --omit=dev); fi; done
DOCKERFILE
  build "$ctx/Dockerfile" "$ctx/context" "$ref" 2>&1 | stamp >"$ctx.log" || { tail -30 "$ctx.log" >&2; return 1; }
}

# composition NAME REF DEPS_REF COMPONENTS: the 289 composition image over its dependencies
composition() {
  local name=$1 ref=$2 depsref=$3 components=$4 ctx="$WORK/composition-$1" pair label id
  rm -rf "$ctx" && mkdir -p "$ctx/context"
  for pair in ${components//,/ }; do
    label=${pair%%=*} id=${pair#*=}
    mkdir -p "$ctx/context/$label"
    (cd "$app/components/$id" && tar -c --exclude=node_modules --exclude=.git --exclude=.npmrc . | tar -x -C "$ctx/context/$label")
  done
  cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $depsref

COPY . /composition

USER node
CMD toa compose *
DOCKERFILE
  build "$ctx/Dockerfile" "$ctx/context" "$ref" 2>&1 | stamp >"$ctx.log" || { tail -30 "$ctx.log" >&2; return 1; }
}

# probe everything first, concurrently
while read -r name ref depsref base components; do
  for r in "$ref" "$depsref"; do
    (exists "$r" && touch "$WORK/have.$(echo "$r" | tr '/:@' '___')") &
  done
done <"$plan"
wait
has() { [ -e "$WORK/have.$(echo "$1" | tr '/:@' '___')" ]; }

# a pool of three, as the 289 tool's
pool() { # pool FUNCTION: runs FUNCTION with each line of $WORK/jobs, three at a time
  local fn=$1 pids=() line
  while read -r line; do
    # shellcheck disable=SC2086
    $fn $line &
    pids+=($!)
    if [ ${#pids[@]} -ge 3 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  done <"$WORK/jobs"
  for p in "${pids[@]}"; do wait "$p"; done
}

: >"$WORK/jobs"
while read -r name ref depsref base components; do
  has "$depsref" || echo "$name $depsref $base $components" >>"$WORK/jobs"
done <"$plan"
pool deps

: >"$WORK/jobs"
while read -r name ref depsref base components; do
  has "$ref" || echo "$name $ref $depsref $components" >>"$WORK/jobs"
done <"$plan"
pool composition
rm -f "$WORK"/have.*
