#!/usr/bin/env python3
"""An evaluation harness on relayd_client, the way a benchmark runner uses it.

Start one task container with relayd as its entrypoint
(relayd_client.docker.DockerTrial: token file mounted read-only, relayd
reached by docker exec -i relayd bridge) and mark its workspace. For each
trial: run an "agent" with a deadline, end the agent's time with verify,
list the files it changed, run the verifier through relayd, print one line
with what a harness records, and recycle the container for the next trial
(what the agent left settled, the workspace put back as marked) instead of
starting a new one. The container is removed at the end.

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
# The mark of the task's workspace, taken once the container is up.
MARK = "task"
# The verifier: the answer, and the service still running when one was started.
VERIFIER = 'test "$(cat answer.txt 2>/dev/null)" = 42 && { [ ! -f service.pid ] || kill -0 "$(cat service.pid)"; }'


def changed(relayd: DockerTrial, workspace: str) -> str:
    """The files the agent changed, as A (added), M (modified), D (deleted) and the name."""
    entries = relayd.changes(MARK).all()
    return ",".join(f"{e.change[0].upper()}:{os.path.relpath(e.path, workspace)}" for e in entries) or "-"


def run_trial(relayd: DockerTrial, workspace: str, agent: str, deadline_ms: int) -> dict:
    run = relayd.execute("sh", ["-c", agent], environment={"PYTHONPATH": "/opt/relayd-client"},
                         result_token=secrets.token_hex(16), timeout_ms=deadline_ms)
    verified = relayd.verify()  # the agent's time is over
    files = changed(relayd, workspace)
    check = relayd.execute("sh", ["-c", VERIFIER], timeout_ms=30_000)
    recycled = relayd.recycle(MARK)  # its leftovers settled, the workspace as marked: ready for the next trial
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
        "changed": files,
        "recycled": "yes" if recycled.pristine else "no",
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
    mount = f"type=bind,source={os.path.abspath(CLIENT_SRC)},target=/opt/relayd-client,readonly"
    name = a.name_prefix + "recycled-" + secrets.token_hex(3)
    with DockerTrial(a.image, name=name, run_args=["--mount", mount, "--stop-timeout", "15"]) as relayd:
        workspace = relayd.ready().cwd
        relayd.mark(MARK, [workspace], keep=[workspace])  # the workspace as the task put it
        for agent in a.agents.split(","):
            try:
                rec = run_trial(relayd, workspace, AGENTS[agent], int(a.deadline * 1000))
            except (RelaydError, OSError, subprocess.SubprocessError) as e:
                rec, failed = {"outcome": "error", "error": repr(e)}, failed + 1
            print(f"trial={agent} " + " ".join(f"{k}={v}" for k, v in rec.items()), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
