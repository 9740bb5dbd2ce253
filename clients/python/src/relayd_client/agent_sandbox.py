"""agent-sandbox (kubernetes-sigs/agent-sandbox, its extensions API
v1beta1) for relayd: claim a sandbox from a SandboxWarmPool whose template
runs relayd (deploy/kubernetes/agent-sandbox), connect to its relayd,
release it.

    from relayd_client import agent_sandbox
    with agent_sandbox.claim("relayd", namespace="evals") as sb:
        with sb.connect(token) as relayd:
            r = relayd.execute("sh", ["-c", "make test"], timeout_ms=600_000)

claim() makes a SandboxClaim naming the pool and waits until it is bound
to a Ready Sandbox (one of the pool's, whose relayd already serves, or one
started cold when the pool is empty); leaving the ``with`` (or release())
deletes the claim, and agent-sandbox deletes the Sandbox and its Pod.
connect() dials relayd at the Pod's IP, port 7700 (the controller runs in
the cluster, or on a node), or with ``via="exec"`` runs
``kubectl exec -i SANDBOX -c task -- /opt/relayd/relayd bridge``
(from anywhere kubectl reaches the cluster).

It talks to the Kubernetes API through the ``kubernetes`` package (Debian:
python3-kubernetes; pip: kubernetes), which loads the kubeconfig (or the
in-cluster service account) with every way of authenticating it has. That
package is optional: it is imported only when a claim is made, and the rest
of relayd_client never needs it. ``kube=`` takes any object with the four
methods of KubeAPI instead.
"""

from __future__ import annotations

import importlib
import os
import secrets
import time
from types import TracebackType
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Type, Union

from ._bridge import KUBERNETES_RELAYD, bridge_argv
from .client import Client
from .errors import RelaydError

__all__ = ["Sandbox", "SandboxClaimError", "KubeAPI", "claim", "GROUP", "VERSION", "PLURAL", "PORT"]

GROUP = "extensions.agents.x-k8s.io"
VERSION = "v1beta1"
PLURAL = "sandboxclaims"
#: The port relayd listens on in deploy/kubernetes/agent-sandbox's template.
PORT = 7700
#: Where relayd is in the template's task container (as in every Pod of
#: deploy/kubernetes), and that container.
RELAYD_PATH = KUBERNETES_RELAYD
CONTAINER = "task"


class SandboxClaimError(RelaydError):
    """A claim could not be made, or was not bound to a Ready sandbox in
    time; the message carries the claim's last status."""


class KubeAPI:
    """The Kubernetes API as claim() uses it, on the ``kubernetes``
    package: create, get, watch and delete one namespace's SandboxClaims.
    A stand-in (tests, another client library) has the same four methods."""

    def __init__(self, kubeconfig: Optional[str] = None, context: Optional[str] = None) -> None:
        try:
            kclient: Any = importlib.import_module("kubernetes.client")
            kconfig: Any = importlib.import_module("kubernetes.config")
            self._watch: Any = importlib.import_module("kubernetes.watch")
        except ImportError as e:
            raise ImportError(
                "relayd_client.agent_sandbox needs the kubernetes package (Debian: apt-get install python3-kubernetes; "
                "pip install kubernetes)") from e
        cfg = kclient.Configuration()
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG") \
                and not os.path.exists(os.path.expanduser("~/.kube/config")):
            kconfig.load_incluster_config(client_configuration=cfg)
        else:
            kconfig.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        self._api: Any = kclient.CustomObjectsApi(kclient.ApiClient(cfg))
        self._not_found: Any = importlib.import_module("kubernetes.client.rest").ApiException

    def create(self, namespace: str, body: Mapping[str, Any]) -> Dict[str, Any]:
        r: Dict[str, Any] = self._api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, dict(body))
        return r

    def get(self, namespace: str, name: str) -> Dict[str, Any]:
        r: Dict[str, Any] = self._api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        return r

    def watch(self, namespace: str, name: str, resource_version: str, timeout: float) -> Iterator[Dict[str, Any]]:
        """The claim's versions after resource_version, until timeout."""
        w = self._watch.Watch()
        try:
            for ev in w.stream(self._api.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                               field_selector="metadata.name=" + name, resource_version=resource_version,
                               timeout_seconds=max(1, int(timeout + 0.999))):
                if ev.get("type") in ("ADDED", "MODIFIED"):
                    yield ev["object"]
                elif ev.get("type") == "DELETED":
                    raise SandboxClaimError(f"claim {namespace}/{name} was deleted while waiting for it")
        finally:
            w.stop()

    def delete(self, namespace: str, name: str) -> None:
        """Delete the claim; one already gone is no error."""
        try:
            self._api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                                      propagation_policy="Background")
        except self._not_found as e:
            if getattr(e, "status", None) != 404:
                raise


def _bound(obj: Mapping[str, Any]) -> bool:
    """The claim names a Sandbox that is Ready and has a Pod IP."""
    st = obj.get("status") or {}
    sb = st.get("sandbox") or {}
    if not sb.get("name") or not sb.get("podIPs"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def _describe(obj: Mapping[str, Any]) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return f"Ready={c.get('status')} {c.get('reason', '')}: {c.get('message', '')}".rstrip(": ")
    return "no Ready condition yet"


class Sandbox:
    """A bound claim: ``claim`` (the SandboxClaim's name), ``name`` (the
    Sandbox's, which its Pod and headless Service share), ``namespace``,
    ``pod_ips`` and ``service_fqdn`` (the Service's DNS name, where the
    cluster has DNS). A context manager: leaving it releases the claim."""

    def __init__(self, kube: Any, namespace: str, obj: Mapping[str, Any]) -> None:
        self._kube = kube
        self.namespace = namespace
        self.claim: str = obj["metadata"]["name"]
        sb = obj["status"]["sandbox"]
        self.name: str = sb["name"]
        self.pod_ips: List[str] = list(sb.get("podIPs") or [])
        self.service_fqdn: str = sb.get("serviceFQDN", "")
        self.released = False

    def __repr__(self) -> str:
        return f"<relayd_client.agent_sandbox.Sandbox {self.namespace}/{self.name} claim={self.claim} {self.pod_ips}>"

    def connect(self, token: str, *, via: str = "ip", port: int = PORT,
                kubectl: Union[str, Sequence[str]] = "kubectl", **client_args: Any) -> Client:
        """A Client of the sandbox's relayd. ``via="ip"`` dials the Pod's
        first IP at ``port``; ``via="service"`` dials ``service_fqdn`` (the
        cluster's DNS must resolve it); ``via="exec"`` runs
        ``kubectl exec -i`` (``kubectl``: its path, or an argv such as
        ``["kubectl", "--context", "c"]``) with relayd's bridge. Other
        keyword arguments go to Client (or Client.over_command)."""
        if via == "exec":
            # The adapters' own kubectl exec command line, with this kubectl.
            argv = bridge_argv({"pod": self.name, "kube_container": CONTAINER, "namespace": self.namespace})
            prefix = [kubectl] if isinstance(kubectl, str) else list(kubectl)
            return Client.over_command(prefix + argv[1:], token, **client_args)
        if via == "ip":
            if not self.pod_ips:
                raise SandboxClaimError(f"sandbox {self.namespace}/{self.name} has no Pod IP")
            return Client((self.pod_ips[0], port), token, **client_args)
        if via == "service":
            if not self.service_fqdn:
                raise SandboxClaimError(f"sandbox {self.namespace}/{self.name} has no Service (the template's service: true)")
            return Client((self.service_fqdn, port), token, **client_args)
        raise ValueError(f"via={via!r}: want 'ip', 'service' or 'exec'")

    def release(self) -> None:
        """Delete the claim (and with it the Sandbox and its Pod). Safe to
        repeat."""
        if not self.released:
            self._kube.delete(self.namespace, self.claim)
            self.released = True

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.release()


def claim(warm_pool: str, *, namespace: str = "default", name: Optional[str] = None, timeout: float = 120.0,
          labels: Optional[Mapping[str, str]] = None, kubeconfig: Optional[str] = None,
          kube: Any = None) -> Sandbox:
    """Claim a sandbox of the SandboxWarmPool ``warm_pool`` in
    ``namespace`` and wait up to ``timeout`` seconds until the claim is
    bound to a Ready Sandbox (with the template's readiness probe: relayd
    serves). ``name``: the claim's (default ``relayd-`` and random hex);
    ``labels``: the claim's own labels. A claim that is not bound in time
    is deleted and SandboxClaimError raised. ``kube``: a KubeAPI-like
    object; by default KubeAPI(kubeconfig) (the kubernetes package)."""
    if kube is None:
        kube = KubeAPI(kubeconfig)
    name = name or "relayd-" + secrets.token_hex(4)
    meta: Dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SandboxClaim", "metadata": meta,
            "spec": {"warmPoolRef": {"name": warm_pool}}}
    deadline = time.monotonic() + timeout
    obj: Mapping[str, Any] = kube.create(namespace, body)
    try:
        while not _bound(obj):
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxClaimError(
                    f"claim {namespace}/{name} of pool {warm_pool} not bound after {timeout:g} s: {_describe(obj)}")
            rv = obj.get("metadata", {}).get("resourceVersion", "")
            seen = False
            for o in kube.watch(namespace, name, rv, left):
                obj, seen = o, True
                if _bound(obj) or time.monotonic() >= deadline:
                    break
            if not seen and time.monotonic() < deadline:
                # The watch ended with nothing new (its version too old, a
                # dropped stream): look again, then watch from there.
                obj = kube.get(namespace, name)
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        return Sandbox(kube, namespace, obj)
    except BaseException:
        try:
            kube.delete(namespace, name)
        except Exception:
            pass
        raise
