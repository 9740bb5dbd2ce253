#!/usr/bin/env bash
# build-task-image.sh: the test task image, relayd-test-task:bookworm, made
# here without a registry: a Debian bookworm root filesystem from debootstrap
# (minbase, plus what the container tests use), imported with docker import.
# It is made once and reused by its tag: when the tag exists, this does nothing.
#
#   deploy/test/build-task-image.sh [TAG]
#
# Needs root, docker and debootstrap. The mirror is the first Debian archive
# URI (not security) of the host's apt sources, else
# http://deb.debian.org/debian; MIRROR=URL overrides it.
set -euo pipefail
tag=${1:-relayd-test-task:bookworm}
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "== $tag exists: reused"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "build-task-image.sh: debootstrap not installed (apt-get install debootstrap)" >&2; exit 2; }
mirror=${MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
    grep -v '^[[:space:]]*#' | grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -n1 | tr -d ' ' || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}
dir=$(mktemp -d /tmp/relayd-task-rootfs.XXXXXX)
trap 'rm -rf "$dir"' EXIT
echo "== debootstrap bookworm from $mirror into $dir"
debootstrap --variant=minbase --include=procps,python3,netcat-openbsd bookworm "$dir" "$mirror" >"$dir.log" 2>&1 ||
  { tail -n 30 "$dir.log" >&2; rm -f "$dir.log"; exit 1; }
rm -f "$dir.log"
# What a container does not need and docker import would only carry along.
rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/dev/*
tar -C "$dir" -c . | docker import -c 'CMD ["/bin/bash"]' - "$tag" >/dev/null
echo "== $tag imported"
