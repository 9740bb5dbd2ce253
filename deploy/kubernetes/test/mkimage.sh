#!/usr/bin/env bash
# mkimage.sh REF ROOTFS OUT CONFIG: a one-layer image of ROOTFS's files
# (owners kept), FROM nothing, as a `docker save` archive at OUT, without
# Docker, for `ctr images import`. CONFIG is the image config's "config"
# object as JSON, e.g. '{"Entrypoint":["/pause"],"User":"65535:65535"}'.
set -euo pipefail
ref=$1 rootfs=$2 out=$3 config=$4
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
(cd "$rootfs" && find . -mindepth 1 -maxdepth 1 -printf '%P\0' | sort -z |
	tar --numeric-owner --sort=name --mtime=@0 --null -T - -cf "$d/layer.tar")
diff=$(sha256sum "$d/layer.tar" | cut -d' ' -f1)
printf '{"architecture":"amd64","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
	"$config" "$diff" >"$d/config.json"
cfg=$(sha256sum "$d/config.json" | cut -d' ' -f1)
mv "$d/config.json" "$d/$cfg.json"
mkdir "$d/$diff"
mv "$d/layer.tar" "$d/$diff/layer.tar"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$cfg" "$ref" "$diff" >"$d/manifest.json"
tar -C "$d" -cf "$out" manifest.json "$cfg.json" "$diff"
