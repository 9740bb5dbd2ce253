# The handshake through the published port with netcat, once relayd answers
# (Docker's proxy accepts a connection before relayd listens, then closes it).
T=$(cat "$TOKEN_FILE")
PORT=$(docker port "$TRIAL" 7700/tcp | cut -d: -f2)
printf '{"token":"%s","kind":"ready"}\n' "$T" | nc -q 1 127.0.0.1 "$PORT"
