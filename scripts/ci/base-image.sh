#!/usr/bin/env bash
# Makes the base image of the Dockerfile without a registry: a root file system holding only
# this machine's Node.js binary, the shared libraries it links (ldd) and the dynamic loader,
# a passwd/group with the unprivileged user `forelead` (uid/gid 10001), its state directory
# /var/lib/forelead (0700), the secrets key's own directory /etc/forelead (0700) and /tmp, `docker import`ed as forelead-base:local (or $1). No shell, no
# package manager: the image runs `node` alone. Run as root (the files' owners go into the image).
# Usage: bash scripts/ci/base-image.sh [TAG]   (NODE=/path/to/node to pick another binary)
set -euo pipefail
tag="${1:-forelead-base:local}"
node_bin="$(readlink -f "${NODE:-$(command -v node)}")"
[[ -x "$node_bin" ]] || { echo "base-image: no node binary at '$node_bin'" >&2; exit 1; }
command -v docker >/dev/null || { echo "base-image: docker is not installed" >&2; exit 1; }

root="$(mktemp -d -t forelead-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/local/bin" "$root/etc/forelead" "$root/tmp" "$root/var/lib/forelead"
chmod 1777 "$root/tmp"
chown 10001:10001 "$root/var/lib/forelead" "$root/etc/forelead"
chmod 0700 "$root/var/lib/forelead" "$root/etc/forelead"
cp "$node_bin" "$root/usr/local/bin/node"
# Every library ldd names (the loader too), at the path the binary looks for it.
while read -r lib; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done < <(ldd "$node_bin" | grep -oE '/[^ ]+' | sort -u)
printf 'root:x:0:0:root:/root:/sbin/nologin\nforelead:x:10001:10001:forelead:/var/lib/forelead:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nforelead:x:10001:\n' >"$root/etc/group"
# Name resolution from files first (localhost), then DNS.
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"

version="$("$node_bin" --version)"
tar -C "$root" --numeric-owner -c . | docker import \
  --change 'ENV PATH=/usr/local/bin' \
  --change 'CMD ["/usr/local/bin/node"]' \
  --message "forelead base: node $version and its shared libraries" \
  - "$tag" >/dev/null
# The image must run its node: a missing library shows here, not in the image build.
got="$(docker run --rm "$tag" node --version)"
[[ "$got" == "$version" ]] || { echo "base-image: $tag runs node '$got', expected $version" >&2; exit 1; }
echo "base-image: $tag (node $version, $(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
