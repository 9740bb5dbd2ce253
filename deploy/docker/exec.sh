# relayd beside the task: the task container keeps its own entrypoint (here
# sleep infinity stands for it) and relayd is started into it with docker
# exec --detach. The token file is mounted when the container is created.
docker run --detach --name "$TRIAL" \
  --publish 127.0.0.1::7700 \
  --mount type=bind,source="$TOKEN_FILE",target=/run/relayd/token,readonly \
  --entrypoint sleep \
  "$IMAGE" infinity
docker exec --detach "$TRIAL" /usr/local/bin/relayd --token-file /run/relayd/token --workspace /workspace
docker port "$TRIAL" 7700/tcp
