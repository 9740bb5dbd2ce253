#!/bin/sh
# One trial's kustomize overlay, in a directory of its own: DIR/token (a copy
# of TOKEN_FILE, 0600) and DIR/kustomization.yaml over the baseline Pod (or
# POD_SECURITY=restricted), every name prefixed with TRIAL- so that trials
# share a namespace without colliding, the token a Secret of its own.
#
#   TRIAL=t42 NAMESPACE=evals TASK_IMAGE=registry.example/task:1 \
#     INIT_IMAGE=relayd-init:0.1.0 TOKEN_FILE=/path/to/token \
#     deploy/kubernetes/trial.sh /tmp/trials/t42
#   kubectl apply -k /tmp/trials/t42
#   kubectl exec -i -n evals t42-relayd-trial -c task -- /opt/relayd/relayd bridge
#   kubectl delete -k /tmp/trials/t42 && rm -r /tmp/trials/t42
#
# MODE says how the controller reaches relayd:
#   exec      (the default) relayd listens; kubectl exec -i ... relayd bridge
#   dial-in   the same, and a Service TRIAL-relayd (../dial-in) selects this
#             trial's Pod alone: the controller dials its cluster IP:7700
#   dial-out  relayd dials CONNECT (HOST:PORT, the controller's Service:
#             its cluster IP where the cluster has no DNS, as
#             networkpolicy.yaml lets no DNS through), serves one session
#             and exits 0 after verify: the Pod ends Succeeded. No probe,
#             no port: nothing listens.
#   MODE=dial-out CONNECT=$(kubectl get svc -n relayd-controller \
#     relayd-controller -o jsonpath='{.spec.clusterIP}'):7700 ... trial.sh DIR
#
# In exec and dial-in mode the Pod runs until it is deleted (relayd settles
# what runs on SIGTERM).
# DIR must not exist; it is made 0700. kustomize reads no file outside an
# overlay, hence the token's copy; DIR may be anywhere (it names the base
# by a relative path, which kustomize requires).
set -eu
export LC_ALL=C # the character classes below are ASCII's
usage() { echo "trial.sh: $*" >&2; exit 2; }
[ $# -eq 1 ] || usage "want one argument, the overlay's directory (TRIAL=... NAMESPACE=... TASK_IMAGE=... INIT_IMAGE=... TOKEN_FILE=... trial.sh DIR)"
dir=$1
need() { eval "[ -n \"\${$1:-}\" ]" || usage "$1 is not set: $2"; }
need TRIAL "the trial's name, the prefix of every object's name"
need NAMESPACE "the namespace the trial runs in"
need TASK_IMAGE "the task's image"
need INIT_IMAGE "the init image make k8s-image built"
need TOKEN_FILE "the file holding the trial's token"
pod_security=${POD_SECURITY:-baseline}
case $pod_security in baseline|restricted) ;; *) usage "POD_SECURITY=$pod_security: want baseline or restricted" ;; esac
mode=${MODE:-exec}
case $mode in
exec|dial-in) [ -z "${CONNECT:-}" ] || usage "CONNECT is for MODE=dial-out, not MODE=$mode" ;;
dial-out)
	need CONNECT "the controller's HOST:PORT, which relayd dials (MODE=dial-out)"
	# HOST:PORT or [IPV6]:PORT, nothing else (it goes into YAML).
	case $CONNECT in
	*[!A-Za-z0-9.:\[\]-]*|:*|*:) usage "CONNECT=$CONNECT: want HOST:PORT" ;;
	*:*) case ${CONNECT##*:} in *[!0-9]*) usage "CONNECT=$CONNECT: want HOST:PORT" ;; esac ;;
	*) usage "CONNECT=$CONNECT: want HOST:PORT" ;;
	esac ;;
*) usage "MODE=$mode: want exec, dial-in or dial-out" ;;
esac

# A DNS label, short enough that TRIAL-relayd-token-HASH stays one.
label() {
  case $2 in ''|*[!a-z0-9-]*|-*|*-) usage "$1=$2: want lower-case letters, digits and '-' (a DNS label)" ;; esac
  [ ${#2} -le "$3" ] || usage "$1=$2: want at most $3 characters"
}
label TRIAL "$TRIAL" 40
# The Service's name, TRIAL-relayd, must start with a letter (RFC 1035).
case $mode:$TRIAL in dial-in:[!a-z]*) usage "TRIAL=$TRIAL: want a name that starts with a letter (MODE=dial-in names a Service after it)" ;; esac
label NAMESPACE "$NAMESPACE" 63
# An image reference as kustomize's images: wants it: newName, then the
# digest or else the tag (a colon after the last slash).
image() {
  case $2 in ''|[!A-Za-z0-9]*|*[!A-Za-z0-9._/:@+-]*) usage "$1=$2: not an image reference" ;; esac
  ref=$2 tag= digest=
  case $ref in *@*) digest=${ref#*@} ref=${ref%%@*} ;; esac
  case ${ref##*/} in *:*) tag=${ref##*:} ref=${ref%:*} ;; esac
  printf '    newName: "%s"\n' "$ref"
  if [ -n "$digest" ]; then printf '    digest: "%s"\n' "$digest"; elif [ -n "$tag" ]; then printf '    newTag: "%s"\n' "$tag"; fi
}
task=$(image TASK_IMAGE "$TASK_IMAGE")
init=$(image INIT_IMAGE "$INIT_IMAGE")
[ -f "$TOKEN_FILE" ] || usage "TOKEN_FILE=$TOKEN_FILE: no such file"
[ ! -e "$dir" ] || usage "$dir exists: give each trial a new directory"

base=$(cd "$(dirname "$0")/$pod_security" && pwd)
mkdir -p -- "$(dirname -- "$dir")"
mkdir -m 0700 -- "$dir" # fails if another trial.sh made it since the check above
(umask 077 && cp -- "$TOKEN_FILE" "$dir/token")
cat > "$dir/kustomization.yaml" <<YAML
# Trial $TRIAL (deploy/kubernetes/trial.sh): kubectl apply -k this directory.
resources:
  - $(realpath --relative-to="$dir" "$base")
namespace: $NAMESPACE
namePrefix: $TRIAL-
images:
  - name: task-image
$task
  - name: relayd-init
$init
# The trial's own label, also on the selector of a Service (dial-in).
labels:
  - pairs:
      app.kubernetes.io/instance: $TRIAL
    includeSelectors: true
secretGenerator:
  - name: relayd-token
    files:
      - token
YAML
case $mode in
dial-in)
	cat >> "$dir/kustomization.yaml" <<YAML
components:
  - $(realpath --relative-to="$dir" "$(dirname "$base")/dial-in")
YAML
	;;
dial-out)
	# Both bases' args start with --listen :7700 (the test op checks it).
	cat >> "$dir/kustomization.yaml" <<YAML
patches:
  - target:
      kind: Pod
    patch: |-
      - op: test
        path: /spec/containers/0/args/0
        value: --listen
      - op: replace
        path: /spec/containers/0/args/0
        value: --connect
      - op: replace
        path: /spec/containers/0/args/1
        value: "$CONNECT"
      - op: remove
        path: /spec/containers/0/readinessProbe
      - op: remove
        path: /spec/containers/0/ports
YAML
	;;
esac
