#!/bin/sh
# Builds agent-sandbox (kubernetes-sigs/agent-sandbox, module
# sigs.k8s.io/agent-sandbox), pinned, from the Go module proxy into the
# cache of build.sh (CACHE, default ~/.cache/relayd-k8s), kept between
# runs, for the agent-sandbox tests of make k8s-test
# (e2e/k8s_sandbox_test.go):
#
#   $CACHE/bin/agent-sandbox-controller   its cmd/agent-sandbox-controller;
#                                          run with --extensions for
#                                          SandboxTemplate, SandboxWarmPool
#                                          and SandboxClaim
#   $CACHE/agent-sandbox/VERSION/crds/     its CRDs (the module's k8s/crds)
#   $CACHE/agent-sandbox/VERSION/agent-sandbox-controller, a link to it
#   $CACHE/agent-sandbox/VERSION/rbac/     its ClusterRoles (k8s/*rbac*),
#                                          for running it as a Pod; the
#                                          tests run it on the node with the
#                                          admin kubeconfig instead
#
# Prints the directory (…/VERSION) on stdout; run.sh's images() passes it
# to the tests as RELAYD_K8S_AGENT_SANDBOX. Idempotent: what is built is
# not rebuilt. Nothing of the module is copied into this repository.
#
# The binary is under $CACHE/bin, so cluster.sh down (our_pids: processes
# whose executable is under $CACHE/bin) stops one a test left running.
# nice 19 and JOBS (go build -p, default the machine's CPUs) as build.sh:
# a cold build takes about 4 minutes on a loaded 2-CPU machine (-p 1),
# a warm one nothing (the stamp) or seconds (GOCACHE kept).
# A scratch module requires the pinned version and imports the command, as
# build.sh does for Kubernetes: go mod tidy then selects the versions of
# agent-sandbox's own go.mod (it has no replace block).
set -eu
VERSION=${AGENT_SANDBOX_VERSION:-v1.0.1}
MODULE=sigs.k8s.io/agent-sandbox
CACHE=${CACHE:-$HOME/.cache/relayd-k8s}
JOBS=${JOBS:-$(nproc)}
log() { echo "agent-sandbox.sh: $*" >&2; }

out=$CACHE/agent-sandbox/$VERSION
src=$CACHE/src-agent-sandbox-$VERSION
mkdir -p "$CACHE/bin" "$CACHE/gocache" "$CACHE/gomod" "$out" "$src"
export GOCACHE="$CACHE/gocache" GOMODCACHE="$CACHE/gomod" GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
export PATH="/usr/local/go/bin:$PATH"

stamp=$CACHE/bin/.built-agent-sandbox-$VERSION
if [ ! -f "$stamp" ] || [ ! -x "$CACHE/bin/agent-sandbox-controller" ]; then
	if [ ! -f "$src/go.sum" ]; then
		log "scratch module for $MODULE@$VERSION in $src"
		printf 'module relayd.local/agentsandboxbuild\n\ngo 1.26.0\n\nrequire %s %s\n' "$MODULE" "$VERSION" >"$src/go.mod"
		printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/agent-sandbox-controller"\n' "$MODULE" >"$src/tools.go"
		(cd "$src" && nice -n 19 go mod tidy)
	fi
	vp=$MODULE/internal/version
	ld="-s -w -X $vp.gitVersion=$VERSION -X $vp.gitSHA=module-proxy -X $vp.buildDate=unknown"
	log "go build -p $JOBS $MODULE/cmd/agent-sandbox-controller ($VERSION)"
	start=$(date +%s)
	(cd "$src" && nice -n 19 go build -p "$JOBS" -trimpath -ldflags "$ld" \
		-o "$CACHE/bin/agent-sandbox-controller.new" "$MODULE/cmd/agent-sandbox-controller")
	mv "$CACHE/bin/agent-sandbox-controller.new" "$CACHE/bin/agent-sandbox-controller"
	log "built in $(($(date +%s) - start)) s"
	touch "$stamp"
fi

# The CRDs and RBAC, as the module ships them.
if [ ! -f "$out/.extracted" ]; then
	dir=$(cd "$src" && go list -m -f '{{.Dir}}' "$MODULE")
	rm -rf "$out/crds" "$out/rbac"
	mkdir -p "$out/crds" "$out/rbac"
	cp "$dir"/k8s/crds/*.yaml "$out/crds/"
	for f in "$dir"/k8s/*rbac*.yaml; do [ -f "$f" ] && cp "$f" "$out/rbac/"; done
	chmod -R u+w "$out"
	touch "$out/.extracted"
fi
# The binary by the directory's name (the tests take the directory); the
# process's executable is still $CACHE/bin's.
ln -sfn "$CACHE/bin/agent-sandbox-controller" "$out/agent-sandbox-controller"
for f in sandboxes sandboxtemplates sandboxwarmpools sandboxclaims; do
	ls "$out"/crds/*_"$f".yaml >/dev/null 2>&1 || { log "missing the CRD of $f in $out/crds"; exit 1; }
done
log "ready: $CACHE/bin/agent-sandbox-controller, $out"
echo "$out"
