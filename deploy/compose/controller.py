"""A controller standing in for the harness's: it listens on :7700, takes one
dial-out relayd, runs each argument with sh -c, then sends verify. It prints
each reply without its token, and exits 0 when verify says quiescent."""
import json
import socket
import sys

token = open("/run/secrets/token").read().strip()
server = socket.create_server(("", 7700))
server.settimeout(60)  # relayd retries --connect for 30 s by default
conn, _ = server.accept()
conn.settimeout(600)
stream = conn.makefile("rw", encoding="utf-8")


def receive():
    line = stream.readline()
    if not line:
        sys.exit("relayd closed the connection")
    reply = json.loads(line)
    reply.pop("token", None)
    print(json.dumps(reply), flush=True)
    return reply


def send(message):
    stream.write(json.dumps(dict(message, token=token)) + "\n")
    stream.flush()


receive()  # relayd's ready
for n, script in enumerate(sys.argv[1:], 1):
    send({"kind": "execute", "id": n, "command": "/bin/sh", "args": ["-c", script]})
    receive()
send({"kind": "verify", "id": 0})
sys.exit(0 if receive().get("quiescent") is True else 1)
