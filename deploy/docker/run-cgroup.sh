# One trial with the cgroup mechanism: run.sh plus a cgroup v2 directory made
# for the trial on the host (CGROUP, e.g. /sys/fs/cgroup/unified/trial-1),
# bind-mounted read-write where relayd looks for cgroup2.
mkdir "$CGROUP"
docker run --detach --name "$TRIAL" \
  --publish 127.0.0.1::7700 \
  --mount type=bind,source="$TOKEN_FILE",target=/run/relayd/token,readonly \
  --mount type=bind,source="$CGROUP",target=/sys/fs/cgroup/unified \
  --stop-timeout 15 \
  "$IMAGE"
docker port "$TRIAL" 7700/tcp
