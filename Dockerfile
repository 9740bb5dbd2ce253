# relayd in an image that holds one static binary, /relayd, and nothing else.
# It takes the binary `make build` made (CGO_ENABLED=0, static), so it builds
# without a registry: `make image` runs
#
#   make build && docker build -t relayd:dev .
#
# deploy/docker/Dockerfile puts it into a task image.
FROM scratch
COPY bin/relayd /relayd
ENTRYPOINT ["/relayd"]
