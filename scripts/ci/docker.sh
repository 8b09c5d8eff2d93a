#!/usr/bin/env bash
# A Docker engine for the runner's docker-executor tests, on a machine with no
# registry access.
#
#   scripts/ci/docker.sh start   install (if missing) and start dockerd, wait
#                                for it, import forelead-test/busybox:latest
#   scripts/ci/docker.sh status  exit 0 when the engine answers and the image exists
#
# Details:
#   * Installs Debian's docker.io and busybox-static with apt-get when dockerd
#     or busybox is missing (needs root).
#   * Starts `dockerd --storage-driver=vfs --iptables=false --bridge=none`
#     (works inside a container without overlayfs or iptables), logging to
#     $FORELEAD_DOCKERD_LOG (default /tmp/forelead-dockerd.log). An engine
#     that already answers is used as it is.
#   * The test image is made by `docker import` of a folder holding
#     /bin/busybox and its applet symlinks (sh, echo, sleep, cat, ls, ...),
#     since no registry is reachable.
set -euo pipefail

PROG="docker.sh"
IMAGE="forelead-test/busybox:latest"
LOG="${FORELEAD_DOCKERD_LOG:-/tmp/forelead-dockerd.log}"
READY_TIMEOUT=60 # seconds

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: ERROR: %s\n' "$PROG" "$*" >&2; exit 1; }

engine_up() { docker info >/dev/null 2>&1; }

install_missing() {
  if command -v dockerd >/dev/null && command -v docker >/dev/null && [[ -x /bin/busybox || -x /usr/bin/busybox ]]; then
    return
  fi
  [[ $(id -u) -eq 0 ]] || die "dockerd, docker or busybox is missing and installing needs root"
  log "installing docker.io and busybox-static"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io busybox-static >&2
}

start_engine() {
  if engine_up; then
    log "engine already running"
    return
  fi
  log "starting dockerd (log: $LOG)"
  nohup dockerd --storage-driver=vfs --iptables=false --bridge=none >"$LOG" 2>&1 &
  local waited=0
  until engine_up; do
    if ((waited >= READY_TIMEOUT * 2)); then
      tail -n 50 "$LOG" >&2 || true
      die "dockerd did not answer within ${READY_TIMEOUT}s"
    fi
    sleep 0.5
    waited=$((waited + 1))
  done
  log "engine is up"
}

import_image() {
  if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "image $IMAGE present"
    return
  fi
  local busybox root
  busybox="$(command -v busybox || true)"
  [[ -x /bin/busybox ]] && busybox=/bin/busybox
  [[ -n "$busybox" ]] || die "busybox not found"
  root="$(mktemp -d -t forelead-busybox.XXXXXX)"
  mkdir -p "$root/bin" "$root/tmp" "$root/output" "$root/workspace" "$root/etc"
  cp "$busybox" "$root/bin/busybox"
  local applet
  for applet in sh echo sleep cat ls env true false id mkdir rm touch printf head tail wc grep test kill ps; do
    ln -s busybox "$root/bin/$applet"
  done
  echo "root:x:0:0:root:/root:/bin/sh" >"$root/etc/passwd"
  chmod 1777 "$root/tmp"
  log "importing $IMAGE from $busybox"
  tar -C "$root" -c . | docker import --change 'ENV PATH=/bin' - "$IMAGE" >&2
  rm -rf "$root"
}

case "${1:-}" in
  start)
    install_missing
    start_engine
    import_image
    docker version --format 'docker engine {{.Server.Version}}' >&2
    ;;
  status)
    engine_up && docker image inspect "$IMAGE" >/dev/null 2>&1
    ;;
  *)
    echo "usage: $0 start|status" >&2
    exit 2
    ;;
esac
