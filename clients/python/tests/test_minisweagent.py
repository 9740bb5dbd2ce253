"""relayd_client.minisweagent against a real relayd, loaded the way
mini-swe-agent loads an environment (its environment_class import path),
with a stand-in for mini-swe-agent's exceptions and loader written here
(tests/stand_ins; mini-swe-agent cannot be installed on this project's
machines). relayd is reached through ``relayd bridge --socket``, the exec
channel of a real deployment minus the container.

DockerMiniSweAgent runs the timeout test in a container (``docker exec -i
C relayd bridge``) when RELAYD_MINISWEAGENT_CONTAINER names it and
RELAYD_TOKEN_FILE holds its token (e2e TestDockerMiniSweAgent), and is
skipped otherwise."""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import time
import unittest
from typing import Any, Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))

from minisweagent.environments import get_environment  # noqa: E402  (the stand-in)
from minisweagent.exceptions import Submitted  # noqa: E402  (the stand-in)
from relayd_fixture import REPO, Relayd, kill_group_from_file, relayd_binary  # noqa: E402

from relayd_client import minisweagent as rm  # noqa: E402

CLASS = "relayd_client.minisweagent.RelaydEnvironment"


def marker(what: str) -> str:
    return f"{what}_{secrets.token_hex(8)}"


class Behaviour:
    """What every RelaydEnvironment does; a subclass says how relayd is reached."""

    config: Dict[str, Any]

    def env(self, **extra: Any) -> Any:
        e = get_environment({"environment_class": CLASS, **self.config, **extra})
        self.addCleanup(e.cleanup)  # type: ignore[attr-defined]
        return e

    def running(self, env: Any, mark: str) -> List[str]:
        out = env.execute({"command": "(for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done) 2>/dev/null"
                                      f" | grep '{mark}' | grep -v grep || true"})
        return [line for line in out["output"].splitlines() if line.strip()]

    def test_timeout_leaves_nothing(self) -> None:
        env = self.env()
        m, child = marker("mini_timeout"), marker("mini_setsid")
        began = time.monotonic()
        out = env.execute({"command": f"echo started; setsid sh -c 'sleep 60; : {child}' & sleep 60; : {m}"},
                          timeout=2)
        took = time.monotonic() - began
        self.assertEqual(out["returncode"], -1, out)
        self.assertIn("timed out after 2 seconds", out["exception_info"])
        self.assertEqual(out["extra"]["exception_type"], "TimeoutExpired")
        self.assertEqual(out["output"], "started\n")
        self.assertLess(took, 20, "relayd's deadline plus its teardown budget")
        self.assertEqual(self.running(env, m) + self.running(env, child), [], "the timed-out action left processes")


class LocalMiniSweAgent(Behaviour, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.d = Relayd()
        cls.config = {"command": [relayd_binary(), "bridge", "--socket", cls.d.socket],
                      "token_file": os.path.join(cls.d.dir, "token")}

    @classmethod
    def tearDownClass(cls) -> None:
        cls.d.close()

    def test_loaded_by_import_path(self) -> None:
        self.assertIsInstance(self.env(), rm.RelaydEnvironment)

    def test_execute(self) -> None:
        env = self.env()
        out = env.execute({"command": "echo out; echo err >&2; echo again; exit 3"})
        self.assertEqual(out, {"output": "out\nerr\nagain\n", "returncode": 3, "exception_info": ""})
        self.assertEqual(env.execute("echo a str action")["output"], "a str action\n")
        self.assertEqual(env.execute({"command": "no-such-program-relayd"})["returncode"], 127)

    def test_cwd_env_timeout_config(self) -> None:
        os.environ["MINI_FORWARDED"] = "forwarded"
        self.addCleanup(os.environ.pop, "MINI_FORWARDED", None)
        env = self.env(env={"MINI_SET": "set"}, forward_env=["MINI_FORWARDED", "MINI_UNSET"])
        out = env.execute({"command": "echo $MINI_SET $MINI_FORWARDED ${MINI_UNSET-unset}; pwd"}, cwd="/")
        self.assertEqual(out["output"], "set forwarded unset\n/\n")
        self.assertEqual(env.execute({"command": "pwd"})["output"], self.d.workspace + "\n")
        self.assertNotIn("RELAYD_TOKEN", env.execute({"command": "env"})["output"])

    def test_config_timeout(self) -> None:
        out = self.env(timeout=2).execute({"command": "sleep 10"})
        self.assertEqual((out["returncode"], out["extra"]["exception_type"]), (-1, "TimeoutExpired"), out)
        self.assertGreaterEqual(out["extra"]["usage"]["processes"], 1, out)  # what it used, in the trajectory

    def test_exited_action_returns_at_once(self) -> None:
        # docker exec waits for a background child holding the output open; relayd does not (rule 6.1).
        env = self.env()
        m = marker("mini_background")
        began = time.monotonic()
        out = env.execute({"command": f"sh -c 'sleep 30; : {m}' & echo done"})
        self.assertEqual((out["output"], out["returncode"]), ("done\n", 0))
        self.assertLess(time.monotonic() - began, 10)
        self.assertEqual(len(self.running(env, m)), 1)  # left alone, as an exited action's leftovers are

    def test_submitted(self) -> None:
        env = self.env()
        with self.assertRaises(Submitted) as e:
            env.execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo the patch"})
        self.assertEqual(e.exception.messages[0]["extra"], {"exit_status": "Submitted", "submission": "the patch\n"})
        self.assertEqual(env.execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; exit 1"})["returncode"], 1)

    def test_token_never_shown(self) -> None:
        env = self.env(token=self.d.token, token_file=None)
        shown = json.dumps(env.serialize()) + json.dumps(env.get_template_vars(extra=1)) + repr(env.config)
        self.assertNotIn(self.d.token, shown)
        self.assertEqual(env.serialize()["info"]["config"]["environment_type"], CLASS)
        self.assertEqual(env.get_template_vars(extra=1)["extra"], 1)
        self.assertEqual(env.execute({"command": "echo ok"})["output"], "ok\n")

    def test_bad_config(self) -> None:
        with self.assertRaises(ValueError) as e:
            self.env(timeuot=5)
        self.assertIn("timeuot", str(e.exception))
        with self.assertRaises(ValueError):
            self.env(forward_env=["RELAYD_TOKEN"])

    def test_over_tcp(self) -> None:
        env = get_environment({"environment_class": CLASS, "address": self.d.addr,
                               "token_file": os.path.join(self.d.dir, "token")})
        self.addCleanup(env.cleanup)
        self.assertEqual(env.execute({"command": "echo tcp"})["output"], "tcp\n")

    def test_bridge_lost_between_actions(self) -> None:
        # An exec channel may end a connection while the agent thinks
        # (kubectl's streaming idle timeout): the next action runs on a new one.
        env = self.env()
        self.assertEqual(env.execute({"command": "echo one"})["returncode"], 0)
        env._client._proc.kill()  # the bridge this test's environment started
        env._client._proc.wait()
        self.assertEqual(env.execute({"command": "echo two"}), {"output": "two\n", "returncode": 0, "exception_info": ""})

    def test_pod_settings(self) -> None:
        # pod, namespace, kube_container, context and kubeconfig make the
        # kubectl exec command, run by name from PATH: here a kubectl that
        # logs its arguments and runs relayd bridge.
        import shutil
        import tempfile
        d = tempfile.mkdtemp(prefix="relayd-pytest-kubectl-")
        self.addCleanup(shutil.rmtree, d, True)
        with open(os.path.join(d, "kubectl"), "w") as f:
            f.write(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {d}/argv.log\nexec {relayd_binary()} bridge --socket {self.d.socket}\n')
        os.chmod(os.path.join(d, "kubectl"), 0o755)
        old = os.environ["PATH"]
        os.environ["PATH"] = d + os.pathsep + old
        self.addCleanup(os.environ.__setitem__, "PATH", old)
        env = get_environment({"environment_class": CLASS, "pod": "t42-relayd-trial", "kube_container": "task",
                               "namespace": "evals", "context": "gke", "kubeconfig": "/etc/evals/kubeconfig",
                               "token_file": os.path.join(self.d.dir, "token")})
        self.addCleanup(env.cleanup)
        self.assertEqual(env.execute({"command": "echo pod"})["output"], "pod\n")
        with open(os.path.join(d, "argv.log")) as f:
            self.assertEqual(f.read(), "--kubeconfig /etc/evals/kubeconfig --context gke -n evals exec -i "
                             "t42-relayd-trial -c task -- /opt/relayd/relayd bridge\n")

    def test_lost_relayd(self) -> None:
        d = Relayd()
        env = get_environment({"environment_class": CLASS, "command": [relayd_binary(), "bridge", "--socket", d.socket],
                               "token": d.token})
        self.addCleanup(env.cleanup)
        self.assertEqual(env.execute({"command": "echo up"})["returncode"], 0)
        d.close()
        out = env.execute({"command": "echo down"})
        self.assertEqual(out["returncode"], -1)
        self.assertIn("ConnectionLostError", out["extra"]["exception_type"])

    def test_readme_snippet(self) -> None:
        with open(os.path.join(REPO, "README.md")) as f:
            readme = f.read()
        section = readme[readme.index("### With mini-swe-agent"):]
        section = section[:section.index("\n## ")]
        block = re.search(r"```yaml\n(.*?)```", section, re.S)
        assert block is not None, "no yaml block in the README's mini-swe-agent section"
        lines = block.group(1).splitlines()
        self.assertEqual(lines[0], "environment:")
        settings = dict(line.strip().split(": ", 1) for line in lines[1:] if line.strip())
        self.assertEqual(settings["environment_class"], CLASS)
        config = {k: v for k, v in settings.items() if k != "environment_class"}
        self.assertEqual(config, {"container": "trial-1", "token_file": "tokens/trial-1"})
        self.assertIs(getattr(rm, CLASS.rsplit(".", 1)[1]), rm.RelaydEnvironment)


@unittest.skipUnless(os.environ.get("RELAYD_MINISWEAGENT_CONTAINER"), "RELAYD_MINISWEAGENT_CONTAINER names no container")
class DockerMiniSweAgent(Behaviour, unittest.TestCase):
    config = {"container": os.environ.get("RELAYD_MINISWEAGENT_CONTAINER", "")}  # the token: RELAYD_TOKEN_FILE


class ImageSetting(unittest.TestCase):
    """``image:``, as mini-swe-agent's Docker configs carry it: the
    environment starts the container itself (DockerTrial) and removes it at
    cleanup(). docker is test_docker's stand-in, which runs the real relayd
    on this machine and logs what it was asked (a relayd image is built
    only by make image; e2e's Docker tests run the real thing)."""

    def setUp(self) -> None:
        import shutil
        import tempfile

        from test_docker import FAKE
        self.state = tempfile.mkdtemp(prefix="relayd-pytest-mini-docker-")
        self.addCleanup(shutil.rmtree, self.state, True)
        self.docker = os.path.join(self.state, "docker")
        with open(self.docker, "w") as f:
            f.write(FAKE.replace("PYTHON", sys.executable, 1))
        os.chmod(self.docker, 0o755)
        for k, v in {"FAKE_DOCKER_STATE": self.state, "FAKE_RELAYD": relayd_binary()}.items():
            old = os.environ.get(k)
            os.environ[k] = v
            self.addCleanup(lambda k=k, old=old: os.environ.__setitem__(k, old) if old is not None else os.environ.pop(k))

        def kill_leftover() -> None:
            pidf = os.path.join(self.state, "relayd.pid")
            kill_group_from_file(pidf)  # only the group that pid file names, not one that took its pid since
        self.addCleanup(kill_leftover)

    def argvs(self) -> List[List[str]]:
        with open(os.path.join(self.state, "argv.log")) as f:
            return [json.loads(line) for line in f]

    def test_image_starts_and_removes_its_container(self) -> None:
        env = get_environment({"environment_class": CLASS, "image": "task:relayd", "executable": self.docker,
                               "run_args": ["--network", "none"], "timeout": 20})
        self.addCleanup(env.cleanup)
        self.assertEqual(env.execute({"command": "echo from-image"})["output"], "from-image\n")
        run = [a for a in self.argvs() if a[0] == "run"]
        self.assertEqual(len(run), 1, self.argvs())
        self.assertEqual(run[0][-3:], ["--network", "none", "task:relayd"])
        name = run[0][run[0].index("--name") + 1]
        self.assertNotIn(env._token, json.dumps(env.serialize()))
        env.cleanup()
        self.assertIn(["rm", "--force", "--volumes", name], self.argvs())

    def test_image_and_container_refused(self) -> None:
        with self.assertRaises(ValueError) as e:
            get_environment({"environment_class": CLASS, "image": "task:relayd", "container": "trial-1",
                             "executable": self.docker})
        self.assertIn("image", str(e.exception))
        self.assertIn("container", str(e.exception))
        self.assertFalse(os.path.exists(os.path.join(self.state, "argv.log")))  # nothing started

    def test_nothing_to_reach_says_what_to_give(self) -> None:
        with self.assertRaises(ValueError) as e:
            get_environment({"environment_class": CLASS, "token": "x" * 32})
        self.assertIn("give image", str(e.exception))


if __name__ == "__main__":
    unittest.main()
