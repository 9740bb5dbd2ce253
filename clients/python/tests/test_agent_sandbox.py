"""relayd_client.agent_sandbox without a cluster: claim() against a
stand-in for the Kubernetes API (what it creates, how it waits, that it
deletes a claim it gave up on), connect() to a real relayd by address and
through a command standing in for kubectl exec, KubeAPI on the kubernetes
package where it is installed, and the module without it. e2e's
TestK8sSandbox runs it against agent-sandbox on a real cluster."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import unittest
from typing import Any, Dict, Iterator, List, Mapping, Optional

from relayd_client import agent_sandbox
from relayd_client.agent_sandbox import KubeAPI, Sandbox, SandboxClaimError, claim
from relayd_fixture import Relayd, relayd_binary

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "src"))


def claim_obj(name: str, rv: int, *, sandbox: str = "", ips: Optional[List[str]] = None,
              ready: Optional[str] = None) -> Dict[str, Any]:
    st: Dict[str, Any] = {}
    if sandbox:
        st["sandbox"] = {"name": sandbox, "podIPs": ips or [], "serviceFQDN": f"{sandbox}.ns.svc.cluster.local"}
    if ready is not None:
        st["conditions"] = [{"type": "Ready", "status": ready, "reason": "R", "message": "m"}]
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, "status": st}


class FakeKube:
    """The four calls of KubeAPI, scripted: each watch() yields the next
    list of versions of the claim."""

    def __init__(self, watches: List[List[Dict[str, Any]]], got: Optional[Dict[str, Any]] = None) -> None:
        self.watches = watches
        self.got = got
        self.created: List[Any] = []
        self.deleted: List[Any] = []
        self.watched: List[Any] = []
        self.gets = 0

    def create(self, namespace: str, body: Mapping[str, Any]) -> Dict[str, Any]:
        self.created.append((namespace, body))
        return claim_obj(body["metadata"]["name"], 1)

    def get(self, namespace: str, name: str) -> Dict[str, Any]:
        self.gets += 1
        return self.got or claim_obj(name, 1)

    def watch(self, namespace: str, name: str, resource_version: str, timeout: float) -> Iterator[Dict[str, Any]]:
        self.watched.append((namespace, name, resource_version))
        yield from (self.watches.pop(0) if self.watches else [])

    def delete(self, namespace: str, name: str) -> None:
        self.deleted.append((namespace, name))


class Claim(unittest.TestCase):
    def test_waits_until_bound_and_ready(self) -> None:
        kube = FakeKube([[claim_obj("c1", 2, sandbox="relayd-x"),
                          claim_obj("c1", 3, sandbox="relayd-x", ips=["10.0.0.9"], ready="False"),
                          claim_obj("c1", 4, sandbox="relayd-x", ips=["10.0.0.9"], ready="True"),
                          claim_obj("c1", 5, sandbox="other", ips=["10.0.0.1"], ready="True")]])
        with claim("pool", namespace="ns", name="c1", labels={"team": "a"}, kube=kube) as sb:
            self.assertEqual((sb.claim, sb.name, sb.namespace, sb.pod_ips), ("c1", "relayd-x", "ns", ["10.0.0.9"]))
            self.assertEqual(sb.service_fqdn, "relayd-x.ns.svc.cluster.local")
            self.assertEqual(kube.deleted, [])
        self.assertEqual(kube.deleted, [("ns", "c1")])
        sb.release()  # again: nothing more
        self.assertEqual(kube.deleted, [("ns", "c1")])
        ns, body = kube.created[0]
        self.assertEqual(ns, "ns")
        self.assertEqual(body, {"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
                                "metadata": {"name": "c1", "labels": {"team": "a"}},
                                "spec": {"warmPoolRef": {"name": "pool"}}})
        self.assertEqual(kube.watched, [("ns", "c1", "1")])  # from the version the create returned

    def test_a_watch_that_ends_empty_looks_again(self) -> None:
        kube = FakeKube([[], [claim_obj("c2", 7, sandbox="s", ips=["10.0.0.2"], ready="True")]])
        sb = claim("pool", name="c2", kube=kube)
        self.assertEqual(sb.name, "s")
        self.assertEqual(kube.gets, 1)
        self.assertEqual(len(kube.watched), 2)

    def test_names_are_made(self) -> None:
        kube = FakeKube([[claim_obj("x", 2, sandbox="s", ips=["10.0.0.2"], ready="True")]])
        sb = claim("pool", kube=kube)
        name = kube.created[0][1]["metadata"]["name"]
        self.assertRegex(name, r"^relayd-[0-9a-f]{8}$")
        self.assertEqual(kube.created[0][0], "default")
        self.assertEqual(sb.claim, "x")

    def test_not_bound_in_time_deletes_the_claim(self) -> None:
        kube = FakeKube([[claim_obj("c3", 2, sandbox="s", ips=["10.0.0.3"], ready="False")]] * 1000,
                        got=claim_obj("c3", 2, sandbox="s", ips=["10.0.0.3"], ready="False"))
        with self.assertRaises(SandboxClaimError) as cm:
            claim("pool", namespace="ns", name="c3", timeout=0.3, kube=kube)
        self.assertIn("c3", str(cm.exception))
        self.assertIn("Ready=False R: m", str(cm.exception))
        self.assertEqual(kube.deleted, [("ns", "c3")])

    def test_a_deleted_claim_is_an_error_and_deleted_again(self) -> None:
        class Gone(FakeKube):
            def watch(self, namespace: str, name: str, resource_version: str, timeout: float) -> Iterator[Dict[str, Any]]:
                raise SandboxClaimError("deleted")
                yield {}
        kube = Gone([])
        with self.assertRaises(SandboxClaimError):
            claim("pool", namespace="ns", name="c4", kube=kube)
        self.assertEqual(kube.deleted, [("ns", "c4")])


class Connect(unittest.TestCase):
    def setUp(self) -> None:
        self.d = Relayd()
        self.addCleanup(self.d.close)
        host, port = self.d.addr.rsplit(":", 1)
        self.port = int(port)
        obj = claim_obj("c", 2, sandbox="sb-1", ips=[host], ready="True")
        self.sb = Sandbox(FakeKube([]), "ns", obj)

    def test_by_pod_ip(self) -> None:
        with self.sb.connect(self.d.token, port=self.port) as c:
            self.assertEqual(c.execute("sh", ["-c", "echo $((6*7))"]).stdout, "42\n")

    def test_through_kubectl_exec(self) -> None:
        # A kubectl that writes down its arguments and runs the bridge.
        d = tempfile.mkdtemp(prefix="relayd-fake-kubectl-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", d]))
        argv_file = os.path.join(d, "argv")
        kubectl = os.path.join(d, "kubectl")
        with open(kubectl, "w") as f:
            f.write(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv_file}\nexec {relayd_binary()} bridge --socket {self.d.socket}\n')
        os.chmod(kubectl, stat.S_IRWXU)
        with self.sb.connect(self.d.token, via="exec", kubectl=[kubectl, "--context", "c"]) as c:
            self.assertEqual(c.execute("sh", ["-c", "echo hi"]).stdout, "hi\n")
        with open(argv_file) as f:
            self.assertEqual(f.read().split("\n")[:-1], ["--context", "c", "-n", "ns", "exec", "-i", "sb-1", "-c", "task",
                                                         "--", "/opt/relayd/relayd", "bridge"])

    def test_bad_via(self) -> None:
        with self.assertRaises(ValueError):
            self.sb.connect(self.d.token, via="ssh")


class KubernetesPackage(unittest.TestCase):
    def test_kubeapi_loads_a_kubeconfig(self) -> None:
        try:
            import kubernetes  # noqa: F401
        except ImportError:
            raise unittest.SkipTest("needs the kubernetes package (python3-kubernetes)")
        with tempfile.NamedTemporaryFile("w", suffix=".kubeconfig") as f:
            f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:9'}\n"
                    "users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n"
                    "current-context: x\n")
            f.flush()
            api = KubeAPI(f.name)
            with self.assertRaises(Exception):  # nothing listens on port 9
                api.get("ns", "c")

    def test_module_without_kubernetes(self) -> None:
        # The package hidden as a missing one is: the module imports, the
        # rest of the client works, and a claim says what to install.
        with tempfile.TemporaryDirectory() as hide:
            os.mkdir(os.path.join(hide, "kubernetes"))
            with open(os.path.join(hide, "kubernetes", "__init__.py"), "w") as f:
                f.write("raise ModuleNotFoundError(\"No module named 'kubernetes'\", name='kubernetes')\n")
            code = ("from relayd_client import agent_sandbox, Client\n"
                    "try:\n    agent_sandbox.claim('p')\nexcept ImportError as e:\n    print('ImportError', e)\n")
            p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=os.pathsep.join([hide, SRC])),
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("ImportError relayd_client.agent_sandbox needs the kubernetes package", p.stdout)
        self.assertIn("python3-kubernetes", p.stdout)


if __name__ == "__main__":
    unittest.main()
