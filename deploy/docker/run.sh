# One trial: relayd as PID 1, the port published on the host's loopback only
# (a free port each trial), the token file mounted read-only, and a stop
# timeout longer than relayd's --teardown-timeout (10 s by default).
docker run --detach --name "$TRIAL" \
  --publish 127.0.0.1::7700 \
  --mount type=bind,source="$TOKEN_FILE",target=/run/relayd/token,readonly \
  --stop-timeout 15 \
  "$IMAGE"
docker port "$TRIAL" 7700/tcp
