#!/usr/bin/env bash
# The container image (Dockerfile): build it, and check that it runs.
#   bash scripts/ci/image.sh build [TAG]   assemble the context, build TAG (default forelead:local)
#   bash scripts/ci/image.sh smoke [TAG]   run TAG's `serve` with a read-only root file system until
#                                          it serves and /healthz answers (at most SMOKE_SECONDS,
#                                          150: the first start makes the database), then stop it
#                                          (SIGTERM) and want exit 0
# build needs dist/ (`npm run build`; npm ci runs it) and makes the base (scripts/ci/base-image.sh)
# when it is missing. Production node_modules are installed on this machine (npm ci --omit=dev,
# from npm's cache where it can): the docker build itself reaches no network here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
what="${1:-}"
tag="${2:-forelead:local}"
base="${BASE:-forelead-base:local}"
limit="${SMOKE_SECONDS:-150}"
fail() { echo "image: $*" >&2; exit 1; }

build() {
  [[ -f dist/cli/main.js ]] || fail "dist/ is not built: run \`npm run build\` (npm ci runs it) first"
  docker image inspect "$base" >/dev/null 2>&1 || bash scripts/ci/base-image.sh "$base"
  # Not local: the EXIT trap reads it after build returns.
  ctx="$(mktemp -d -t forelead-image.XXXXXX)"
  trap 'rm -rf "$ctx"' EXIT
  mkdir -p "$ctx/app"
  cp -r package.json package-lock.json bin dist "$ctx/app/"
  find "$ctx/app/dist" -name '*.map' -delete
  (cd "$ctx/app" && npm ci --omit=dev --ignore-scripts --prefer-offline --no-audit --no-fund --loglevel=error) ||
    fail "npm ci --omit=dev failed in the image's context (see above)"
  docker build --quiet --build-arg "BASE=$base" -t "$tag" -f Dockerfile "$ctx" >/dev/null ||
    fail "docker build failed (run it without --quiet to see the step)"
  # The legacy builder keeps the first stage as an untagged image: not needed once the image exists.
  docker image prune -f --filter label=forelead.stage=assemble >/dev/null
  echo "image: $tag built ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
}

smoke() {
  # Not local: the EXIT trap reads it after smoke returns.
  name="forelead-smoke-$$"
  local out code
  docker image inspect "$tag" >/dev/null 2>&1 || fail "there is no image $tag: build it first (image.sh build $tag)"
  trap 'docker rm -f -v "$name" >/dev/null 2>&1 || true' EXIT
  # Read-only root; the state volume (anonymous here) and a /tmp tmpfs are the writable places.
  # dockerd here has no bridge network (scripts/ci/docker.sh): the host's, with ports the kernel picks.
  docker run -d --name "$name" --read-only --tmpfs /tmp --network host "$tag" \
    serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --database /var/lib/forelead/db --certs-dir /var/lib/forelead/certs >/dev/null
  local deadline=$((SECONDS + limit)) started=$SECONDS url=""
  local logs=""
  # Serving: its `serving https://` line printed, and /healthz on the metrics listener answering 200.
  until [[ -n "$url" ]] && grep -q '^forelead: serving https://' <<<"$logs" && curl -fsS "$url/healthz" >/dev/null 2>&1; do
    logs="$(docker logs "$name" 2>&1)" || true
    url="$(grep -oE 'metrics and health on http://[^ ]+' <<<"$logs" | head -n1 | sed 's/.* on //')" || true
    if [[ "$(docker inspect -f '{{.State.Running}}' "$name")" != true ]]; then
      docker logs "$name" >&2 || true
      fail "serve in $tag exited before /healthz answered (its output is above)"
    fi
    if ((SECONDS > deadline)); then
      docker logs "$name" >&2 || true
      fail "serve in $tag did not answer /healthz within ${limit}s (its output is above)"
    fi
    sleep 0.5
  done
  echo "image: serve answers $url/healthz after $((SECONDS - started))s"
  # In the running container (a new one is a full copy of the file system on vfs).
  out="$(docker exec "$name" node /opt/forelead/bin/forelead.js --version)" || fail "forelead --version in the container failed: $out"
  grep -q '^forelead ' <<<"$out" || fail "forelead --version in the container printed: $out"
  echo "$out" | sed 's/^/image: /'
  docker stop -t 30 "$name" >/dev/null
  code="$(docker inspect -f '{{.State.ExitCode}}' "$name")"
  [[ "$code" == 0 ]] || { docker logs "$name" >&2 || true; fail "serve exited $code on SIGTERM (want 0; output above)"; }
  echo "image: serve stopped on SIGTERM (exit 0)"
}

case "$what" in
  build) build ;;
  smoke) smoke ;;
  *) fail "usage: image.sh build|smoke [TAG]" ;;
esac
