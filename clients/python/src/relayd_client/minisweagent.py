"""relayd_client.minisweagent: a mini-swe-agent environment that runs each
action through relayd. mini-swe-agent loads it by import path (its
``environment_class``, a dotted ``module.Class`` path)::

    environment:
      environment_class: relayd_client.minisweagent.RelaydEnvironment
      container: trial-1
      token_file: /run/relayd/token

It has the interface of mini-swe-agent's DockerEnvironment (v2):
``execute(action, cwd="", *, timeout=None)`` returns ``output`` (stdout
and stderr as one stream, as ``docker exec`` with stderr on stdout gives
it), ``returncode`` and ``exception_info``; ``get_template_vars`` and
``serialize``; ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` as the first
line of a successful action raises mini-swe-agent's Submitted. The
difference: an action's ``timeout`` (else ``config.timeout``) is relayd's
deadline, which settles the action's whole process tree, ``setsid`` and
double-forked escapees included, before the result comes back; it is then
returned as mini-swe-agent's environments return a timeout (returncode
-1, ``exception_info`` naming TimeoutExpired, the output so far), and
nothing of the action runs on. What a timed-out action used (protocol
4.8) is in that output's ``extra`` (``usage``), which mini-swe-agent keeps
in the trajectory; an action that ended returns the three keys alone, as
mini-swe-agent's own environments do.

relayd is reached through ``relayd bridge`` over an exec channel
(``container``, ``compose_service``, ``pod`` or ``command``, as the inspect
adapter), or at ``address`` (``HOST:PORT``). Or, as mini-swe-agent's Docker
configs do, ``image`` names an image and the environment starts the
container itself: a task image with relayd added (deploy/docker/Dockerfile,
docs/deploy.md), run by relayd_client.docker.DockerTrial (relayd as
PID 1, a token of its own, ``run_args`` and ``executable`` passed to
``docker run``), removed by ``cleanup()``. ``token_file`` (else
RELAYD_TOKEN_FILE, else ``token`` or RELAYD_TOKEN) gives the token, which
never appears in ``serialize()`` (the trajectory file),
``get_template_vars()`` (the prompts) or a subject's environment.

It imports mini-swe-agent (for Submitted) when it is imported itself."""

from __future__ import annotations

import dataclasses
import importlib
import os
import platform
import subprocess
from typing import Any, Dict, List, Mapping, Optional, Union

try:
    _exceptions: Any = importlib.import_module("minisweagent.exceptions")
except ImportError as _e:
    raise ImportError(
        "relayd_client.minisweagent is an environment for mini-swe-agent, which is not installed here: "
        "pip install mini-swe-agent (relayd_client itself needs no framework)"
    ) from _e

from ._bridge import FIELDS as _BRIDGE_FIELDS
from ._bridge import bridge_argv
from .client import Client
from .docker import DockerTrial
from .results import FRAMEWORK_TIMEOUT, Ready

__all__ = ["RelaydEnvironment", "RelaydEnvironmentConfig"]

_SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@dataclasses.dataclass
class RelaydEnvironmentConfig:
    """RelaydEnvironment's settings: DockerEnvironment's that apply (cwd,
    env, forward_env, timeout, interpreter) and how relayd is reached."""

    cwd: str = ""
    """Working directory of the actions (default: relayd's workspace)."""
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    """Environment variables set for every action."""
    forward_env: List[str] = dataclasses.field(default_factory=list)
    """Variables of this process's environment passed on when set (env wins)."""
    timeout: int = 30
    """An action's deadline in seconds, when execute() gives none."""
    interpreter: List[str] = dataclasses.field(default_factory=lambda: ["bash", "-lc"])
    """What runs the action's command, which is appended as its last argument."""
    user: Optional[str] = None
    """Run actions as this user (relayd must be root)."""
    container: Optional[str] = None
    compose_service: Optional[str] = None
    compose_project: Optional[str] = None
    pod: Optional[str] = None
    kube_container: Optional[str] = None
    namespace: Optional[str] = None
    context: Optional[str] = None
    """With ``pod``: the kubeconfig context kubectl uses."""
    kubeconfig: Optional[str] = None
    """With ``pod``: kubectl's kubeconfig file (default: its KUBECONFIG)."""
    command: Optional[List[str]] = None
    """A command whose stdin and stdout reach relayd (e.g. ``relayd bridge`` through an exec channel)."""
    socket: Optional[str] = None
    """relayd's --socket in the container, for relayd bridge."""
    relayd_path: Optional[str] = None
    """relayd in the container (default: relayd on its PATH; /opt/relayd/relayd in a pod)."""
    address: Optional[str] = None
    """relayd's HOST:PORT, instead of a bridge."""
    token_file: Optional[str] = None
    token: Optional[str] = dataclasses.field(default=None, repr=False)
    image: Optional[str] = None
    """An image with relayd in it: the environment starts a container of it
    (DockerTrial: relayd as PID 1, a token of its own) and removes it at
    cleanup(), instead of reaching one that runs."""
    run_args: List[str] = dataclasses.field(default_factory=list)
    """With ``image``: more ``docker run`` options (mounts, ``--network``)."""
    executable: str = "docker"
    """With ``image``: the docker command."""

    def model_dump(self, mode: str = "python") -> Dict[str, Any]:
        """The settings as a dict, as mini-swe-agent's pydantic configs
        give them, without the token."""
        out = dataclasses.asdict(self)
        del out["token"]
        return out


class RelaydEnvironment:
    """Runs mini-swe-agent's actions through relayd: one connection, opened
    here (again when it ended between actions), one action at a time."""

    def __init__(self, *, config_class: type = RelaydEnvironmentConfig, **kwargs: Any) -> None:
        known = {f.name for f in dataclasses.fields(config_class)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ValueError(f"RelaydEnvironment: unknown settings {unknown}; known: {sorted(known)}")
        self.config = config_class(**kwargs)
        if any(v == "RELAYD_TOKEN" for v in self.config.forward_env) or "RELAYD_TOKEN" in self.config.env:
            raise ValueError("RelaydEnvironment: RELAYD_TOKEN is relayd's secret and never goes to an action")
        # The ways to a relayd that runs (socket and the like only refine one).
        reach = [k for k in ("address", "container", "compose_service", "pod", "command") if getattr(self.config, k)]
        self._client: Optional[Client] = None
        self._trial: Optional[DockerTrial] = None
        self._bridge: Optional[List[str]] = None
        self._cwd = self.config.cwd
        if self.config.image:
            if reach:
                raise ValueError(f"RelaydEnvironment: image starts a container of its own; {reach[0]} names "
                                 f"another way to reach relayd: give one of them")
            # A container of its own: DockerTrial makes the token (a 0600
            # file, mounted read-only) and removes both at cleanup().
            self._trial = DockerTrial(self.config.image, run_args=self.config.run_args,
                                      docker=self.config.executable)
            self._trial.__enter__()
            self._token = self._trial.token
            self._bridge = self._trial.bridge_command()
        elif not reach:
            raise ValueError("RelaydEnvironment: give image (one with relayd in it: the environment starts and "
                             "removes its container), or container, compose_service, pod, command or address "
                             "(a container that runs relayd)")
        else:
            self._token = self._read_token()
        try:
            self._connect()
        except BaseException:
            self.cleanup()
            raise

    def _read_token(self) -> str:
        path = self.config.token_file or os.environ.get("RELAYD_TOKEN_FILE")
        if path:
            with open(path) as f:
                return f.read().strip()
        token = self.config.token or os.environ.get("RELAYD_TOKEN")
        if not token:
            raise ValueError("RelaydEnvironment: no token: give token_file (or set RELAYD_TOKEN_FILE)")
        return token

    def _connect(self) -> Client:
        if self._client is not None and not self._client.idle_ok():
            self._client.close()  # ended while the agent thought (an exec channel's idle timeout): a new one
        if self._client is None or self._client.closed:
            ready: Optional[Ready]
            if self.config.address:
                self._client = Client(self.config.address, self._token)
                ready = self._client.ready()
            elif self._bridge is not None:
                self._client = Client.over_command(self._bridge, self._token)
                ready = self._client.first_ready
            else:
                cfg = {k: getattr(self.config, k) for k in _BRIDGE_FIELDS}
                self._client = Client.over_command(bridge_argv(cfg), self._token)
                ready = self._client.first_ready
            if not self._cwd and ready is not None:
                self._cwd = ready.cwd
        return self._client

    def execute(self, action: Union[Mapping[str, Any], str], cwd: str = "", *,
                timeout: Optional[int] = None) -> Dict[str, Any]:
        """Runs ``action["command"]`` (a str action is the command itself,
        as mini-swe-agent before v2 passed it) with the interpreter; the
        result is mini-swe-agent's dict. A timeout is relayd's deadline:
        the action and everything it started are gone when this returns."""
        command = action if isinstance(action, str) else str(action.get("command", ""))
        seconds = timeout or self.config.timeout
        env = {k: os.environ[k] for k in self.config.forward_env if k in os.environ}
        env.update(self.config.env)
        # stderr onto stdout in the container: one stream, in the order it was written.
        argv = ["sh", "-c", 'exec "$@" 2>&1', "sh", *self.config.interpreter, command]
        try:
            r = self._connect().execute(argv, environment=env, cwd=cwd or self._cwd or None,
                                        timeout_ms=int(seconds * 1000), user=self.config.user)
        except Exception as e:
            output: Dict[str, Any] = {
                "output": "", "returncode": -1,
                "exception_info": f"An error occurred while executing the command: {e}",
                "extra": {"exception_type": type(e).__name__, "exception": str(e)},
            }
        else:
            if r.termination == FRAMEWORK_TIMEOUT:
                expired = subprocess.TimeoutExpired(command, seconds, output=r.stdout)
                output = {
                    "output": r.stdout, "returncode": -1,
                    "exception_info": f"An error occurred while executing the command: {expired}",
                    "extra": {"exception_type": "TimeoutExpired", "exception": str(expired),
                              "settlement": r.settlement},
                }
            else:
                text = r.stdout + (r.detail + "\n" if r.detail else "")
                output = {"output": text, "returncode": r.exit_code, "exception_info": ""}
            # What a timed-out action used (protocol 4.8), beside what
            # mini-swe-agent's own environments put in its extra. An
            # action that ended gets nothing more than theirs: code and
            # tests compare that dict whole.
            if "extra" in output and r.usage is not None:
                output["extra"]["usage"] = dataclasses.asdict(r.usage)
        self._check_finished(output)
        return output

    def _check_finished(self, output: Mapping[str, Any]) -> None:
        lines = str(output.get("output", "")).lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == _SUBMIT and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise _exceptions.Submitted({
                "role": "exit", "content": submission,
                "extra": {"exit_status": "Submitted", "submission": submission},
            })

    def get_template_vars(self, **kwargs: Any) -> Dict[str, Any]:
        """The config (no token), this machine's uname and kwargs, later ones winning."""
        return _merge(self.config.model_dump(), platform.uname()._asdict(), kwargs)

    def serialize(self) -> Dict[str, Any]:
        return {"info": {"config": {
            "environment": self.config.model_dump(mode="json"),
            "environment_type": f"{type(self).__module__}.{type(self).__name__}",
        }}}

    def cleanup(self) -> None:
        """Closes the connection: relayd settles what still runs on it.
        With ``image``, removes the container and its token too."""
        c, self._client = getattr(self, "_client", None), None
        if c is not None:
            c.close()
        t, self._trial = getattr(self, "_trial", None), None
        if t is not None:
            t.close()

    def __del__(self) -> None:
        self.cleanup()


def _merge(*dicts: Mapping[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for d in dicts:
        for k, v in d.items():
            if isinstance(v, Mapping) and isinstance(out.get(k), dict):
                out[k] = _merge(out[k], v)
            else:
                out[k] = dict(v) if isinstance(v, Mapping) else v
    return out
