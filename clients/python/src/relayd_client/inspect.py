"""relayd_client.inspect: an inspect_ai sandbox provider ("relayd") that runs
each sample's commands through relayd, reached with ``relayd bridge`` over
the exec channel the harness already has (``docker exec -i``, ``docker
compose exec -T``, ``kubectl exec -i``).

What it changes against inspect's docker sandbox: a timeout is relayd's
deadline (exit 124, termination framework_timeout: the whole scope killed,
setsid escapees included), never guessed from the elapsed time or from 137
and 143; stdout and stderr come apart with relayd's truncation flags; and
``boundary()`` settles what the agent left before a scorer runs.

It imports inspect_ai when it is imported itself (inspect does so through
the ``inspect_ai`` entry point), and only then: ``relayd_client`` needs no
framework. Commands on one sample are serialized over its one connection
(the blocking Client in ``asyncio.to_thread``; AsyncClient has no
over_command). ``timeout_retry`` is not honoured: relayd's deadline is
exact, and a command is not run twice behind the caller's back.

relayd's limits must fit inspect's: ``--max-line-bytes 128MiB`` for a 50
MiB input, ``--max-stdout-bytes`` above inspect's exec limit (10 MiB)."""

from __future__ import annotations

import asyncio
import errno
import importlib
import json
import os
import posixpath
from typing import Any, Dict, List, Mapping, Optional, Union

try:
    _util: Any = importlib.import_module("inspect_ai.util")
except ImportError as _e:
    raise ImportError(
        "relayd_client.inspect is a sandbox provider for inspect_ai, which is not installed here: "
        "pip install inspect-ai (relayd_client itself needs no framework)"
    ) from _e

from .client import Client
from .errors import BadRequestError, NotFoundError
from .results import FRAMEWORK_TIMEOUT, Verified

_FIELDS = ("container", "compose_service", "compose_project", "pod", "kube_container", "namespace",
           "context", "command", "socket", "token", "token_file", "user", "cwd")


def sandbox_config(config: Any) -> Dict[str, Any]:
    """The provider's settings from inspect's sandbox config: a container
    name (str), a path to a JSON file (str ending in .json), a mapping, or
    an object with those attributes (a pydantic model). Missing token and
    container fall back to RELAYD_TOKEN / RELAYD_TOKEN_FILE and
    RELAYD_INSPECT_CONTAINER."""
    out: Dict[str, Any] = {}
    if isinstance(config, str):
        if config.endswith(".json"):
            with open(config) as f:
                out = dict(json.load(f))
        else:
            out = {"container": config}
    elif isinstance(config, Mapping):
        out = dict(config)
    elif config is not None:
        out = {k: getattr(config, k) for k in _FIELDS if getattr(config, k, None) is not None}
    unknown = sorted(set(out) - set(_FIELDS))
    if unknown:
        raise ValueError(f"relayd sandbox config: unknown fields {unknown}; known: {list(_FIELDS)}")
    if not any(out.get(k) for k in ("container", "compose_service", "pod", "command")):
        if os.environ.get("RELAYD_INSPECT_CONTAINER"):
            out["container"] = os.environ["RELAYD_INSPECT_CONTAINER"]
    if not out.get("token") and not out.get("token_file"):
        if os.environ.get("RELAYD_TOKEN"):
            out["token"] = os.environ["RELAYD_TOKEN"]
        elif os.environ.get("RELAYD_TOKEN_FILE"):
            out["token_file"] = os.environ["RELAYD_TOKEN_FILE"]
    return out


def bridge_argv(cfg: Mapping[str, Any]) -> List[str]:
    """The command whose stdin and stdout reach relayd: ``command`` as
    given, else docker compose, kubectl or docker exec, each running
    ``relayd bridge`` (with ``--socket`` when set) in the container."""
    bridge = ["relayd", "bridge"] + (["--socket", str(cfg["socket"])] if cfg.get("socket") else [])
    if cfg.get("command"):
        return [str(a) for a in cfg["command"]]
    if cfg.get("compose_service"):
        project = ["-p", str(cfg["compose_project"])] if cfg.get("compose_project") else []
        return ["docker", "compose", *project, "exec", "-T", str(cfg["compose_service"]), *bridge]
    if cfg.get("pod"):
        argv = ["kubectl"]
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
    raise ValueError("relayd sandbox config names no container: give container, compose_service, pod or command "
                     "(or set RELAYD_INSPECT_CONTAINER)")


def _token(cfg: Mapping[str, Any]) -> str:
    if cfg.get("token"):
        return str(cfg["token"])
    if cfg.get("token_file"):
        with open(str(cfg["token_file"])) as f:
            return f.read().strip()
    raise ValueError("relayd sandbox config has no token: give token or token_file (or set RELAYD_TOKEN_FILE)")


def _file_error(e: BadRequestError, file: str) -> OSError:
    msg = str(e)
    if "is a directory" in msg:
        return IsADirectoryError(errno.EISDIR, f"is a directory ({msg})", file)
    if "permission denied" in msg:
        return PermissionError(errno.EACCES, f"permission denied ({msg})", file)
    return OSError(errno.EIO, msg, file)


@_util.sandboxenv(name="relayd")
class RelaydSandboxEnvironment(_util.SandboxEnvironment):  # type: ignore[misc]
    """One sample's sandbox: one relayd connection through the bridge."""

    def __init__(self, client: Client, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        self.client = client
        self._user: Optional[str] = cfg.get("user")
        ready = client.first_ready
        self._cwd: str = str(cfg.get("cwd") or (ready.cwd if ready else "") or "/")

    @classmethod
    def config_deserialize(cls, config: Dict[str, Any]) -> Any:
        """inspect hands a mapping config here (SandboxEnvironmentSpec's
        validator, a log read back); it stays a checked dict, which the
        spec's config field (Any) holds as it is."""
        out = dict(config)
        unknown = sorted(set(out) - set(_FIELDS))
        if unknown:
            raise ValueError(f"relayd sandbox config: unknown fields {unknown}; known: {list(_FIELDS)}")
        return out

    @classmethod
    async def sample_init(cls, task_name: str, config: Any, metadata: Dict[str, str]) -> Dict[str, Any]:
        cfg = sandbox_config(config)
        argv, token = bridge_argv(cfg), _token(cfg)
        client = await asyncio.to_thread(Client.over_command, argv, token)
        return {"default": cls(client, cfg)}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: Any, environments: Dict[str, Any],
                             interrupted: bool) -> None:
        for env in environments.values():
            if isinstance(env, cls):
                await env.close()

    async def boundary(self) -> Verified:
        """The trial boundary: settle everything that still runs (the
        agent's leftovers) and report it, before a scorer runs."""
        return await asyncio.to_thread(self.client.verify, all=True, survivors="settle")

    async def close(self) -> None:
        """Settle what is left and close the connection (the bridge ends)."""
        try:
            if not self.client.closed:
                await self.boundary()
        finally:
            await asyncio.to_thread(self.client.close)

    def _path(self, p: str) -> str:
        return p if posixpath.isabs(p) else posixpath.join(self._cwd, p)

    async def exec(self, cmd: List[str], input: Union[str, bytes, None] = None, cwd: Optional[str] = None,
                   env: Optional[Dict[str, str]] = None, user: Optional[str] = None, timeout: Optional[int] = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> Any:
        user = user or self._user
        try:
            r = await asyncio.to_thread(
                self.client.execute, cmd[0], list(cmd[1:]), environment=env, cwd=self._path(cwd or "."),
                timeout_ms=None if timeout is None else int(timeout * 1000), capture_stderr=True,
                input=input, user=user)
        except BadRequestError as e:
            if user and "user" in str(e):  # inspect's contract: a failed result naming the user
                return _util.ExecResult(success=False, returncode=1, stdout="", stderr=str(e))
            raise
        if r.termination == FRAMEWORK_TIMEOUT:
            raise TimeoutError(f"{cmd[0]}: relayd's deadline of {timeout}s passed; it killed the command and "
                               f"everything it started (settlement {r.settlement})")
        stdout, stderr = r.stdout, r.stderr or ""
        if r.detail and r.exit_code == 126:
            raise PermissionError(errno.EACCES, r.detail, cmd[0])
        if r.detail:
            stderr += r.detail + "\n"  # relayd could not start it: say why, as a shell would
        limit = _util.SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        for text, truncated in ((stdout, r.stdout_truncated), (stderr, r.stderr_truncated)):
            if truncated or len(text.encode("utf-8", "surrogateescape")) > limit:
                raise _util.OutputLimitExceededError(
                    limit_str=_util.SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, truncated_output=text[:limit])
        return _util.ExecResult(success=r.exit_code == 0, returncode=r.exit_code, stdout=stdout, stderr=stderr)

    async def write_file(self, file: str, contents: Union[str, bytes]) -> None:
        path = self._path(file)
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        # relayd's put replaces a file atomically, which needs only the
        # directory's rights; inspect's contract wants the file's own.
        check = await self.exec(["sh", "-c", '[ ! -f "$1" ] || [ -w "$1" ]', "sh", path])
        if check.returncode == 1:
            raise PermissionError(errno.EACCES, "permission denied (the file is not writable)", file)
        try:
            await asyncio.to_thread(self.client.upload_file, path, data, user=self._user, parents=True)
        except NotFoundError as e:
            raise FileNotFoundError(errno.ENOENT, str(e), file) from e
        except BadRequestError as e:
            raise _file_error(e, file) from e

    async def read_file(self, file: str, text: bool = True) -> Union[str, bytes]:
        try:
            data = await asyncio.to_thread(self.client.download_file, self._path(file), user=self._user)
        except NotFoundError as e:
            raise FileNotFoundError(errno.ENOENT, str(e), file) from e
        except BadRequestError as e:
            raise _file_error(e, file) from e
        if len(data) > _util.SandboxEnvironmentLimits.MAX_READ_FILE_SIZE:
            raise _util.OutputLimitExceededError(
                limit_str=_util.SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, truncated_output=None)
        return data.decode("utf-8") if text else data


__all__ = ["RelaydSandboxEnvironment", "bridge_argv", "sandbox_config"]
