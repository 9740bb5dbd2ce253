# Dial-out to a controller on the host, step 1: a network of the trial's own.
# Its gateway is the host's address on it: the controller listens there, on a
# port of its choice, not on 0.0.0.0. This prints the gateway.
docker network create "$TRIAL" >/dev/null
docker network inspect --format '{{(index .IPAM.Config 0).Gateway}}' "$TRIAL"
