#!/usr/bin/env bash
# run.sh: make k8s-test. Brings the single-node cluster of cluster.sh up,
# makes relayd's images without Docker (mkimage.sh) and loads them into it,
# runs the tests on the cluster (e2e's k8s_*_test.go, build tag k8s:
# relayd's own Pods applied as trial.sh writes them, reached every way,
# the clients and adapters, agent-sandbox, a fleet), and takes everything
# down on any exit, then checks nothing is left (cluster.sh check).
#
#   run.sh           all of it: up, images, tests, down
#   run.sh up        up and images, the cluster left running for work on
#                    the tests; prints the variables the tests want, which
#                    it also writes to $STATE/test.env
#   run.sh test [go test flags]
#                    the tests against a cluster run.sh up made
#   run.sh down      cluster.sh down
#
# The tests' figures (their t.Logf lines "k8s-report: ...") are printed
# together at the end, with the cluster's bring-up time.
#
# Root; no Docker. Times on stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cluster=$here/cluster.sh
CACHE=${CACHE:-$HOME/.cache/relayd-k8s}
STATE=${STATE:-/var/tmp/relayd-k8s}
export CACHE STATE
export PATH="/usr/local/go/bin:$PATH"

log() { echo "run.sh: $*" >&2; }
now() { date +%s.%N; }
since() { awk "BEGIN {printf \"%.1f\", $(now) - $1}"; }

# images: relayd's init image as make k8s-image makes it (relayd at /relayd,
# FROM nothing) from make build's binary, and a task image of busybox
# (static, Debian's busybox-static) with user 1000 and /app, 1000's; both
# loaded into the cluster's containerd; agent-sandbox's controller and
# CRDs (agent-sandbox.sh, cached in CACHE); the tests' variables in
# $STATE/test.env.
images() {
	local t1 tag work ctx init task sandbox
	t1=$(now)
	tag=k8s-test-$(date +%s)
	init=relayd.local/relayd-init:$tag
	task=relayd.local/relayd-k8s-task:$tag
	work=$(mktemp -d /tmp/relayd-k8s-images.XXXXXX)
	make --no-print-directory -C "$repo" build >&2
	mkdir -p "$STATE/test"
	cp "$repo/bin/relayd" "$STATE/test/relayd"
	mkdir -p "$work/init" && cp "$repo/bin/relayd" "$work/init/relayd"
	"$here/mkimage.sh" "$init" "$work/init" "$work/init.tar" '{"Entrypoint":["/relayd","install"],"Cmd":["/opt/relayd/relayd"]}'
	ctx=$work/task
	mkdir -p "$ctx/bin" "$ctx/etc" "$ctx/tmp" "$ctx/app"
	cp "$CACHE/root/bin/busybox" "$ctx/bin/busybox"
	for c in sh echo cat ls sleep id env true false printf mkdir rm; do ln -s busybox "$ctx/bin/$c"; done
	printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/app:/bin/sh\n' >"$ctx/etc/passwd"
	printf 'root:x:0:\nagent:x:1000:\n' >"$ctx/etc/group"
	chmod 1777 "$ctx/tmp"
	chown 1000:1000 "$ctx/app"
	"$here/mkimage.sh" "$task" "$ctx" "$work/task.tar" '{"Env":["PATH=/bin"]}'
	for i in init task; do
		"$CACHE/root/usr/bin/ctr" --address "$STATE/containerd/containerd.sock" -n k8s.io images import "$work/$i.tar" >/dev/null
	done
	rm -rf "$work"
	sandbox=$("$here/agent-sandbox.sh")
	cat >"$STATE/test.env" <<EOF
KUBECONFIG=$STATE/admin.kubeconfig
RELAYD_K8S_KUBECTL=$CACHE/bin/kubectl
RELAYD_K8S_CTR=$CACHE/root/usr/bin/ctr
RELAYD_K8S_CONTAINERD=$STATE/containerd/containerd.sock
RELAYD_K8S_INIT_IMAGE=$init
RELAYD_K8S_TASK_IMAGE=$task
RELAYD_K8S_BUSYBOX=$CACHE/root/bin/busybox
RELAYD_K8S_RELAYD=$STATE/test/relayd
RELAYD_K8S_AGENT_SANDBOX=$sandbox
EOF
	log "images made and loaded in $(since "$t1") s"
}

# tests: e2e's TestK8s* (build tag k8s) with the variables of test.env.
tests() {
	[ -f "$STATE/test.env" ] || { log "no $STATE/test.env: run.sh up first"; exit 1; }
	set -a
	# shellcheck disable=SC1091
	. "$STATE/test.env"
	set +a
	local t0 rc=0
	t0=$(now)
	(cd "$repo" && go test -tags k8s -count=1 -timeout 40m -run '^TestK8s' "$@" ./e2e/) 2>&1 |
		tee "$STATE/test/go-test.log" || rc=$?
	log "tests in $(since "$t0") s (exit $rc)"
	# The figures the tests measured (lines "k8s-report: ..."), together.
	echo "== k8s-test report"
	grep -ho 'k8s-report: .*' "$STATE/test/go-test.log" | sed 's/^k8s-report: /  /' || true
	return "$rc"
}

case ${1:-all} in
up)
	t0=$(now)
	"$cluster" up
	log "cluster up in $(since "$t0") s"
	images
	cat "$STATE/test.env"
	;;
test)
	shift
	tests -v "$@"
	;;
down) "$cluster" down ;;
all)
	trap 'rc=$?; "$cluster" down || rc=1; exit $rc' EXIT
	trap 'exit 130' INT TERM
	t0=$(now)
	"$cluster" up
	up=$(since "$t0")
	log "cluster up in $up s"
	images
	tests -v
	echo "  cluster up (build.sh's check or build included): $up s"
	log "PASS in $(since "$t0") s"
	;;
*) echo "usage: run.sh [all|up|test [go test flags]|down]" >&2; exit 2 ;;
esac
