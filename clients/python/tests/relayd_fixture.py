"""Starts the real relayd for the tests: TEST_RELAYD_BIN names the binary
(make pytest passes bin/relayd); without it, the tests build one from this
repository with go build, once per run."""

from __future__ import annotations

import asyncio
import atexit
import inspect
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_built: Optional[str] = None


def relayd_binary() -> str:
    global _built
    env = os.environ.get("TEST_RELAYD_BIN")
    if env:
        return env
    if _built is None:
        d = tempfile.mkdtemp(prefix="relayd-pytest-bin-")
        atexit.register(shutil.rmtree, d, True)
        out = os.path.join(d, "relayd")
        subprocess.run(["go", "build", "-o", out, "./cmd/relayd"], cwd=REPO, check=True, timeout=600)
        _built = out
    return _built


def new_token() -> str:
    return "tok-" + secrets.token_hex(16)


def wait_for(what: str, cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


class Relayd:
    """One relayd under test, in listen mode on a free loopback port or, with
    connect, dialing out. Its subjects' leftovers are killed by close()."""

    def __init__(self, *args: str, connect: Optional[str] = None, token: Optional[str] = None,
                 env: Optional[Dict[str, str]] = None, wrap: Sequence[str] = ()) -> None:
        """wrap: a command that execs relayd with its arguments (setpriv ...)."""
        self.dir = tempfile.mkdtemp(prefix="relayd-pytest-")
        self.workspace = os.path.join(self.dir, "workspace")
        os.mkdir(self.workspace)
        self.token = token or new_token()
        token_file = os.path.join(self.dir, "token")
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.token + "\n")
        argv = [*wrap, relayd_binary(), "--token-file", token_file, "--workspace", self.workspace,
                "--state-dir", os.path.join(self.dir, "state"), "--term-grace", "300ms", "--teardown-timeout", "3s"]
        # Its own socket for relayd bridge, not the machine's default one.
        self.socket = os.path.join(self.dir, "relayd.sock")
        argv += ["--connect", connect] if connect else ["--listen", "127.0.0.1:0", "--socket", self.socket]
        argv += list(args)
        extra = env or {}
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYD_")}
        env.update(extra)
        self.log_path = os.path.join(self.dir, "log")
        with open(self.log_path, "wb") as log:
            # Its own session: signals a subject sends to its group reach only relayd.
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                         start_new_session=True)
        self.addr = ""
        if connect is None:
            try:
                wait_for("relayd to listen", self._listening, 20)
            except AssertionError:
                self.close()
                raise

    def _listening(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"relayd exited {self.proc.returncode} at start: {self.logs()}")
        for line in self.logs().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("message") == "listening":
                self.addr = rec["addr"]
                return True
        return False

    def logs(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def descendants(self) -> List[int]:
        """Every live process below relayd: subjects and what they left."""
        children: Dict[int, List[int]] = {}
        for e in os.listdir("/proc"):
            if not e.isdigit():
                continue
            try:
                with open(f"/proc/{e}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2:].split()
            if fields[0] in (b"Z", b"X"):
                continue
            children.setdefault(int(fields[1]), []).append(int(e))
        out: List[int] = []
        todo = [self.proc.pid]
        while todo:
            for c in children.get(todo.pop(), []):
                out.append(c)
                todo.append(c)
        return out

    def kill_leftovers(self) -> None:
        for pid in self.descendants():
            try:
                os.kill(pid, signal.SIGKILL)  # started by this test's relayd
            except ProcessLookupError:
                pass

    def stop(self) -> int:
        """SIGTERM (relayd settles what runs) and relayd's exit status."""
        self.kill_leftovers()
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(15)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill_leftovers()
            self.proc.kill()
        self.proc.wait(15)
        shutil.rmtree(self.dir, ignore_errors=True)


class NoLeaks:
    """Mixin: fails a test that left an object whose finalizer complained
    (an unclosed socket, transport or file: ResourceWarning, which -W error
    turns into an exception that Python can only report as unraisable)."""

    def _leak_setup(self) -> None:
        import sys

        self._unraisable: List[str] = []
        self._old_hook = sys.unraisablehook

        def hook(u: "sys.UnraisableHookArgs") -> None:
            self._unraisable.append(f"{u.exc_type.__name__}: {u.exc_value} ({u.object!r})")

        sys.unraisablehook = hook

    async def asyncSetUp(self) -> None:
        """For the asyncio tests: -X dev runs asyncio in debug mode, which
        logs every callback slower than 0.1 s; on a loaded two-core CI
        machine a test's own callbacks can be, which is noise, not a finding."""
        import asyncio

        asyncio.get_running_loop().slow_callback_duration = 5.0

    def _leak_check(self) -> None:
        import gc
        import sys

        gc.collect()
        sys.unraisablehook = self._old_hook
        if self._unraisable:
            raise AssertionError("left unclosed: " + "; ".join(self._unraisable))


def subject_pythonpath() -> str:
    """Where a Python subject finds relayd_client: the directory this run imports it from."""
    import relayd_client

    return os.path.dirname(os.path.dirname(os.path.abspath(relayd_client.__file__)))


def read_pid(path: str, timeout: float = 10.0) -> int:
    """The pid a subject wrote to path."""
    pid = 0

    def ok() -> bool:
        nonlocal pid
        try:
            with open(path) as f:
                pid = int(f.read().split()[0])
            return True
        except (OSError, ValueError, IndexError):
            return False

    wait_for("pid file " + os.path.basename(path), ok, timeout)
    return pid


def kill_group_from_file(path: str) -> None:
    """SIGKILLs the process group whose leader's pid is written in path,
    only if that process started before the file was written: pids wrap
    (pid_max 32768), and a group that took the pid since is another's."""
    try:
        pid = int(open(path).read().strip())
        written = os.stat(path).st_mtime
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (OSError, ValueError):
        return
    start = int(stat[stat.rfind(b")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - start
    if age + 0.02 < time.time() - written:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


import unittest  # noqa: E402


class RelaydTest(NoLeaks, unittest.TestCase):
    """A test with a leak check and a helper to start relayds that are
    stopped (or killed) when the test ends."""

    def setUp(self) -> None:
        self._leak_setup()
        self.addCleanup(self._leak_check)  # runs last: after every other cleanup

    def relayd(self, *args: str, connect: Optional[str] = None, token: Optional[str] = None,
               env: Optional[Dict[str, str]] = None) -> Relayd:
        d = Relayd(*args, connect=connect, token=token, env=env)
        self.addCleanup(d.close)
        return d


class Blocking:
    """An AsyncClient, or an AsyncSession it opened, called as a Client or
    a Session is: each call runs to its end on an event loop of this
    thread, so that one test body serves both clients (CLIENTS). The
    client's reader runs while a call does; what relayd sends between
    calls waits in the socket."""

    def __init__(self, target: Any, loop: "asyncio.AbstractEventLoop", owns_loop: bool = False) -> None:
        self._target = target
        self._loop = loop
        self._owns_loop = owns_loop

    def __repr__(self) -> str:
        return repr(self._target)

    def __getattr__(self, name: str) -> Any:
        v = getattr(self._target, name)
        if not callable(v):
            return v

        def call(*args: Any, **kwargs: Any) -> Any:
            r = v(*args, **kwargs)
            if inspect.isawaitable(r):
                r = self._loop.run_until_complete(r)  # type: ignore[arg-type]
            return Blocking(r, self._loop) if type(r).__name__ == "AsyncSession" else r

        return call

    def __enter__(self) -> "Blocking":
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        try:
            self._loop.run_until_complete(self._target.__aexit__(et, ev, tb))
        finally:
            if self._owns_loop:
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
                self._loop.run_until_complete(self._loop.shutdown_default_executor())
                self._loop.close()


def open_client(d: Relayd, **kwargs: Any) -> Any:
    """A Client of d, for CLIENTS."""
    from relayd_client import Client

    return Client(d.addr, d.token, **kwargs)


def open_async_client(d: Relayd, **kwargs: Any) -> Any:
    """An AsyncClient of d, connected, behind Blocking, for CLIENTS."""
    from relayd_client import AsyncClient

    loop = asyncio.new_event_loop()
    loop.slow_callback_duration = 5.0  # as NoLeaks.asyncSetUp: a loaded machine is noise
    c = AsyncClient(d.addr, d.token, **kwargs)
    try:
        loop.run_until_complete(c.connect())
    except BaseException:
        loop.close()
        raise
    return Blocking(c, loop, owns_loop=True)


#: The table the tests for both clients run from: one test body, each row
#: under self.subTest(client=name), e.g.
#:
#:     for name, connect in CLIENTS:
#:         with self.subTest(client=name), connect(self.relayd()) as c:
#:             self.assertEqual(c.execute("true").exit_code, 0)
CLIENTS: Tuple[Tuple[str, Callable[..., Any]], ...] = (("Client", open_client), ("AsyncClient", open_async_client))
