#!/usr/bin/env bash
# Checks the systemd units in deploy/systemd with `systemd-analyze verify`.
# Fails on any complaint: verify exits 0 on an unknown key (it only warns), so
# its output must be empty too. The runner template is checked as an instance.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if ! command -v systemd-analyze >/dev/null; then
  echo "systemd-analyze not found; installing Debian's systemd package"
  apt-get install -y --no-install-recommends systemd >/dev/null
fi
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cp deploy/systemd/*.service "$dir/"
units=()
for f in "$dir"/*.service; do
  case "$f" in
    *@.service) units+=("${f%@.service}@example.service") ;;
    *) units+=("$f") ;;
  esac
done
status=0
out="$(systemd-analyze verify "${units[@]}" 2>&1)" || status=$?
if [[ $status -ne 0 || -n "$out" ]]; then
  printf '%s\n' "$out" >&2
  echo "systemd-analyze verify found problems in deploy/systemd (exit $status)" >&2
  exit 1
fi
echo "deploy/systemd: ${#units[@]} units verified"
