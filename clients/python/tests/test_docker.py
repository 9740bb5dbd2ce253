"""relayd_client.docker.DockerTrial against a stand-in docker CLI that runs
the real relayd on this machine: `run` starts relayd with the mounted token
file (after a moment, as a container's relayd makes its socket a moment
after docker run returns), `exec -i C relayd bridge` is relayd bridge on
that socket, `rm -f` kills it. The stand-in logs every argv, so the tests
see what DockerTrial asked docker to do."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Any

from relayd_client.docker import TOKEN_PATH, DockerTrial, DockerTrialError
from relayd_fixture import alive, kill_group_from_file, relayd_binary

FAKE = r'''#!PYTHON
import json, os, subprocess, sys, time
state = os.environ["FAKE_DOCKER_STATE"]
args = sys.argv[1:]
with open(os.path.join(state, "argv.log"), "a") as f:
    f.write(json.dumps(args) + "\n")
sock, pidf = os.path.join(state, "relayd.sock"), os.path.join(state, "relayd.pid")
if args[0] == "run":
    if os.environ.get("FAKE_DOCKER_BROKEN") or os.environ.get("FAKE_DOCKER_SILENT"):
        print("0123456789ab")
        sys.exit(0)  # a container whose relayd never comes up: it exited, or runs without relayd
    src = [a for a in args if a.startswith("type=bind,") and "%s" in a][0]
    source = dict(kv.split("=", 1) for kv in src.split(",") if "=" in kv)["source"]
    ws = os.path.join(state, "workspace")
    os.makedirs(ws, exist_ok=True)
    argv = [os.environ["FAKE_RELAYD"], "--token-file", source, "--workspace", ws, "--listen", "127.0.0.1:0",
            "--socket", sock, "--state-dir", os.path.join(state, "st"), "--term-grace", "300ms", "--teardown-timeout", "3s"]
    log = open(os.path.join(state, "relayd.log"), "ab")
    starter = "sleep 0.5; exec \"$@\""  # relayd's socket appears a moment after docker run returns
    p = subprocess.Popen(["/bin/sh", "-c", starter, "sh", *argv], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True)
    open(pidf, "w").write(str(p.pid))
    print("0123456789ab")
elif args[0] == "exec" and args[-1] == "bridge":
    os.execv(os.environ["FAKE_RELAYD"], [os.environ["FAKE_RELAYD"], "bridge", "--socket", sock])
elif args[0] == "inspect":
    if os.environ.get("FAKE_DOCKER_BROKEN"):
        print("exited 3")  # docker's words for a container whose main process exited 3
    else:
        print("running 0")
elif args[0] == "logs":
    print("relayd: the stand-in container's log")
elif args[0] == "rm":
    if os.path.exists(pidf):
        pid, written = int(open(pidf).read()), os.stat(pidf).st_mtime
        try:  # not our child: docker run's stand-in started it; only if it started before the pid file was written
            stat = open("/proc/" + str(pid) + "/stat", "rb").read()
            start = int(stat[stat.rfind(b")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")
            if time.clock_gettime(time.CLOCK_BOOTTIME) - start + 0.02 >= time.time() - written:
                os.killpg(pid, 15)
        except (OSError, ValueError):
            pass
        os.unlink(pidf)
''' % TOKEN_PATH


class DockerTrialTest(unittest.TestCase):
    def setUp(self) -> None:
        self.state = tempfile.mkdtemp(prefix="relayd-pytest-docker-")
        self.addCleanup(shutil.rmtree, self.state, True)
        self.docker = os.path.join(self.state, "docker")
        with open(self.docker, "w") as f:
            f.write(FAKE.replace("PYTHON", sys.executable, 1))
        os.chmod(self.docker, 0o755)
        env = {"FAKE_DOCKER_STATE": self.state, "FAKE_RELAYD": relayd_binary()}
        for k, v in env.items():
            old = os.environ.get(k)
            os.environ[k] = v
            self.addCleanup(lambda k=k, old=old: os.environ.__setitem__(k, old) if old is not None else os.environ.pop(k))
        self.addCleanup(self._kill_leftover)

    def _kill_leftover(self) -> None:
        pidf = os.path.join(self.state, "relayd.pid")
        kill_group_from_file(pidf)  # only the group that pid file names, not one that took its pid since

    def argvs(self) -> list:
        with open(os.path.join(self.state, "argv.log")) as f:
            return [json.loads(line) for line in f]

    def test_trial_runs_and_removes_everything(self) -> None:
        with DockerTrial("task:relayd", docker=self.docker, name="t1", run_args=["--network", "none"]) as t:
            token_dir = t._dir
            assert token_dir is not None
            self.assertEqual(stat.S_IMODE(os.stat(token_dir).st_mode), 0o700)
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(token_dir, "token")).st_mode), 0o600)
            t.upload_file("in.txt", b"2 3\n")
            r = t.execute("sh", ["-c", "read a b < in.txt; echo $((a + b)) > out.txt"], input="x\n", timeout_ms=10_000)
            self.assertEqual((r.exit_code, r.termination), (0, "exited"))
            self.assertTrue(t.verify(all=True, survivors="settle").quiescent)
            self.assertEqual(t.download_file("out.txt"), b"5\n")
            self.assertIs(t.client, t.client)
            token = t.token
            with open(os.path.join(self.state, "relayd.pid")) as f:
                pid = int(f.read())
        self.assertFalse(os.path.exists(token_dir))
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse(alive(pid), "docker rm left the container's relayd running")
        argvs = self.argvs()
        run = argvs[0]
        self.assertEqual(run[:5], ["run", "--detach", "--name", "t1", "--mount"])
        self.assertIn(f"target={TOKEN_PATH},readonly", run[5])
        self.assertEqual(run[-3:], ["--network", "none", "task:relayd"])
        self.assertEqual(argvs[-1], ["rm", "--force", "--volumes", "t1"])
        self.assertTrue(any(a == ["exec", "-i", "t1", "/usr/local/bin/relayd", "bridge"] for a in argvs))
        for a in argvs:
            self.assertNotIn(token, " ".join(a), "the token went on a command line")
        with self.assertRaises(RuntimeError):
            t.client

    def test_beside_starts_relayd_into_the_container(self) -> None:
        with DockerTrial("task:plain", docker=self.docker, name="t2", beside=True, entrypoint="sleep", command=["infinity"]) as t:
            t.ready()
        argvs = self.argvs()
        self.assertEqual(argvs[0][-4:], ["--entrypoint", "sleep", "task:plain", "infinity"])
        self.assertEqual(argvs[1], ["exec", "--detach", "t2", "/usr/local/bin/relayd", "--token-file", TOKEN_PATH,
                                    "--workspace", "/workspace"])

    def test_exited_container_is_said_at_once_and_still_cleans_up(self) -> None:
        os.environ["FAKE_DOCKER_BROKEN"] = "1"
        self.addCleanup(os.environ.pop, "FAKE_DOCKER_BROKEN")
        trial = DockerTrial("task:broken", docker=self.docker, name="t3", ready_timeout=30)
        start = time.monotonic()
        with self.assertRaises(DockerTrialError) as cm:
            with trial:
                self.fail("the with body ran without relayd")
        msg = str(cm.exception)
        self.assertLess(time.monotonic() - start, 20, "it waited for relayd in a container that had exited")
        self.assertIn("container t3 (image task:broken) exited with status 3", msg)
        self.assertNotIn("did not answer", msg)
        self.assertIn("the stand-in container's log", msg)
        self.assertEqual(self.argvs()[-1], ["rm", "--force", "--volumes", "t3"])

    def test_not_ready_is_a_clear_error_and_still_cleans_up(self) -> None:
        os.environ["FAKE_DOCKER_SILENT"] = "1"
        self.addCleanup(os.environ.pop, "FAKE_DOCKER_SILENT")
        trial = DockerTrial("task:silent", docker=self.docker, name="t4", ready_timeout=1)
        with self.assertRaises(DockerTrialError) as cm:
            with trial:
                self.fail("the with body ran without relayd")
        msg = str(cm.exception)
        self.assertIn("t4", msg)
        self.assertIn("did not answer ready", msg)
        self.assertIn("within 1 s (the container is running)", msg)
        self.assertIn("the stand-in container's log", msg)
        self.assertEqual(self.argvs()[-1], ["rm", "--force", "--volumes", "t4"])


@unittest.skipUnless(os.environ.get("RELAYD_TASK_IMAGE") and shutil.which("docker"),
                     "needs docker and RELAYD_TASK_IMAGE, an image without relayd (e2e/docker_trial_test.go sets it)")
class DockerTrialContainerTest(unittest.TestCase):
    """DockerTrial against the real docker CLI and an image without relayd,
    whose container exits: the error says so at once, with its exit status
    and the last lines of its log, and the container is removed."""

    def trial_error(self, **kwargs: Any) -> str:
        name = "relayd-pytest-exited-" + os.urandom(4).hex()
        self.addCleanup(subprocess.run, ["docker", "rm", "--force", name], capture_output=True, timeout=60)
        start = time.monotonic()
        with self.assertRaises(DockerTrialError) as cm:
            with DockerTrial(os.environ["RELAYD_TASK_IMAGE"], name=name, ready_timeout=30, **kwargs):
                self.fail("the with body ran without relayd")
        self.assertLess(time.monotonic() - start, 20, "it waited for relayd in a container that had exited")
        left = subprocess.run(["docker", "ps", "--all", "--quiet", "--filter", "name=^" + name + "$"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(left.stdout.strip(), "", "the container was not removed")
        msg = str(cm.exception)
        self.assertIn(f"container {name} (image {os.environ['RELAYD_TASK_IMAGE']}) exited with status", msg)
        self.assertNotIn("did not answer", msg)
        return msg

    def test_entrypoint_that_fails(self) -> None:
        msg = self.trial_error(entrypoint="sh", command=["-c", "echo first line; echo this image has no relayd >&2; exit 7"])
        self.assertIn("exited with status 7", msg)
        self.assertIn("first line", msg)
        self.assertIn("this image has no relayd", msg)

    def test_image_command_that_ends(self) -> None:
        # The image's own command (a shell with no stdin) ends at once, status 0.
        self.assertIn("exited with status 0", self.trial_error())


if __name__ == "__main__":
    unittest.main()
