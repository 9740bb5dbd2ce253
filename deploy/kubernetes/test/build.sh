#!/bin/sh
# Builds what deploy/kubernetes/test/cluster.sh runs, pinned, into a cache
# directory of its own (CACHE, default ~/.cache/relayd-k8s), kept between
# runs: Kubernetes v1.34.2's kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy and kubectl from the Go module proxy,
# Debian's etcd-server, containerd, runc and containernetworking-plugins
# unpacked (apt-get download, dpkg -x: nothing installed, no system etcd
# started), busybox-static for the test's task image, and the pause
# image's static binary from Kubernetes' build/pause/linux/pause.c.
# Idempotent: what is built is not rebuilt.
#
# k8s.io/kubernetes from the proxy has no staging/ tree, which its go.mod's
# replace block points at: a scratch module requires it and replaces each
# staging module with its v0.34.2 release, and a file imports the cmd/
# packages so that go mod tidy records their dependencies.
#
# nice 19, so that a shared machine's other work goes first; JOBS (go
# build -p) defaults to the machine's CPUs. A cold build takes minutes,
# a warm one (GOCACHE kept) seconds.
set -eu
K8S_VERSION=${K8S_VERSION:-v1.34.2}
STAGING_VERSION=${STAGING_VERSION:-v0.34.2}
CACHE=${CACHE:-$HOME/.cache/relayd-k8s}
JOBS=${JOBS:-$(nproc)}
log() { echo "build.sh: $*" >&2; }

mkdir -p "$CACHE/bin" "$CACHE/src" "$CACHE/gocache" "$CACHE/gomod" "$CACHE/debs" "$CACHE/root"
export GOCACHE="$CACHE/gocache" GOMODCACHE="$CACHE/gomod" GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

cmds="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl"
stamp="$CACHE/bin/.built-$K8S_VERSION"
if [ ! -f "$stamp" ]; then
	src="$CACHE/src"
	if [ ! -f "$src/go.sum" ]; then
		log "scratch module for k8s.io/kubernetes@$K8S_VERSION in $src"
		{
			echo "module relayd.local/k8sbuild"
			echo
			echo "go 1.24.0"
			echo
			echo "require k8s.io/kubernetes $K8S_VERSION"
			echo
			echo "replace ("
			for m in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go \
				cloud-provider cluster-bootstrap code-generator component-base component-helpers \
				controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation \
				endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy \
				kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission \
				sample-apiserver sample-cli-plugin sample-controller; do
				echo "	k8s.io/$m => k8s.io/$m $STAGING_VERSION"
			done
			echo ")"
		} > "$src/go.mod"
		{
			echo "//go:build tools"
			echo
			echo "package tools"
			echo
			echo "import ("
			for c in $cmds; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
			echo ")"
		} > "$src/tools.go"
		(cd "$src" && nice -n 19 go mod tidy)
	fi
	# The version the binaries report (and the kubelet registers with).
	minor=$(echo "$K8S_VERSION" | cut -d. -f2)
	v=k8s.io/component-base/version
	cv=k8s.io/client-go/pkg/version
	ld="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
	ld="$ld -X $cv.gitVersion=$K8S_VERSION -X $cv.gitMajor=1 -X $cv.gitMinor=$minor"
	pkgs=
	for c in $cmds; do pkgs="$pkgs k8s.io/kubernetes/cmd/$c"; done
	log "go build -p $JOBS $cmds ($K8S_VERSION)"
	start=$(date +%s)
	# shellcheck disable=SC2086
	(cd "$src" && nice -n 19 go build -p "$JOBS" -trimpath -ldflags "$ld" -o "$CACHE/bin/" $pkgs)
	log "built in $(( $(date +%s) - start )) s"
	touch "$stamp"
fi

# The pause image's binary, from the module's own source.
if [ ! -x "$CACHE/bin/pause" ]; then
	pausec=$(GOFLAGS=-mod=mod go -C "$CACHE/src" list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
	log "gcc -static $pausec"
	nice -n 19 gcc -Os -static -Wall -Werror -DVERSION="$K8S_VERSION-relayd" -o "$CACHE/bin/pause.new" "$pausec"
	strip "$CACHE/bin/pause.new"
	mv "$CACHE/bin/pause.new" "$CACHE/bin/pause"
fi

# Debian's pieces, unpacked, never installed.
debs="etcd-server containerd runc containernetworking-plugins busybox-static"
unpacked="$CACHE/root/.unpacked-$(echo $debs | tr ' ' +)"
if [ ! -f "$unpacked" ]; then
	log "apt-get download $debs"
	# A machine whose package lists are missing or stale (a fresh one)
	# downloads nothing: update them once and try again.
	# shellcheck disable=SC2086
	(cd "$CACHE/debs" && rm -f ./*.deb && { apt-get download $debs >&2 ||
		{ log "apt-get update, then again" && apt-get update -qq >&2 && apt-get download $debs >&2; }; })
	rm -rf "$CACHE/root" && mkdir -p "$CACHE/root"
	for d in "$CACHE"/debs/*.deb; do dpkg -x "$d" "$CACHE/root"; done
	touch "$unpacked"
fi
for f in bin/kube-apiserver bin/kubelet bin/kubectl bin/pause root/usr/bin/etcd root/usr/bin/containerd \
	root/usr/bin/containerd-shim-runc-v2 root/usr/bin/runc root/usr/lib/cni/bridge root/usr/lib/cni/firewall root/bin/busybox; do
	[ -x "$CACHE/$f" ] || { log "missing $CACHE/$f"; exit 1; }
done
log "ready in $CACHE"
