#!/usr/bin/env python3
"""An evaluation harness on relayd_client, the way a benchmark runner uses it.

For each trial: start a task container with relayd as its entrypoint
(relayd_client.docker.DockerTrial: token file mounted read-only, relayd
reached by docker exec -i relayd bridge), run an "agent" with a deadline,
end the agent's time with verify, run the verifier through relayd, print
one line with what a harness records, and remove the container.

    python3 examples/harness.py --image your-task-image:relayd

The image is a task image with relayd added by deploy/docker/Dockerfile
(docs/deploy.md, "Putting relayd into an eval container"). The
agents are small shell and Python programs standing in for agent CLIs; a
Python agent hands back its result with relayd_client.write_result (the
client's source is mounted into the container read-only for that).
"""

import argparse
import os
import secrets
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_SRC = os.path.join(HERE, "..", "clients", "python", "src")
sys.path.insert(0, CLIENT_SRC)  # without pip install relayd-client

from relayd_client import RelaydError  # noqa: E402
from relayd_client.docker import DockerTrial  # noqa: E402

RESULT = "python3 -c 'from relayd_client import write_result; write_result({\"answer\": 42})'"
AGENTS = {
    # Solves the task and hands back a result.
    "solver": f"echo 42 > answer.txt; {RESULT}",
    # Starts the service the task asks for, solves it, exits: the service must survive.
    "service": f"sleep 600 </dev/null >/dev/null 2>&1 & echo $! > service.pid; echo 42 > answer.txt; {RESULT}",
    # Gets it wrong.
    "wrong": "echo 41 > answer.txt; echo 'I think it is 41'; exit 1",
    # Never finishes: the deadline ends it, and relayd settles everything it started.
    "slowpoke": "setsid sleep 600 & sleep 600",
}
# The verifier: the answer, and the service still running when one was started.
VERIFIER = 'test "$(cat answer.txt 2>/dev/null)" = 42 && { [ ! -f service.pid ] || kill -0 "$(cat service.pid)"; }'


def run_trial(image: str, name: str, agent: str, deadline_ms: int) -> dict:
    mount = f"type=bind,source={os.path.abspath(CLIENT_SRC)},target=/opt/relayd-client,readonly"
    with DockerTrial(image, name=name, run_args=["--mount", mount, "--stop-timeout", "15"]) as relayd:
        run = relayd.execute("sh", ["-c", agent], environment={"PYTHONPATH": "/opt/relayd-client"},
                             result_token=secrets.token_hex(16), timeout_ms=deadline_ms)
        verified = relayd.verify()  # the agent's time is over
        check = relayd.execute("sh", ["-c", VERIFIER], timeout_ms=30_000)
    if not (run.environment_trusted and verified.quiescent and check.environment_trusted):
        outcome = "discarded"  # settling was not confirmed: the environment cannot be scored
    elif check.exit_code == 0:
        outcome = "passed"
    else:
        outcome = "agent_timeout" if run.timed_out else "failed"
    return {
        "outcome": outcome,
        "agent": f"{run.termination}/{run.exit_code}",
        "settlement": run.settlement,
        "survivors": len(verified.survivors),
        "verifier": check.exit_code,
        "seconds": round(run.duration or 0, 1),
        "diagnostic": run.diagnostic.category,
        # The agent's handed-back result (a JSON text here), last: it may hold spaces.
        "result": run.stdout if run.diagnostic.category in ("none", "unstructured-output") else "-",
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image", required=True, help="task image with relayd as its entrypoint")
    p.add_argument("--agents", default=",".join(AGENTS), help="comma-separated agents to run, one trial each")
    p.add_argument("--deadline", type=float, default=5.0, help="the agent's time, in seconds")
    p.add_argument("--name-prefix", default="relayd-example-", help="container names start with this")
    a = p.parse_args()
    failed = 0
    for agent in a.agents.split(","):
        name = a.name_prefix + agent + "-" + secrets.token_hex(3)
        try:
            rec = run_trial(a.image, name, AGENTS[agent], int(a.deadline * 1000))
        except (RelaydError, OSError, subprocess.SubprocessError) as e:
            rec, failed = {"outcome": "error", "error": repr(e)}, failed + 1
        print(f"trial={agent} " + " ".join(f"{k}={v}" for k, v in rec.items()), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
