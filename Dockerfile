# relayd in an image that holds one static binary, /relayd.
#
#   docker build -t relayd:0.1.0 --build-arg VERSION=0.1.0 .
#
# Put it into an evaluation image with:
#
#   COPY --from=relayd:0.1.0 /relayd /usr/local/bin/relayd

# The Go release of go.mod's go line (go 1.26.x).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=0.1.0
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/relayd ./cmd/relayd

FROM scratch
COPY --from=build /out/relayd /relayd
ENTRYPOINT ["/relayd"]
