# Dial-out, step 2: relayd (the image's entrypoint) dials the controller at
# GATEWAY:PORT, which host.docker.internal is made to name, serves one
# connection and exits after verify, and the container with it.
docker run --detach --name "$TRIAL" --network "$TRIAL" \
  --add-host=host.docker.internal:"$GATEWAY" \
  --mount type=bind,source="$TOKEN_FILE",target=/run/relayd/token,readonly \
  --stop-timeout 15 \
  "$IMAGE" --connect host.docker.internal:"$PORT" --peer-timeout 30s
