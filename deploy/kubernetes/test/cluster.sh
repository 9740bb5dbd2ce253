#!/usr/bin/env bash
# cluster.sh up|down|check|env: a single-node Kubernetes v1.34.2 cluster on
# this machine, from the Go module proxy and Debian's packages only
# (build.sh), in directories of its own, for make k8s-test.
#
#   up     build what is missing (build.sh, cached in CACHE), then start
#          etcd, a containerd of its own (own config, root, state, socket:
#          Docker's containerd has CRI off and is left alone), the pause
#          image imported into it, kube-apiserver, kube-controller-manager,
#          kube-scheduler, the kubelet and kube-proxy; wait for the node to
#          be Ready. Refuses when a cluster (this one or another) seems up.
#   down   stop and remove everything up made: processes, containers,
#          mounts, iptables chains (KUBE-*, CNI-*), the CNI bridge, the
#          kubepods cgroups, the state directory and the fixed paths the
#          kubelet writes that were not there before up. Safe to repeat.
#   check  exit 1, listing them, if any of those is left.
#   env    print the KUBECONFIG=... line for a shell.
#
# Root only. STATE (default /var/tmp/relayd-k8s) holds the running cluster,
# CACHE (default ~/.cache/relayd-k8s) the binaries and build cache, kept.
# Facts of this host it copes with (issue 44): cgroup v1 (cgroupfs,
# failCgroupV1 false), no negative oom_score_adj (restrict_oom_score_adj,
# kubelet oomScoreAdj 0), Docker's FORWARD policy DROP (the CNI firewall
# plugin), no cluster DNS (Services by cluster IP), no image pulls
# (imagePullPolicy IfNotPresent, a registry mirror that refuses). The
# kubelet runs in a mount namespace of its own where /proc/sys shows the
# kernel settings it insists on (overcommit_memory, panic, ...), so that
# with protectKernelDefaults it neither rewrites the host's nor fails;
# STATE is a shared mount, so the volumes it mounts there reach containerd.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CACHE=${CACHE:-$HOME/.cache/relayd-k8s}
STATE=${STATE:-/var/tmp/relayd-k8s}
export CACHE STATE
NODE=relayd-k8s
BRIDGE=rk8s0
POD_CIDR=10.235.0.0/24
SVC_CIDR=10.234.0.0/24
SVC_API_IP=10.234.0.1
ETCD_PORT=23790
ETCD_PEER_PORT=23800
API_PORT=16443
KUBELET_PORT=10350
PAUSE_IMAGE=relayd.local/pause:3.10.1
# The paths the kubelet writes whatever its flags say; up notes which were
# absent (LEDGER), down removes those.
FIXED_PATHS="/var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni"
LEDGER=$CACHE/ledger
CGROUP_ROOT=/sys/fs/cgroup

log() { echo "cluster.sh: $*" >&2; }
die() { log "$*"; exit 1; }
bin() { echo "$CACHE/bin/$1"; }
deb() { echo "$CACHE/root/$1"; }
kc() { "$(bin kubectl)" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }
ctr_() { "$(deb usr/bin/ctr)" --address "$STATE/containerd/containerd.sock" --namespace k8s.io "$@"; }

node_ip() { ip -4 route get 1.1.1.1 | sed -n 's/.* src \([0-9.]*\).*/\1/p'; }

# start NAME CMD...: in the background, its own session, logs and pid in STATE.
start() {
	local name=$1
	shift
	setsid nice -n 10 "$@" >"$STATE/log/$name.log" 2>&1 </dev/null &
	echo $! >"$STATE/pids/$name"
}

# wait_for WHAT SECONDS CMD...: until CMD succeeds.
wait_for() {
	local what=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 5; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.2
	done
	die "$what not up after ${secs}s (logs in $STATE/log)"
}

certs() {
	local ip=$1 d=$STATE/pki
	mkdir -p "$d"
	cd "$d"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=relayd-k8s-ca 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver 2>/dev/null
	printf 'subjectAltName=IP:%s,IP:127.0.0.1,IP:%s,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:localhost\nextendedKeyUsage=serverAuth\n' "$ip" "$SVC_API_IP" >apiserver.ext
	openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 2 -extfile apiserver.ext 2>/dev/null
	# One client identity for every component and the tests: system:masters.
	openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=admin" 2>/dev/null
	printf 'extendedKeyUsage=clientAuth\n' >admin.ext
	openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt -days 2 -extfile admin.ext 2>/dev/null
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	cd - >/dev/null
	cat >"$STATE/admin.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $NODE
  cluster:
    server: https://$ip:$API_PORT
    certificate-authority: $d/ca.crt
users:
- name: admin
  user:
    client-certificate: $d/admin.crt
    client-key: $d/admin.key
contexts:
- name: $NODE
  context: {cluster: $NODE, user: admin}
current-context: $NODE
EOF
}

containerd_config() {
	local c=$STATE/containerd
	mkdir -p "$c/root" "$c/state" "$c/certs.d/_default" "$STATE/cni/net.d" "$STATE/cni/ipam"
	# Any pull goes to a port that refuses: images come from ctr import.
	printf 'server = "http://127.0.0.1:9"\n[host."http://127.0.0.1:9"]\n  capabilities = ["pull", "resolve"]\n' >"$c/certs.d/_default/hosts.toml"
	cat >"$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = "$c/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(deb usr/bin/runc)"
        Root = "$STATE/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$(deb usr/lib/cni)"
    conf_dir = "$STATE/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$c/certs.d"
EOF
	# The firewall plugin accepts the Pods' traffic in FORWARD, whose
	# policy Docker set to DROP.
	cat >"$STATE/cni/net.d/10-relayd-k8s.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "relayd-k8s",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$STATE/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall"}
  ]
}
EOF
}

# The pause image: its static binary (build.sh) alone, FROM nothing, made
# without Docker (mkimage.sh) and imported into our containerd.
pause_image() {
	local ctx=$STATE/pause-ctx
	mkdir -p "$ctx/rootfs"
	cp "$(bin pause)" "$ctx/rootfs/pause"
	"$here/mkimage.sh" "$PAUSE_IMAGE" "$ctx/rootfs" "$ctx/image.tar" '{"Entrypoint":["/pause"],"User":"65535:65535"}'
	ctr_ images import "$ctx/image.tar" >/dev/null
	rm -rf "$ctx"
}

kubelet_config() {
	local ip=$1
	cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10348
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$STATE/containerd/containerd.sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
enforceNodeAllocatable: []
protectKernelDefaults: true
oomScoreAdj: 0
podLogsDir: $STATE/pod-logs
volumePluginDir: $STATE/volume-plugins
staticPodPath: ""
maxPods: 250
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
registerNode: true
serializeImagePulls: false
EOF
}

kube_proxy_config() {
	cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/admin.kubeconfig}
hostnameOverride: $NODE
mode: iptables
clusterCIDR: $POD_CIDR
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10346
metricsBindAddress: 127.0.0.1:10349
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

# The kernel settings the kubelet wants to see, shown to it alone.
kubelet_cmd() {
	local ip=$1 s=$STATE/sysctl
	mkdir -p "$s"
	local binds=""
	for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
		local k=${kv%%=*} v=${kv#*=}
		echo "$v" >"$s/${k//\//.}"
		binds="$binds mount --bind $s/${k//\//.} /proc/sys/$k &&"
	done
	echo "unshare --mount --propagation unchanged -- sh -c 'mount --make-rprivate /proc && $binds exec \"\$0\" \"\$@\"' $(bin kubelet) --config=$STATE/kubelet.yaml --kubeconfig=$STATE/admin.kubeconfig --root-dir=$STATE/kubelet --cert-dir=$STATE/kubelet-pki --hostname-override=$NODE --node-ip=$ip"
}

up() {
	[ "$(id -u)" = 0 ] || die "needs root"
	[ ! -e "$STATE" ] || die "$STATE exists: a cluster is up, or cluster.sh down did not finish (run it)"
	leftovers >/dev/null && die "something of a cluster is left (cluster.sh check lists it): cluster.sh down first"
	local t0 ip
	t0=$(date +%s.%N)
	"$here/build.sh"
	local t1
	t1=$(date +%s.%N)
	ip=$(node_ip)
	[ -n "$ip" ] || die "no node IP (ip route get 1.1.1.1)"
	mkdir -p "$LEDGER"
	: >"$LEDGER/absent"
	for p in $FIXED_PATHS; do [ -e "$p" ] || echo "$p" >>"$LEDGER/absent"; done
	# containerd 1.6 puts every shim's socket in /run/containerd/s, Docker's
	# too: down removes the new ones nothing listens on any more.
	ls /run/containerd/s 2>/dev/null >"$LEDGER/shim-sockets" || true
	[ -e /run/containerd ] || : >"$LEDGER/run-containerd-absent"
	mkdir -p "$STATE"/{log,pids,pod-logs,volume-plugins,kubelet,kubelet-pki}
	# Shared, so that what the kubelet mounts in its namespace reaches the host's.
	mount --bind "$STATE" "$STATE"
	mount --make-rshared "$STATE"
	export PATH="$CACHE/root/usr/bin:$CACHE/root/usr/sbin:$CACHE/bin:$PATH"
	certs "$ip"
	containerd_config
	start etcd "$(deb usr/bin/etcd)" --name "$NODE" --data-dir "$STATE/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "$NODE=http://127.0.0.1:$ETCD_PEER_PORT"
	start containerd "$(deb usr/bin/containerd)" --config "$STATE/containerd/config.toml"
	wait_for containerd 30 ctr_ version
	pause_image
	wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"
	local p=$STATE/pki
	start kube-apiserver "$(bin kube-apiserver)" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address "$ip" --advertise-address "$ip" --secure-port "$API_PORT" \
		--tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" --client-ca-file "$p/ca.crt" \
		--anonymous-auth=false --authorization-mode RBAC \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$p/sa.pub" \
		--service-account-signing-key-file "$p/sa.key" --service-cluster-ip-range "$SVC_CIDR" \
		--kubelet-client-certificate "$p/admin.crt" --kubelet-client-key "$p/admin.key" \
		--kubelet-preferred-address-types InternalIP --profiling=false
	wait_for kube-apiserver 90 kc get --raw /readyz
	start kube-controller-manager "$(bin kube-controller-manager)" --kubeconfig "$STATE/admin.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port 10357 --leader-elect=false \
		--service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
		--service-cluster-ip-range "$SVC_CIDR" --use-service-account-credentials=false --profiling=false
	start kube-scheduler "$(bin kube-scheduler)" --kubeconfig "$STATE/admin.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port 10359 --leader-elect=false --profiling=false
	kubelet_config "$ip"
	kube_proxy_config
	eval "start kubelet $(kubelet_cmd "$ip")"
	start kube-proxy "$(bin kube-proxy)" --config "$STATE/kube-proxy.yaml"
	wait_for "node $NODE" 120 kc wait --for=condition=Ready "node/$NODE" --timeout=1s
	wait_for "the default ServiceAccount" 60 kc get serviceaccount default -n default
	local t2
	t2=$(date +%s.%N)
	log "up: build/check $(awk "BEGIN {printf \"%.1f\", $t1 - $t0}") s, cluster $(awk "BEGIN {printf \"%.1f\", $t2 - $t1}") s (node $NODE at $ip; KUBECONFIG=$STATE/admin.kubeconfig)"
}

# Our processes, found through /proc: those running a binary of CACHE
# (the components, containerd's shims) or whose command line names STATE.
# Not a build writing into CACHE (go's binary is not CACHE's), nor this script.
our_pids() {
	{
		find /proc -mindepth 2 -maxdepth 2 -name exe \( -lname "$CACHE/bin/*" -o -lname "$CACHE/root/*" \) -printf '%h\n' 2>/dev/null
		grep -l -a -F -- "$STATE/" /proc/[0-9]*/cmdline 2>/dev/null | while read -r f; do
			case $(readlink "${f%/cmdline}/exe" 2>/dev/null) in */bash | */sh | */dash | "") ;; *) echo "${f%/cmdline}" ;; esac
		done
	} | sed 's|^/proc/||' | grep -vx -e "$$" -e "$BASHPID" | sort -u || true
}

# Processes in the kubepods cgroups: the containers'.
pod_pids() {
	local c
	for c in "$CGROUP_ROOT"/*/kubepods; do
		[ -d "$c" ] && find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null
	done
	true
}

stop_pid() { # stop_pid PID SECONDS: TERM, then KILL
	local pid=$1 secs=$2 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < secs * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

ipt_sweep() { # remove every KUBE-* and CNI-* chain and the rules that jump to them
	local ipt table chain
	for ipt in iptables ip6tables; do
		for table in filter nat mangle raw; do
			"$ipt" -t "$table" -S 2>/dev/null | grep -E '^-A [A-Z-]+ .*-j (KUBE|CNI)-' | grep -vE '^-A (KUBE|CNI)-' |
				while read -r _ rest; do eval "\"\$ipt\" -t \"\$table\" -D $rest" 2>/dev/null || true; done || true
			for chain in $("$ipt" -t "$table" -S 2>/dev/null | sed -n 's/^-N \(\(KUBE\|CNI\)-[^ ]*\).*/\1/p'); do
				"$ipt" -t "$table" -F "$chain" 2>/dev/null || true
			done
			for chain in $("$ipt" -t "$table" -S 2>/dev/null | sed -n 's/^-N \(\(KUBE\|CNI\)-[^ ]*\).*/\1/p'); do
				"$ipt" -t "$table" -X "$chain" 2>/dev/null || true
			done
		done
	done
}

down() {
	[ "$(id -u)" = 0 ] || die "needs root"
	local t0 pid
	t0=$(date +%s.%N)
	if [ -e "$STATE/admin.kubeconfig" ] && kc get --raw /readyz >/dev/null 2>&1; then
		# The Pods first, so that relayd and the rest end as on any node.
		kc delete namespaces -l relayd-k8s-test=1 --wait=false >/dev/null 2>&1 || true
		kc delete pods --all -A --grace-period=5 --timeout=60s >/dev/null 2>&1 || true
	fi
	for name in kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do
		[ -f "$STATE/pids/$name" ] && stop_pid "$(cat "$STATE/pids/$name")" 10
	done
	if [ -x "$(bin kube-proxy)" ]; then "$(bin kube-proxy)" --cleanup >/dev/null 2>&1 || true; fi
	# The containers, through our containerd while it runs.
	if [ -S "$STATE/containerd/containerd.sock" ]; then
		for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s KILL "$t" >/dev/null 2>&1 || true; done
		sleep 1
		for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$t" >/dev/null 2>&1 || true; done
		for c in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$c" >/dev/null 2>&1 || true; done
	fi
	for pid in $(pod_pids); do kill -KILL "$pid" 2>/dev/null || true; done
	[ -f "$STATE/pids/containerd" ] && stop_pid "$(cat "$STATE/pids/containerd")" 10
	for pid in $(our_pids); do stop_pid "$pid" 5; done
	# Mounts under STATE, deepest first (the kubelet's volumes, netns, the shared bind).
	local m
	for m in $(awk -v s="$STATE" '$5 == s || index($5, s "/") == 1 {print $5}' /proc/self/mountinfo | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
	while awk -v s="$STATE" '$5 == s {f=1} END {exit !f}' /proc/self/mountinfo; do umount -l "$STATE" || break; done
	ip link del "$BRIDGE" 2>/dev/null || true
	for s in $(dead_shim_sockets); do rm -f "/run/containerd/s/$s"; done
	rm -f "$LEDGER/shim-sockets"
	# Made by our containerd; kept while another's shims live in it.
	if [ -f "$LEDGER/run-containerd-absent" ]; then
		rmdir /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd/fifo /run/containerd/s /run/containerd 2>/dev/null || true
		[ -e /run/containerd ] || rm -f "$LEDGER/run-containerd-absent"
	fi
	ipt_sweep
	# The kubepods cgroups, deepest first.
	for c in "$CGROUP_ROOT"/*/kubepods; do
		[ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
	if [ -f "$LEDGER/absent" ]; then
		while read -r p; do [ -n "$p" ] && rm -rf -- "$p"; done <"$LEDGER/absent"
		rm -f "$LEDGER/absent"
	fi
	rm -rf -- "$STATE"
	log "down in $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $t0}") s"
	check
}

# dead_shim_sockets: the sockets of /run/containerd/s made since up that
# no process listens on.
dead_shim_sockets() {
	[ -f "$LEDGER/shim-sockets" ] && [ -d /run/containerd/s ] || return 0
	local live
	live=$(ss -xlnH 2>/dev/null | awk '{print $5}' | sed -n 's|^/run/containerd/s/||p')
	ls /run/containerd/s | grep -vxF -f "$LEDGER/shim-sockets" | grep -vxF -e "${live:-/}" || true
}

# leftovers prints what a cluster left, one line each; false when nothing.
leftovers() {
	local found=1 pid c ipt table
	for pid in $(our_pids); do echo "process $pid: $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null)"; found=0; done
	if awk -v s="$STATE" '$5 == s || index($5, s "/") == 1' /proc/self/mountinfo | grep -q .; then
		echo "mounts under $STATE"; found=0
	fi
	for ipt in iptables ip6tables; do
		for table in filter nat mangle raw; do
			c=$("$ipt" -t "$table" -S 2>/dev/null | grep -cE '^-N (KUBE|CNI)-|-j (KUBE|CNI)-' || true)
			[ "$c" = 0 ] || { echo "$ipt -t $table: $c KUBE-/CNI- chains or rules"; found=0; }
		done
	done
	ip link show "$BRIDGE" >/dev/null 2>&1 && { echo "link $BRIDGE"; found=0; }
	for s in $(dead_shim_sockets); do echo "/run/containerd/s/$s (a dead shim's)"; found=0; done
	if [ -f "$LEDGER/run-containerd-absent" ] && [ -e /run/containerd ] && ! ss -xlnH | grep -q ' /run/containerd/'; then
		echo "/run/containerd (absent before up)"; found=0
	fi
	for c in "$CGROUP_ROOT"/*/kubepods; do [ -d "$c" ] && { echo "cgroup $c"; found=0; }; done
	[ -e "$STATE" ] && { echo "$STATE"; found=0; }
	if [ -f "$LEDGER/absent" ]; then
		while read -r p; do [ -e "$p" ] && { echo "$p (absent before up)"; found=0; }; done <"$LEDGER/absent"
	fi
	return $found
}

check() {
	if leftovers; then
		die "left behind (above)"
	fi
	log "check: nothing left"
}

case ${1:-} in
up) up ;;
down) down ;;
check) check ;;
env) echo "KUBECONFIG=$STATE/admin.kubeconfig" ;;
*) echo "usage: cluster.sh up|down|check|env" >&2; exit 2 ;;
esac
