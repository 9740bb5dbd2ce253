"""The Python client and the framework adapters against relayd in a Pod of
deploy/kubernetes on a real cluster, reached through ``kubectl exec -i POD
-c task -- /opt/relayd/relayd bridge``, the adapters through their ``pod``
settings as the README's "On Kubernetes" shows them (e2e's TestK8sPython,
make k8s-test, applies a trial.sh overlay for each class and runs it).

Each class is skipped unless RELAYD_K8S_POD names the trial's Pod,
RELAYD_K8S_NAMESPACE its namespace and RELAYD_TOKEN_FILE holds its token;
``kubectl`` must be on PATH and reach the cluster (KUBECONFIG). The task
image is a static busybox: sh and a few applets (``busybox setsid``, no
bash), its subjects uid 1000 in /app."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import sys
import time
import unittest
from typing import Any, Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))

from relayd_fixture import REPO  # noqa: E402

from relayd_client import FRAMEWORK_TIMEOUT, SETTLED, AsyncClient, Client  # noqa: E402

POD = os.environ.get("RELAYD_K8S_POD", "")
NAMESPACE = os.environ.get("RELAYD_K8S_NAMESPACE", "")
TOKEN_FILE = os.environ.get("RELAYD_TOKEN_FILE", "")
NEEDS = "RELAYD_K8S_POD, RELAYD_K8S_NAMESPACE and RELAYD_TOKEN_FILE name no trial (e2e TestK8sPython sets them)"
ON_CLUSTER = bool(POD and NAMESPACE and TOKEN_FILE)

# What every process in the container runs, NUL-separated: a marker in it is a process still there.
PROCESSES = "cat /proc/[0-9]*/cmdline 2>/dev/null; true"


def marker(what: str) -> str:
    return f"{what}_{secrets.token_hex(8)}"


def token() -> str:
    with open(TOKEN_FILE) as f:
        return f.read().strip()


def bridge() -> List[str]:
    """The README's way in: kubectl exec -i POD -c task -- /opt/relayd/relayd bridge."""
    return ["kubectl", "-n", NAMESPACE, "exec", "-i", POD, "-c", "task", "--", "/opt/relayd/relayd", "bridge"]


def readme_kubernetes() -> str:
    with open(os.path.join(REPO, "README.md")) as f:
        readme = f.read()
    section = readme[readme.index("### On Kubernetes"):]
    return section[:section.index("\n## ")]


# The README's placeholders, which each class replaces with its trial's.
README_POD, README_NAMESPACE, README_TOKEN_FILE = "t42-relayd-trial", "evals", "tokens/t42"


def on_trial(settings: Dict[str, Any]) -> Dict[str, Any]:
    """The README's pod settings with this trial's Pod, namespace and token file."""
    want = {"pod": README_POD, "kube_container": "task", "namespace": README_NAMESPACE, "token_file": README_TOKEN_FILE}
    if {k: settings.get(k) for k in want} != want:
        raise AssertionError(f"the README's pod settings changed: {settings}; this test expects {want}")
    return dict(settings, pod=POD, namespace=NAMESPACE, token_file=TOKEN_FILE)


def readme_sandbox() -> Any:
    """The README's inspect sandbox, as its Python snippet makes it."""
    code = re.search(r"```python\n(.*?)```", readme_kubernetes(), re.S)
    assert code is not None, "no python snippet in the README's On Kubernetes section"
    scope: Dict[str, Any] = {}
    exec(code.group(1), scope)
    return scope["sandbox"]


def readme_environment() -> Dict[str, str]:
    """The README's mini-swe-agent environment settings (its yaml block)."""
    block = re.search(r"```yaml\n(.*?)```", readme_kubernetes(), re.S)
    assert block is not None, "no yaml block in the README's On Kubernetes section"
    lines = block.group(1).splitlines()
    assert lines[0] == "environment:", lines
    return dict(line.strip().split(": ", 1) for line in lines[1:] if line.strip())


@unittest.skipUnless(ON_CLUSTER, NEEDS)
class K8sClient(unittest.TestCase):
    """One trial with the blocking Client over the kubectl exec bridge."""

    def test_trial(self) -> None:
        m, escapee = marker("k8s_sync"), marker("k8s_sync_setsid")
        with Client.over_command(bridge(), token()) as c:
            assert c.first_ready is not None
            self.assertIn("bridge", c.first_ready.extensions)
            x = c.execute("sh", ["-c", "echo out; id -u; pwd; exit 3"])
            self.assertEqual((x.exit_code, x.stdout), (3, "out\n1000\n/app\n"))
            c.upload_file("k8s-sync/in.bin", b"\x00\xffsync", mode=0o640, parents=True)
            self.assertEqual(c.download_file("k8s-sync/in.bin"), b"\x00\xffsync")
            x = c.execute("sh", ["-c", f"busybox setsid sh -c 'sleep 60; : {escapee}' & sleep 60; : {m}"],
                          timeout_ms=2000)
            self.assertEqual((x.termination, x.exit_code, x.settlement), (FRAMEWORK_TIMEOUT, 124, SETTLED))
            left = c.execute("sh", ["-c", PROCESSES]).stdout
            self.assertNotIn(m, left)
            self.assertNotIn(escapee, left)
            c.execute("sh", ["-c", f"busybox setsid sh -c 'sleep 60; : {escapee}' >/dev/null 2>&1 &"])
            self.assertIn(escapee, c.execute("sh", ["-c", PROCESSES]).stdout)  # what the look sees
            self.assertGreaterEqual(len(c.status().survivors), 1)
            v = c.boundary(survivors="settle")  # the trial's end: what the agent left is settled
            self.assertTrue(v.quiescent, v)
            self.assertGreaterEqual(len(v.settled or ()), 1, v)
            self.assertNotIn(escapee, c.execute("sh", ["-c", PROCESSES]).stdout)
            self.assertEqual(c.status().boundary, 1)


@unittest.skipUnless(ON_CLUSTER, NEEDS)
class K8sAsyncClient(unittest.IsolatedAsyncioTestCase):
    """One trial with AsyncClient over the kubectl exec bridge."""

    async def test_trial(self) -> None:
        m = marker("k8s_async")
        asyncio.get_running_loop().slow_callback_duration = 5.0  # -X dev: a loaded machine is no bug
        c = await AsyncClient.over_command(bridge(), token())
        try:
            assert c.first_ready is not None
            self.assertIn("bridge", c.first_ready.extensions)
            x = await c.execute("sh", ["-c", "echo async; exit 5"])
            self.assertEqual((x.exit_code, x.stdout), (5, "async\n"))
            await c.upload_file("k8s-async.txt", b"async file\n")
            self.assertEqual(await c.download_file("k8s-async.txt"), b"async file\n")
            x = await c.execute("sh", ["-c", f"busybox setsid sleep 60 & sleep 60; : {m}"], timeout_ms=2000)
            self.assertEqual((x.termination, x.exit_code, x.settlement), (FRAMEWORK_TIMEOUT, 124, SETTLED))
            self.assertNotIn(m, (await c.execute("sh", ["-c", PROCESSES])).stdout)
            v = await c.verify()
            self.assertTrue(v.quiescent, v)
        finally:
            await c.close()


@unittest.skipUnless(ON_CLUSTER, NEEDS)
class K8sInspect(unittest.IsolatedAsyncioTestCase):
    """One sample through the inspect adapter's pod settings: the README's
    snippet with this trial's Pod, namespace and token file."""

    async def asyncSetUp(self) -> None:
        asyncio.get_running_loop().slow_callback_duration = 5.0  # -X dev: a loaded machine is no bug
        try:
            import anyio  # noqa: F401  (inspect_ai's dependency, which the provider uses)
        except ImportError as e:
            self.skipTest(f"the inspect adapter needs {e.name or 'anyio'}, which {sys.executable} lacks "
                          "(Debian: python3-anyio)")
        import inspect_ai.util as iu  # the stand-in

        from relayd_client import inspect_sandbox as ri
        self.iu, self.ri = iu, ri
        kind, config = readme_sandbox()
        self.assertIs(iu.REGISTRY[kind], ri.RelaydSandboxEnvironment)
        self.config = on_trial(config)
        self.assertEqual(ri.bridge_argv(ri.sandbox_config(self.config)), bridge())
        self.envs = await iu.REGISTRY[kind].sample_init("t", self.config, {})
        self.env = self.envs["default"]

    async def asyncTearDown(self) -> None:
        await self.ri.RelaydSandboxEnvironment.sample_cleanup("t", self.config, self.envs, False)

    async def test_sample(self) -> None:
        env = self.env
        r = await env.exec(["sh", "-c", "echo out; echo err >&2; id -u; exit 4"])
        self.assertEqual((r.returncode, r.stdout, r.stderr), (4, "out\n1000\n", "err\n"))
        await env.write_file("k8s-inspect/text.txt", "café\n")
        self.assertEqual(await env.read_file("k8s-inspect/text.txt"), "café\n")
        await env.write_file("k8s-inspect/bin", b"\xc3\x28")
        self.assertEqual(await env.read_file("k8s-inspect/bin", text=False), b"\xc3\x28")
        self.assertEqual((await env.exec(["cat", "text.txt"], cwd="k8s-inspect")).stdout, "café\n")
        parent, child, escapee = marker("k8s_parent"), marker("k8s_child"), marker("k8s_setsid")
        with self.assertRaises(TimeoutError):
            await env.exec(["sh", "-c", f"sh -c 'sleep 60; : {child}' & busybox setsid sh -c 'sleep 60; : {escapee}' & "
                           f"sleep 60; : {parent}"], timeout=2)
        left = (await env.exec(["sh", "-c", PROCESSES])).stdout
        for mark in (parent, child, escapee):
            self.assertNotIn(mark, left)
        # Execs side by side: each its own kubectl exec bridge.
        rs = await asyncio.gather(*[env.exec(["sh", "-c", f"sleep 1; echo {i}"]) for i in range(3)])
        self.assertEqual([r.stdout for r in rs], ["0\n", "1\n", "2\n"])
        await env.exec(["sh", "-c", f"busybox setsid sh -c 'sleep 60; : {escapee}' >/dev/null 2>&1 &"])
        self.assertIn(escapee, (await env.exec(["sh", "-c", PROCESSES])).stdout)  # what the look sees
        v = await env.boundary()
        self.assertGreaterEqual(len(v.settled or ()), 1, v)
        self.assertNotIn(escapee, (await env.exec(["sh", "-c", PROCESSES])).stdout)


@unittest.skipUnless(ON_CLUSTER, NEEDS)
class K8sMiniSweAgent(unittest.TestCase):
    """Actions through the mini-swe-agent environment's pod settings: the
    README's yaml block with this trial's Pod, namespace and token file
    (and ``sh -c`` as the interpreter: the task image has no bash), the
    cluster named by the setting ``kubeconfig`` instead of KUBECONFIG."""

    def test_actions(self) -> None:
        from minisweagent.environments import get_environment  # the stand-in

        from relayd_client import minisweagent as rm
        settings = readme_environment()
        cls = settings.pop("environment_class")
        self.assertIs(getattr(rm, cls.rsplit(".", 1)[1]), rm.RelaydEnvironment)
        kubeconfig = os.environ.pop("KUBECONFIG", "")
        self.addCleanup(os.environ.__setitem__, "KUBECONFIG", kubeconfig)
        self.assertTrue(kubeconfig, "KUBECONFIG names no cluster")
        env = get_environment({"environment_class": cls, **on_trial(settings), "interpreter": ["sh", "-c"],
                               "kubeconfig": kubeconfig})
        self.addCleanup(env.cleanup)
        out = env.execute({"command": "echo out; echo err >&2; id -u; exit 3"})
        self.assertEqual(out, {"output": "out\nerr\n1000\n", "returncode": 3, "exception_info": ""})
        m, child = marker("k8s_mini"), marker("k8s_mini_setsid")
        began = time.monotonic()
        out = env.execute({"command": f"echo started; busybox setsid sh -c 'sleep 60; : {child}' & sleep 60; : {m}"},
                          timeout=2)
        self.assertEqual(out["returncode"], -1, out)
        self.assertEqual(out["extra"]["exception_type"], "TimeoutExpired")
        self.assertEqual(out["output"], "started\n")
        self.assertLess(time.monotonic() - began, 30, "relayd's deadline plus its teardown budget")
        left = env.execute({"command": PROCESSES})["output"]
        self.assertNotIn(m, left)
        self.assertNotIn(child, left)
        # An action that ended leaves what it started alone, as mini-swe-agent's environments do.
        env.execute({"command": f"busybox setsid sh -c 'sleep 60; : {child}' >/dev/null 2>&1 &"})
        self.assertIn(child, env.execute({"command": PROCESSES})["output"])


if __name__ == "__main__":
    unittest.main()
