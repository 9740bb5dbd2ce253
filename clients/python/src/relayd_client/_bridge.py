"""How the framework adapters (inspect, minisweagent) reach relayd in a
container: a command whose stdin and stdout carry the protocol, running
``relayd bridge`` there (protocol 4.6)."""

from __future__ import annotations

from typing import Any, List, Mapping

#: The settings bridge_argv reads.
FIELDS = ("container", "compose_service", "compose_project", "pod", "kube_container", "namespace", "context",
          "kubeconfig", "command", "socket", "relayd_path")

#: Where relayd is in the Pods of deploy/kubernetes (its init container's
#: ``relayd install /opt/relayd/relayd``): not on their PATH.
KUBERNETES_RELAYD = "/opt/relayd/relayd"


def bridge_argv(cfg: Mapping[str, Any]) -> List[str]:
    """The command whose stdin and stdout reach relayd: ``command`` as
    given, else docker compose, kubectl or docker exec, each running
    ``relayd bridge`` (with ``--socket`` when set) in the container:
    ``relayd_path`` when set, else ``relayd`` on the container's PATH, in
    a Pod (``pod``) /opt/relayd/relayd, where deploy/kubernetes puts it.
    kubectl is run by name (from PATH) with ``kubeconfig`` (else its
    KUBECONFIG) and ``context`` when set."""
    default = KUBERNETES_RELAYD if cfg.get("pod") and not cfg.get("compose_service") else "relayd"
    bridge = [str(cfg.get("relayd_path") or default), "bridge"] + (
        ["--socket", str(cfg["socket"])] if cfg.get("socket") else [])
    if cfg.get("command"):
        return [str(a) for a in cfg["command"]]
    if cfg.get("compose_service"):
        project = ["-p", str(cfg["compose_project"])] if cfg.get("compose_project") else []
        return ["docker", "compose", *project, "exec", "-T", str(cfg["compose_service"]), *bridge]
    if cfg.get("pod"):
        argv = ["kubectl"]
        if cfg.get("kubeconfig"):
            argv += ["--kubeconfig", str(cfg["kubeconfig"])]
        if cfg.get("context"):
            argv += ["--context", str(cfg["context"])]
        if cfg.get("namespace"):
            argv += ["-n", str(cfg["namespace"])]
        argv += ["exec", "-i", str(cfg["pod"])]
        if cfg.get("kube_container"):
            argv += ["-c", str(cfg["kube_container"])]
        return argv + ["--", *bridge]
    if cfg.get("container"):
        return ["docker", "exec", "-i", str(cfg["container"]), *bridge]
    raise ValueError("relayd config names no container: give container, compose_service, pod or command "
                     "(inspect's sandbox: or set RELAYD_INSPECT_CONTAINER)")
