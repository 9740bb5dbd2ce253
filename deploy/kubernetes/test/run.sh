#!/usr/bin/env bash
# run.sh: make k8s-test. Brings the single-node cluster of cluster.sh up,
# loads relayd's images into it, applies trial.sh's overlays of both bases
# (restricted and baseline, each in a namespace that enforces its Pod
# Security level), waits for the Pods to be Ready, runs one execution
# through `kubectl exec -i ... /opt/relayd/relayd bridge` in each, and one
# from the node through the baseline overlay's dial-in Service, and takes
# everything down on any exit, then checks nothing is left.
#
# Root; no Docker (the images are made by mkimage.sh). Times on stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cluster=$here/cluster.sh
CACHE=${CACHE:-$HOME/.cache/relayd-k8s}
STATE=${STATE:-/var/tmp/relayd-k8s}
export CACHE STATE
tag=k8s-test-$$
INIT_IMAGE=relayd.local/relayd-init:$tag
TASK_IMAGE=relayd.local/relayd-k8s-task:$tag
work=$(mktemp -d /tmp/relayd-k8s-test.XXXXXX)
fails=0

log() { echo "run.sh: $*" >&2; }
now() { date +%s.%N; }
since() { awk "BEGIN {printf \"%.1f\", $(now) - $1}"; }

cleanup() {
	local rc=$?
	"$cluster" down || rc=1
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$(now)
"$cluster" up
log "cluster up in $(since "$t0") s"
eval "export $("$cluster" env)"
kubectl() { "$CACHE/bin/kubectl" "$@"; }

# The images, made without Docker (mkimage.sh): the init image as make
# k8s-image makes it (relayd at /relayd, FROM nothing) from make build's
# binary, and a task image of busybox (static, Debian's busybox-static)
# with user 1000 and /app, 1000's.
t1=$(now)
make --no-print-directory -C "$repo" build >&2
mkdir -p "$work/init" && cp "$repo/bin/relayd" "$work/init/relayd"
"$here/mkimage.sh" "$INIT_IMAGE" "$work/init" "$work/init.tar" '{"Entrypoint":["/relayd","install"],"Cmd":["/opt/relayd/relayd"]}'
ctx=$work/task
mkdir -p "$ctx/bin" "$ctx/etc" "$ctx/tmp" "$ctx/app"
cp "$CACHE/root/bin/busybox" "$ctx/bin/busybox"
for c in sh echo cat ls sleep id env true false printf mkdir rm; do ln -s busybox "$ctx/bin/$c"; done
printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/app:/bin/sh\n' >"$ctx/etc/passwd"
printf 'root:x:0:\nagent:x:1000:\n' >"$ctx/etc/group"
chmod 1777 "$ctx/tmp"
chown 1000:1000 "$ctx/app"
"$here/mkimage.sh" "$TASK_IMAGE" "$ctx" "$work/task.tar" '{"Env":["PATH=/bin"]}'
for i in init task; do
	"$CACHE/root/usr/bin/ctr" --address "$STATE/containerd/containerd.sock" -n k8s.io images import "$work/$i.tar" >/dev/null
done
log "images made and loaded in $(since "$t1") s"

# session MODE LEVEL NS TOKEN: ready, execute and verify, the replies on
# stdout: through kubectl exec ... relayd bridge, or (dial-in) from the node
# to the trial's Service's cluster IP, port 7700.
session() {
	local mode=$1 level=$2 ns=$3 token=$4
	if [ "$mode" = exec ]; then
		{
			printf '{"token":"%s","kind":"ready"}\n' "$token"
			printf '{"token":"%s","kind":"execute","id":1,"command":"sh","args":["-c","echo hello from %s; id -u"]}\n' "$token" "$level"
			sleep 2
			printf '{"token":"%s","kind":"verify","id":2}\n' "$token"
		} | kubectl exec -i -n "$ns" t1-relayd-trial -c task -- /opt/relayd/relayd bridge 2>&1
		return
	fi
	local ip
	ip=$(kubectl get service -n "$ns" t1-relayd -o jsonpath='{.spec.clusterIP}')
	/usr/bin/python3 - "$ip" "$token" "$level" <<'PY'
import json, socket, sys, time
ip, token, level = sys.argv[1:]
for _ in range(50):  # kube-proxy's rules may trail the endpoint by a moment
    try:
        s = socket.create_connection((ip, 7700), timeout=5)
        break
    except OSError:
        time.sleep(0.2)
else:
    sys.exit("no connection to %s:7700" % ip)
s.settimeout(30)
f = s.makefile("rwb")
def send(m):
    m = {"token": token, **m}
    f.write(json.dumps(m, separators=(",", ":")).encode() + b"\n"); f.flush()
def until(kind):
    while True:
        line = f.readline()
        if not line:
            sys.exit("connection closed before %s" % kind)
        sys.stdout.write(line.decode())
        if json.loads(line).get("kind") == kind:
            return
send({"kind": "ready"}); until("ready")
send({"kind": "execute", "id": 1, "command": "sh", "args": ["-c", "echo hello from %s; id -u" % level]}); until("executed")
send({"kind": "verify", "id": 2}); until("verified")
PY
}

# One trial per base, each in a namespace enforcing its level, reached
# through kubectl exec; and the baseline Pod through its Service (dial-in).
for run in restricted:exec baseline:exec baseline:dial-in; do
	level=${run%%:*} mode=${run#*:}
	ns=relayd-$level-$mode
	t2=$(now)
	kubectl create namespace "$ns" >/dev/null
	kubectl label namespace "$ns" relayd-k8s-test=1 "pod-security.kubernetes.io/enforce=$level" >/dev/null
	# Admission wants the namespace's default ServiceAccount first.
	for _ in $(seq 100); do kubectl get serviceaccount default -n "$ns" >/dev/null 2>&1 && break; sleep 0.2; done
	token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
	(umask 077 && printf '%s' "$token" >"$work/$level.token")
	TRIAL=t1 NAMESPACE=$ns TASK_IMAGE=$TASK_IMAGE INIT_IMAGE=$INIT_IMAGE \
		TOKEN_FILE=$work/$level.token POD_SECURITY=$level MODE=$mode "$repo/deploy/kubernetes/trial.sh" "$work/$level-$mode"
	kubectl apply -k "$work/$level-$mode" >/dev/null
	if ! kubectl wait -n "$ns" --for=condition=Ready pod/t1-relayd-trial --timeout=120s >/dev/null; then
		log "FAIL $run: the Pod is not Ready"
		kubectl describe pod -n "$ns" t1-relayd-trial >&2 || true
		fails=$((fails + 1))
		continue
	fi
	log "$run: Ready $(since "$t2") s after apply"
	t3=$(now)
	out=$(session "$mode" "$level" "$ns" "$token") || true
	want_uid=1000
	if echo "$out" | grep -q '"kind":"executed","id":1,"termination":"exited","exitCode":0,"stdout":"hello from '"$level"'\\n'"$want_uid"'\\n"' &&
		echo "$out" | grep -q '"kind":"verified","id":2,"quiescent":true'; then
		log "$run: ready, execute and verify ($mode) in $(since "$t3") s"
	else
		log "FAIL $run: the bridge session said:"
		echo "$out" >&2
		fails=$((fails + 1))
	fi
	t4=$(now)
	kubectl delete -k "$work/$level-$mode" --wait=true --timeout=60s >/dev/null
	log "$run: deleted in $(since "$t4") s"
done

if [ "$fails" -ne 0 ]; then
	log "FAIL: $fails"
	exit 1
fi
log "PASS in $(since "$t0") s"
