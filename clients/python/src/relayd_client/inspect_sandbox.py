"""relayd_client.inspect_sandbox: an inspect_ai sandbox provider ("relayd") that runs
each sample's commands through relayd, reached with ``relayd bridge`` over
the exec channel the harness already has (``docker exec -i``, ``docker
compose exec -T``, ``kubectl exec -i``).

What it changes against inspect's docker sandbox: a timeout is relayd's
deadline (exit 124, termination framework_timeout: the whole scope killed,
setsid escapees included), never guessed from the elapsed time or from 137
and 143; stdout and stderr come apart with relayd's truncation flags; and
``boundary()`` settles what the agent left before a scorer runs, and
``changes()`` tells a scorer which files the agent changed (the config's
``"mark"`` names the directories to watch, marked as the sample begins).

It imports inspect_ai (and anyio, which inspect_ai requires) when it is
imported itself (inspect does so through the ``inspect_ai`` entry point),
and only then: ``relayd_client`` needs no framework. Its waits are anyio's,
so it runs under inspect's asyncio and trio backends alike.

One sample holds a small pool of connections (``max_connections``, default
8), each a bridge of its own: execs run side by side (inspect's sandbox
agent bridge polls with exec while the agent's long exec runs), each a
blocking Client call in a worker thread. A cancelled exec (inspect's time
and working limits) returns at once; its connection is half-closed, so
relayd settles the execution (transport loss, rule 6.4) and still answers
it, and the sample's next call starts only once that answer came (at most
relayd's teardown budget): what runs next never shares the sandbox with
it. ``exec_remote`` is native: relayd's stream, stdin and executed reply
instead of inspect's injected tools polled with exec. A relayd that cannot
be reached, or a container that is gone, raises SandboxUnavailableError; a
missing program is an ordinary failed result (127). ``timeout_retry`` is
not honoured: relayd's deadline is exact, and a command is not run twice
behind the caller's back.

A ``token`` given in a config is kept in this process and replaced in the
config by a reference, so that the eval log, which records the sandbox
spec's config, never holds it; ``token_file`` is preferred.

relayd's limits must fit inspect's: ``--max-line-bytes 128MiB`` for a 50
MiB input, ``--max-stdout-bytes`` above inspect's exec limit (10 MiB).
What a command used (protocol 4.8) is not passed on: inspect's ExecResult
has success, returncode, stdout and stderr alone; ``connection()`` gives
the relayd_client.Client whose execute returns it."""

from __future__ import annotations

import collections
import errno
import importlib
import inspect as _pyinspect
import json
import os
import posixpath
import secrets
import shlex
import tempfile
import threading
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Set, TypeVar, Union, cast

try:
    _util: Any = importlib.import_module("inspect_ai.util")
    import anyio
    import anyio.to_thread
except ImportError as _e:
    _missing = _e.name or "inspect_ai"
    raise ImportError(
        "relayd_client.inspect_sandbox is a sandbox provider for inspect_ai, which is not installed here"
        + ("" if _missing.startswith("inspect_ai") else f" (its dependency {_missing} is missing)")
        + ": pip install inspect-ai (relayd_client itself needs no framework)"
    ) from _e

from . import _wire
from ._bridge import bridge_argv
from .client import Client
from .errors import BadRequestError, ConnectionLostError, NotFoundError, ReplyTimeoutError
from .results import FRAMEWORK_TIMEOUT, Changes, Executed, Output, Verified

_FIELDS = ("container", "compose_service", "compose_project", "pod", "kube_container", "namespace",
           "context", "kubeconfig", "command", "socket", "relayd_path", "token", "token_file", "user", "cwd",
           "max_connections", "mark")

T = TypeVar("T")

#: Connections one sample opens at most (each a bridge): execs beyond wait for one.
DEFAULT_MAX_CONNECTIONS = 8
# Idle connections a sample keeps (each a bridge process, e.g. a docker exec client): more are closed.
_MAX_IDLE = 2
# What one exec_remote process holds of output nobody has iterated yet; more is dropped (and counted).
_MAX_PENDING_OUTPUT = 16 << 20

# --- the token, kept out of the eval log

_TOKEN_REF = "relayd-token-ref:"
_tokens: Dict[str, str] = {}  # reference -> token, this process only
_refs: Dict[str, str] = {}  # token -> its reference (one per token: bounded by the tokens given)
_tokens_lock = threading.Lock()


def _hide_token(cfg: Dict[str, Any]) -> Dict[str, Any]:
    tok = cfg.get("token")
    if isinstance(tok, str) and tok and not tok.startswith(_TOKEN_REF):
        with _tokens_lock:
            ref = _refs.get(tok)
            if ref is None:
                ref = _TOKEN_REF + secrets.token_hex(16)
                _refs[tok], _tokens[ref] = ref, tok
        cfg["token"] = ref
    return cfg


def _check_fields(out: Mapping[str, Any]) -> None:
    unknown = sorted(set(out) - set(_FIELDS))
    if unknown:
        raise ValueError(f"relayd sandbox config: unknown fields {unknown}; known: {list(_FIELDS)}")


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
    _check_fields(out)
    if not any(out.get(k) for k in ("container", "compose_service", "pod", "command")):
        if os.environ.get("RELAYD_INSPECT_CONTAINER"):
            out["container"] = os.environ["RELAYD_INSPECT_CONTAINER"]
    if not out.get("token") and not out.get("token_file"):
        if os.environ.get("RELAYD_TOKEN"):
            out["token"] = os.environ["RELAYD_TOKEN"]
        elif os.environ.get("RELAYD_TOKEN_FILE"):
            out["token_file"] = os.environ["RELAYD_TOKEN_FILE"]
    return out


def _token(cfg: Mapping[str, Any]) -> str:
    given = cfg.get("token")
    if given:
        tok = str(given)
        if not tok.startswith(_TOKEN_REF):
            return tok
        with _tokens_lock:
            known = _tokens.get(tok)
        if known is not None:
            return known
        if not cfg.get("token_file"):
            raise ValueError("relayd sandbox config: its token was kept out of the eval log, and this process does "
                             "not hold it: give token_file (or set RELAYD_TOKEN_FILE)")
    if cfg.get("token_file"):
        with open(str(cfg["token_file"])) as f:
            return f.read().strip()
    raise ValueError("relayd sandbox config has no token: give token_file or token (or set RELAYD_TOKEN_FILE)")


def _file_error(e: BadRequestError, file: str) -> OSError:
    msg = str(e)
    if "is a directory" in msg:
        return IsADirectoryError(errno.EISDIR, f"is a directory ({msg})", file)
    if "permission denied" in msg:
        return PermissionError(errno.EACCES, f"permission denied ({msg})", file)
    return OSError(errno.EIO, msg, file)


# --- threads: a blocking Client call each, awaited the anyio way (asyncio or trio)

_ABANDON = "abandon_on_cancel" if "abandon_on_cancel" in _pyinspect.signature(anyio.to_thread.run_sync).parameters \
    else "cancellable"  # anyio < 4.1


async def _to_thread(fn: Callable[[], T], limiter: Any) -> T:
    """fn() in a worker thread. A cancelled caller returns at once; the
    thread runs on, and whoever cancelled ends its work (_Job.cancel)."""
    run = cast(Any, anyio.to_thread.run_sync)
    return cast(T, await run(fn, limiter=limiter, **{_ABANDON: True}))


def _is_cancel(e: BaseException) -> bool:
    return isinstance(e, anyio.get_cancelled_exc_class())


class _Cancelled(Exception):
    """A job cancelled before it had a connection: it never ran."""


class _Job:
    """One call's connection, as the thread running it and the task that
    may cancel it both see it."""

    __slots__ = ("lock", "cancelled", "started", "client", "done")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cancelled = False
        self.started = False  # its thread began (a call cancelled before that never runs)
        self.client: Optional[Client] = None
        self.done = threading.Event()  # the thread is finished with its connection, or will never have one

    def start(self) -> bool:
        """Called first in the job's thread: False when it was cancelled before."""
        with self.lock:
            self.started = not self.cancelled
            return self.started

    def cancel(self) -> None:
        """Ends the job: a half-close of its connection, so that relayd
        settles what it runs and answers; a job still waiting for a
        connection, or for its thread, never runs."""
        with self.lock:
            self.cancelled = True
            c = self.client
            if not self.started:
                self.done.set()
        if c is not None:
            c.interrupt()


class _Pool:
    """One sample's connections through the bridge: at most ``size`` at
    once, up to _MAX_IDLE idle ones kept for the next calls (a burst's
    others are closed: each holds a bridge process on this side)."""

    def __init__(self, argv: List[str], token: str, size: int) -> None:
        self.argv = argv
        self._token = token
        self._slots = threading.BoundedSemaphore(size)
        self._idle: List[Client] = []
        self._lock = threading.Lock()
        self.closed = False

    def open(self) -> Client:
        """A new connection: SandboxUnavailableError when relayd cannot be reached."""
        with tempfile.TemporaryFile() as err:
            try:
                return Client.over_command(self.argv, self._token, stderr=err)
            except (OSError, ReplyTimeoutError) as e:  # ConnectionLostError is an OSError
                err.seek(0)
                said = err.read(4000).decode("utf-8", "replace").strip()
                raise _util.SandboxUnavailableError(
                    f"relayd cannot be reached through {shlex.join(self.argv)}: {e}" + (f" ({said})" if said else "")
                ) from e

    def take(self, job: _Job) -> Optional[Client]:
        """A connection for job (idle, else new); None when job was cancelled meanwhile."""
        while not self._slots.acquire(timeout=0.25):
            if job.cancelled:
                return None
        try:
            c = None
            while c is None:
                with self._lock:
                    if self.closed:
                        raise _util.SandboxUnavailableError("this relayd sandbox was cleaned up")
                    c = self._idle.pop() if self._idle else None
                if c is None:
                    c = self.open()
                elif not c.idle_ok():
                    c.close()  # ended while idle (its bridge died, an exec channel's idle timeout): a new one
                    c = None
        except BaseException:
            self._slots.release()
            raise
        with job.lock:
            if not job.cancelled:
                job.client = c
                return c
        self.give(c, True)
        return None

    def give(self, c: Client, reusable: bool) -> None:
        with self._lock:
            keep = reusable and not c.closed and not self.closed and len(self._idle) < _MAX_IDLE
            if keep:
                self._idle.append(c)
        if not keep:
            c.close()
        self._slots.release()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()


def _unavailable(e: BaseException) -> BaseException:
    if isinstance(e, (ConnectionLostError, ReplyTimeoutError)):
        return cast(BaseException, _util.SandboxUnavailableError(
            f"relayd is gone (the sandbox is not running, or its bridge ended): {e}"))
    return e


def _result(r: Executed) -> Any:
    stdout, stderr = r.stdout, r.stderr or ""
    if r.detail:
        stderr += r.detail + "\n"  # relayd could not start it: say why, as a shell would
    return _util.ExecResult(success=r.exit_code == 0, returncode=r.exit_code, stdout=stdout, stderr=stderr)


@_util.sandboxenv(name="relayd")
class RelaydSandboxEnvironment(_util.SandboxEnvironment):  # type: ignore[misc]
    """One sample's sandbox: a pool of relayd connections through the bridge."""

    def __init__(self, pool: _Pool, cfg: Mapping[str, Any], cwd: str) -> None:
        super().__init__()
        self._pool = pool
        self._cfg = dict(cfg)
        self._user: Optional[str] = cfg.get("user")
        self._cwd = cwd
        size = int(cfg.get("max_connections") or DEFAULT_MAX_CONNECTIONS)
        self._limiter = anyio.CapacityLimiter(2 * size)  # calls, and waits for a connection
        self._wait_limiter = anyio.CapacityLimiter(64)  # exec_remote's waits for events
        self._jobs: Set[_Job] = set()  # what runs now
        self._cancelled: List[_Job] = []  # cancelled, not yet answered: the next call waits for them
        self._procs: Set["RelaydProcess"] = set()
        self._budget = _wire.DEFAULT_TEARDOWN_BUDGET + _wire.SETTLE_SLACK
        self._mark_name: Optional[str] = None  # the sample's mark (config "mark"), freed by close

    @classmethod
    def config_deserialize(cls, config: Dict[str, Any]) -> Any:
        """inspect hands a mapping config here (SandboxEnvironmentSpec's
        validator, a log read back); it stays a checked dict, which the
        spec's config field (Any) holds as it is, with a token replaced by
        a reference to it (kept in this process), so that the eval log
        never records it."""
        out = dict(config)
        _check_fields(out)
        return _hide_token(out)

    @classmethod
    async def sample_init(cls, task_name: str, config: Any, metadata: Dict[str, str]) -> Dict[str, Any]:
        cfg = sandbox_config(config)
        size = int(cfg.get("max_connections") or DEFAULT_MAX_CONNECTIONS)
        if size < 1:
            raise ValueError(f"relayd sandbox config: max_connections must be at least 1, got {size}")
        pool = _Pool(bridge_argv(cfg), _token(cfg), size)
        client = await anyio.to_thread.run_sync(pool.open)
        ready = client.first_ready
        pool._idle.append(client)
        env = cls(pool, cfg, str(cfg.get("cwd") or (ready.cwd if ready else "") or "/"))
        if cfg.get("mark"):
            try:
                await env._mark(cfg["mark"], ready.extensions if ready else ())
            except BaseException:
                await anyio.to_thread.run_sync(pool.close)
                raise
        return {"default": env}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: Any, environments: Dict[str, Any],
                             interrupted: bool) -> None:
        for env in environments.values():
            if isinstance(env, cls):
                await env.close()

    # --- the machinery: each call on a connection of its own

    async def _settle_cancelled(self) -> None:
        """Waits for the answers to cancelled calls (relayd settles, then
        answers), at most the teardown budget each; past it the connection
        is closed outright."""
        for job in list(self._cancelled):
            if not job.done.is_set():
                if not await _to_thread(lambda: job.done.wait(self._budget), self._limiter):
                    c = job.client
                    if c is not None:
                        c.close()
            if job in self._cancelled:
                self._cancelled.remove(job)

    async def _call(self, fn: Callable[[Client], T]) -> T:
        await self._settle_cancelled()
        job = _Job()

        def work() -> T:
            try:
                c = self._pool.take(job) if job.start() else None
                if c is None:
                    raise _Cancelled()
                try:
                    return fn(c)
                except BaseException as e:
                    raise _unavailable(e) from e
                finally:
                    with job.lock:
                        job.client = None
                        reuse = not job.cancelled
                    self._pool.give(c, reuse)
            finally:
                self._jobs.discard(job)
                job.done.set()

        self._jobs.add(job)
        try:
            return await _to_thread(work, self._limiter)
        except BaseException:
            if not job.done.is_set():
                job.cancel()
                if not job.done.is_set():
                    self._cancelled.append(job)
                else:
                    self._jobs.discard(job)
            raise

    async def boundary(self) -> Verified:
        """The trial boundary: settle everything that still runs (the
        agent's leftovers) and report it, before a scorer runs."""
        return await self._call(lambda c: c.verify(all=True, survivors="settle"))

    async def _mark(self, paths: Any, extensions: Any) -> None:
        """Marks the config's ``mark`` paths (relative ones to the sample's
        cwd) as the sample begins, so that a scorer can ask for changes()."""
        if "marks" not in extensions:
            raise ValueError("relayd sandbox config names paths to mark, and this relayd serves no marks "
                             "(protocol 4.9): update relayd, or leave out \"mark\"")
        items = [paths] if isinstance(paths, str) else list(paths)
        name = "inspect-" + secrets.token_hex(8)
        await self._call(lambda c: c.mark(name, [self._path(str(p)) for p in items]))
        self._mark_name = name

    async def changes(self, paths: Union[str, List[str], None] = None) -> Changes:
        """For a scorer: what changed on disk since the sample began, under
        the paths its sandbox config marks (``"mark": ["/app"]``), or under
        ``paths`` within them (relative to the sample's cwd): relayd's
        added, modified and deleted entries (protocol 4.9), found by a
        stat walk that a modification time set back does not fool. Call
        boundary() first to be sure nothing of the agent still writes."""
        name = self._mark_name
        if name is None:
            raise ValueError("changes(): this sample's sandbox config marks nothing: give it \"mark\" "
                             "(the directories to watch, e.g. [\"/app\"])")
        mark: str = name
        narrowed = None if paths is None else [self._path(p) for p in ([paths] if isinstance(paths, str) else paths)]
        return await self._call(lambda c: c.changes(mark, narrowed))

    async def close(self) -> None:
        """Settle what is left and close the connections (the bridges end)."""
        try:
            if not self._pool.closed:
                try:
                    await self.boundary()
                    name, self._mark_name = self._mark_name, None
                    if name is not None:
                        mark: str = name
                        await self._call(lambda c: c.unmark(mark))  # it would outlive the sample
                except _util.SandboxUnavailableError:
                    pass  # relayd is gone: nothing of it is left to settle
        finally:
            for p in list(self._procs):
                p._end()
            for job in list(self._jobs):
                job.cancel()
            await anyio.to_thread.run_sync(self._pool.close)

    def _path(self, p: str) -> str:
        return p if posixpath.isabs(p) else posixpath.join(self._cwd, p)

    # --- inspect's interface

    async def exec(self, cmd: List[str], input: Union[str, bytes, None] = None, cwd: Optional[str] = None,
                   env: Optional[Dict[str, str]] = None, user: Optional[str] = None, timeout: Optional[int] = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> Any:
        if not cmd:
            raise ValueError("exec: cmd is empty; give the program and its arguments")
        user = user or self._user
        try:
            r = await self._call(lambda c: c.execute(
                cmd[0], list(cmd[1:]), environment=env, cwd=self._path(cwd or "."),
                timeout_ms=None if timeout is None else int(timeout * 1000), capture_stderr=True,
                input=input, user=user))
        except BadRequestError as e:
            if user and "user" in str(e):  # inspect's contract: a failed result naming the user
                return _util.ExecResult(success=False, returncode=1, stdout="", stderr=str(e))
            raise
        if r.termination == FRAMEWORK_TIMEOUT:
            raise TimeoutError(f"{cmd[0]}: relayd's deadline of {timeout}s passed; it killed the command and "
                               f"everything it started (settlement {r.settlement})")
        if r.detail and r.exit_code == 126:
            raise PermissionError(errno.EACCES, r.detail, cmd[0])
        result = _result(r)
        limit = _util.SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        for text, truncated in ((result.stdout, r.stdout_truncated), (result.stderr, r.stderr_truncated)):
            if truncated or len(text.encode("utf-8", "surrogateescape")) > limit:
                raise _util.OutputLimitExceededError(
                    limit_str=_util.SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, truncated_output=text[:limit])
        return result

    async def exec_remote(self, cmd: List[str], options: Any = None, *, stream: bool = True) -> Any:
        """inspect's exec_remote over relayd's own stream, stdin and
        executed reply (protocol 4.5, 4.6): no tools injected, no polling.
        stream=False returns an ExecResult (the last MAX_EXEC_OUTPUT_SIZE
        bytes of each stream, as inspect's keeps), TimeoutError at
        ``options.timeout``; stream=True returns a RelaydProcess once
        relayd runs the command."""
        if not cmd:
            raise ValueError("exec_remote: cmd is empty; give the program and its arguments")
        opts = options if options is not None else (
            _util.ExecRemoteStreamingOptions() if stream else _util.ExecRemoteAwaitableOptions())
        user = getattr(opts, "user", None) or self._user
        cwd = self._path(getattr(opts, "cwd", None) or ".")
        if not stream:
            timeout = getattr(opts, "timeout", None)
            r = await self._call(lambda c: c.execute(
                cmd[0], list(cmd[1:]), environment=opts.env, cwd=cwd, user=user, input=opts.input,
                timeout_ms=None if timeout is None else int(timeout * 1000), capture_stderr=True,
                max_output_bytes=_util.SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE, output_keep="tail"))
            if r.termination == FRAMEWORK_TIMEOUT:
                raise TimeoutError(f"{cmd[0]}: relayd's deadline of {timeout}s passed; it killed the command and "
                                   f"everything it started (settlement {r.settlement})")
            return _result(r)
        proc = RelaydProcess(self, cmd, opts, cwd, user)
        await proc._start()
        return proc

    async def connection(self, *, user: Optional[str] = None) -> Any:
        """The command a person runs for a shell in the sample, from a
        terminal: ``relayctl shell`` (make build; on the host) reaching
        relayd through the same bridge, a pty session (protocol 4.7) whose
        ``bash -i`` has a terminal, job control and line editing; ctrl-]
        detaches and ``relayctl shell --session s-N`` comes back. The token
        comes from ``--token-file`` with token_file, else from RELAYD_TOKEN
        in that person's environment: never on the command line."""
        over = self._pool.argv
        if any(not a or any(ch.isspace() for ch in a) for a in over):
            raise NotImplementedError(f"relayctl --over splits its command at spaces: {over} cannot be given to it")
        argv = ["relayctl", "shell", "--over", " ".join(over)]
        if self._cfg.get("token_file"):
            argv += ["--token-file", str(self._cfg["token_file"])]
        if user or self._user:
            argv += ["--user", str(user or self._user)]
        argv += ["--cwd", self._cwd]
        return _util.SandboxConnection(type="relayd", command=shlex.join(argv), container=self._cfg.get("container"))

    async def write_file(self, file: str, contents: Union[str, bytes]) -> None:
        path = self._path(file)
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        # relayd's put replaces a file atomically, which needs only the
        # directory's rights; inspect's contract wants the file's own.
        check = await self.exec(["sh", "-c", '[ ! -f "$1" ] || [ -w "$1" ]', "sh", path])
        if check.returncode == 1:
            raise PermissionError(errno.EACCES, "permission denied (the file is not writable)", file)
        try:
            await self._call(lambda c: c.upload_file(path, data, user=self._user, parents=True))
        except NotFoundError as e:
            raise FileNotFoundError(errno.ENOENT, str(e), file) from e
        except BadRequestError as e:
            raise _file_error(e, file) from e

    async def read_file(self, file: str, text: bool = True) -> Union[str, bytes]:
        try:
            data = await self._call(lambda c: c.download_file(self._path(file), user=self._user))
        except NotFoundError as e:
            raise FileNotFoundError(errno.ENOENT, str(e), file) from e
        except BadRequestError as e:
            raise _file_error(e, file) from e
        if len(data) > _util.SandboxEnvironmentLimits.MAX_READ_FILE_SIZE:
            raise _util.OutputLimitExceededError(
                limit_str=_util.SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, truncated_output=None)
        return data.decode("utf-8") if text else data


class RelaydProcess(_util.ExecRemoteProcess):  # type: ignore[misc]
    """exec_remote's handle, as inspect's ExecRemoteProcess: iterate it once
    for ExecStdout and ExecStderr events in the order relayd streamed them,
    then ExecCompleted (none after kill()); write_stdin and close_stdin with
    ``stdin_open``; kill() ends the command and everything it started (a
    half-close of its connection: relayd settles it) and returns once
    relayd answered. relayd names executions rather than pids:
    ``execution`` is its name. Output nobody iterates is held up to 16 MiB,
    then dropped and counted in ``dropped`` (with what relayd itself
    dropped for a connection that fell behind)."""

    def __init__(self, sandbox: RelaydSandboxEnvironment, cmd: List[str], opts: Any, cwd: str,
                 user: Optional[str]) -> None:
        # Not inspect's __init__: that one readies a JSON-RPC transport to its injected tools.
        self._sandbox = sandbox
        self._cmd = list(cmd)
        self._opts = opts
        self._cwd = cwd
        self._user = user
        self._stdin_open = bool(getattr(opts, "stdin_open", False))
        self._cond = threading.Condition()
        self._events: Deque[Any] = collections.deque()
        self._pending = 0  # bytes held in _events
        self._ended = False  # the worker is done: no more events
        self._error: Optional[BaseException] = None
        self._killed = False
        self._completed = False
        self._iterating = False
        self._stdin_closed = False
        self.execution: Optional[str] = None
        self.dropped = 0
        self._job = _Job()

    @property
    def pid(self) -> int:
        raise RuntimeError(f"relayd names executions, not pids: this one is {self.execution!r} (.execution)")

    # --- the worker thread: the execute call, its events put in _events

    def _push(self, event: Any, size: int = 0) -> None:
        with self._cond:
            if size and self._pending + size > _MAX_PENDING_OUTPUT:
                self.dropped += size
                return
            self._events.append(event)
            self._pending += size
            self._cond.notify_all()

    def _on_output(self, o: Output) -> None:
        self.dropped += o.dropped
        if o.data:
            kind = _util.ExecStderr if o.stream == "stderr" else _util.ExecStdout
            self._push(kind(data=o.data), len(o.data))

    def _on_started(self, execution: str) -> None:
        with self._cond:
            self.execution = execution
            self._cond.notify_all()

    def _work(self) -> None:
        sandbox, job = self._sandbox, self._job
        try:
            c = sandbox._pool.take(job) if job.start() else None
            if c is None:
                return
            try:
                r = c.execute(self._cmd[0], self._cmd[1:], environment=getattr(self._opts, "env", None),
                              cwd=self._cwd, user=self._user, input=getattr(self._opts, "input", None),
                              capture_stderr=True, stream=True, stdin_open=self._stdin_open,
                              on_output=self._on_output, on_started=self._on_started)
                if r.detail:
                    self._push(_util.ExecStderr(data=r.detail + "\n"))
                with self._cond:
                    if not self._killed:
                        self._completed = True
                        self._events.append(_util.ExecCompleted(exit_code=r.exit_code))
            except BaseException as e:
                with self._cond:
                    if not self._killed:
                        self._error = _unavailable(e)
            finally:
                with job.lock:
                    job.client = None
                    reuse = not job.cancelled
                sandbox._pool.give(c, reuse)
        except BaseException as e:
            with self._cond:
                self._error = e
        finally:
            sandbox._jobs.discard(job)
            sandbox._procs.discard(self)
            with self._cond:
                self._ended = True
                self._cond.notify_all()
            job.done.set()

    async def _start(self) -> None:
        sandbox = self._sandbox
        await sandbox._settle_cancelled()
        sandbox._jobs.add(self._job)
        sandbox._procs.add(self)
        threading.Thread(target=self._work, name="relayd-exec-remote", daemon=True).start()
        try:
            await self._wait(lambda: self.execution is not None or self._ended)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.kill()
            raise
        with self._cond:
            if self.execution is None and self._error is not None:
                err, self._error = self._error, None
                raise err

    async def _wait(self, ready: Callable[[], bool]) -> None:
        """Waits, in a thread that only looks (an abandoned one takes nothing), until ready()."""
        def look() -> bool:
            with self._cond:
                return self._cond.wait_for(ready, timeout=5)
        while not await _to_thread(look, self._sandbox._wait_limiter):
            pass

    # --- inspect's interface

    def __aiter__(self) -> "RelaydProcess":
        if self._iterating:
            raise RuntimeError("ExecRemoteProcess can only be iterated once")
        self._iterating = True
        return self

    async def __anext__(self) -> Any:
        while True:
            with self._cond:
                if self._events:
                    event = self._events.popleft()
                    self._pending -= len(getattr(event, "data", "") or "")
                    return event
                if self._ended:
                    if self._error is not None:
                        err, self._error = self._error, None
                        raise err
                    raise StopAsyncIteration
            try:
                await self._wait(lambda: bool(self._events) or self._ended)
            except BaseException as e:
                if _is_cancel(e):
                    with anyio.CancelScope(shield=True):
                        await self.kill()
                raise

    async def write_stdin(self, data: Union[str, bytes]) -> None:
        if not self._stdin_open:
            raise RuntimeError("write_stdin() requires stdin_open=True in ExecRemoteStreamingOptions")
        if self._ended or self._killed or self._stdin_closed:
            raise RuntimeError("Cannot write to stdin: process has terminated" if not self._stdin_closed
                               else "Cannot write to stdin: it is closed")
        await self._send(data.encode("utf-8") if isinstance(data, str) else bytes(data), False)

    async def close_stdin(self) -> None:
        if not self._stdin_open:
            raise RuntimeError("close_stdin() requires stdin_open=True in ExecRemoteStreamingOptions")
        if self._ended or self._killed or self._stdin_closed:
            return
        self._stdin_closed = True
        await self._send(b"", True)

    async def _send(self, data: bytes, eof: bool) -> None:
        c, x = self._job.client, self.execution
        if c is None or x is None:
            raise RuntimeError("Cannot write to stdin: process has terminated")
        client: Client = c
        execution: str = x
        try:
            await _to_thread(lambda: client.write_stdin(execution, data, eof=eof), self._sandbox._limiter)
        except ConnectionLostError as e:
            if not self._ended:
                raise _unavailable(e) from e

    def _end(self) -> None:
        """Ends it without waiting (the sandbox's close)."""
        with self._cond:
            self._killed = not self._completed
            self._cond.notify_all()
        self._job.cancel()

    async def kill(self) -> None:
        """Ends the command and what it started; returns once relayd
        settled it (at most its teardown budget). Nothing when it ended."""
        with self._cond:
            if self._completed or self._killed:
                return
            self._killed = True
            self._cond.notify_all()
        self._job.cancel()
        with anyio.move_on_after(self._sandbox._budget):
            await self._wait(lambda: self._ended)


__all__ = ["RelaydSandboxEnvironment", "RelaydProcess", "bridge_argv", "sandbox_config"]
