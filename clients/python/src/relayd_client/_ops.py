"""The clients' features, sans I/O: what upload_file, download_file (and
_to, _as), upload_dir, download_dir and recycle do, written once as plans
(generators, as h11 and httpcore keep protocol logic apart from I/O) that
yield the few things only a client's I/O can do (Ask, PutLines, PutBody,
Fetch, Local) and are sent each one's result (or thrown its exception).
Client and AsyncClient are the two drivers: each runs a plan with its own
I/O (_drive, _do). The directory plans of _dirs (Serves, Shell, Put, Get)
are turned into these here. This module imports neither client."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import IO, Any, Dict, FrozenSet, Generator, Generic, Iterator, Optional, Protocol, TypeVar, Union

from . import _dirs, _files, _wire
from ._files import FileInfo
from .results import Executed, Ready, Recycled

T = TypeVar("T")
O = TypeVar("O")
C = TypeVar("C")


class Conn(_wire.Timing, Protocol):
    """What a plan reads and keeps of a client: its waits, the ready
    relayd sent first (a dial-out relayd's) and relayd's extensions,
    asked once."""
    first_ready: Optional[Ready]
    _extensions: Optional[FrozenSet[str]]


@dataclass(frozen=True)
class Ask(Generic[T]):
    """Send req and wait for its reply (the client's _call): a T."""
    req: _wire.Request[T]


@dataclass(frozen=True)
class PutLines:
    """A put as lines (msgs, without token and id, all of one id): sent
    until relayd answers (a refusal stops it), then its stored reply, a
    dict, waited for up to wait seconds."""
    msgs: Iterator[Dict[str, Any]]
    wait: float


@dataclass(frozen=True)
class PutBody:
    """A put of one raw body: the line msg, then pieces, with no other line
    between them (sent whole even when relayd refuses: it drops them);
    its stored reply, a dict."""
    msg: Dict[str, Any]
    pieces: Iterator[bytes]
    wait: float


@dataclass(frozen=True)
class Fetch:
    """A get (msg) whose content goes to out as it comes (hashing: sha256
    checked), raw body included; timeout bounds the whole transfer. The
    checked FileInfo."""
    msg: Dict[str, Any]
    out: IO[bytes]
    hashing: bool
    timeout: Optional[float]


Op = Union["Ask[Any]", PutLines, PutBody, Fetch, _dirs.Local]
Plan = Generator[Op, Any, T]


class Driver(Generic[O, T]):
    """Steps a plan for a client::

        d = Driver(plan)
        while (op := d.next()) is not None:
            with d.doing():
                d.value = do(op)  # or await do(op)
        return d.result

    what doing() catches is thrown into the plan, which may handle it."""

    def __init__(self, plan: Generator[O, Any, T]) -> None:
        self.plan = plan
        self.value: Any = None
        self.exc: Optional[BaseException] = None
        self.result: T

    def next(self) -> Optional[O]:
        """The plan's next request, given the last one's result (or
        exception): None when the plan is done (its value is result)."""
        value, exc, self.value, self.exc = self.value, self.exc, None, None
        try:
            return self.plan.throw(exc) if exc is not None else self.plan.send(value)
        except StopIteration as e:
            self.result = e.value
            return None

    @contextlib.contextmanager
    def doing(self) -> Iterator[None]:
        try:
            yield
        except BaseException as e:
            self.exc = e


class SessionCore(Generic[C]):
    """What Session and AsyncSession share: the shell session name opened
    on client (its shell, and its directory as the last command left it)."""

    def __init__(self, client: C, name: str, shell: str, cwd: str) -> None:
        self.client, self.name, self.shell, self.cwd = client, name, shell, cwd

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def _ran(self, r: Executed) -> Executed:
        """A command's reply, its cwd kept as the session's."""
        if r.cwd:
            self.cwd = r.cwd
        return r


def serves(c: Conn, extension: str, timeout: Optional[float]) -> Plan[bool]:
    """Whether relayd lists extension in its ready (asked once)."""
    if c._extensions is None:
        ready = c.first_ready or (yield Ask(_wire.ready_request(c, timeout)))
        c._extensions = frozenset(ready.extensions)
    return extension in c._extensions


def upload_file(c: Conn, path: str, data: _files.Source, mode: Optional[int], user: Optional[str], parents: bool,
                timeout: Optional[float], digest: Optional[str]) -> Plan[FileInfo]:
    """Client.upload_file: one raw body where relayd serves "body" and the
    size is known beforehand, else put lines."""
    tally = _files.Tally(_files.wants_digest(digest))
    size = _files.body_size(data)
    if size is not None and (yield from serves(c, _files.BODY, timeout)):
        return (yield from upload_body(c, path, data, size, mode, user, parents, timeout, digest=digest))
    msgs = _files.put_messages(path, data, mode=mode, user=user, parents=parents, tally=tally)
    r = yield PutLines(msgs, _wire.reply_wait(c, timeout))
    return _files.stored(r, tally.n, tally.hexdigest())


def upload_body(c: Conn, path: str, data: _files.Source, size: int, mode: Optional[int], user: Optional[str],
                parents: bool, timeout: Optional[float], fmt: Optional[str] = None, links: Optional[str] = None,
                digest: Optional[str] = None) -> Plan[FileInfo]:
    """A put of one raw body (protocol 4.6, "Bulk bodies"); fmt "tar" for a tree."""
    tally = _files.Tally(_files.wants_digest(digest))
    msg = _files.put_body_message(path, size, mode=mode, user=user, parents=parents, fmt=fmt, links=links,
                                  digest=tally.hashing)
    r = yield PutBody(msg, _files.body_pieces(data, size, tally), _wire.reply_wait(c, timeout))
    return _files.stored(r, tally.n, tally.hexdigest())


def download(c: Conn, path: str, out: IO[bytes], user: Optional[str], timeout: Optional[float],
             fmt: Optional[str] = None, digest: Optional[str] = None) -> Plan[FileInfo]:
    """download_file_to, or with fmt "tar" the directory path packed by relayd."""
    hashing = _files.wants_digest(digest)
    body = fmt is None and (yield from serves(c, _files.BODY, timeout))
    info: FileInfo = yield Fetch(_files.get_message(path, user, hashing, fmt, body), out, hashing, timeout)
    return info


def download_file(c: Conn, path: str, user: Optional[str], timeout: Optional[float],
                  digest: Optional[str]) -> Plan[bytes]:
    buf = io.BytesIO()
    yield from download(c, path, buf, user, timeout, digest=digest)
    return buf.getvalue()


def download_file_as(c: Conn, path: str, local_path: str, user: Optional[str], timeout: Optional[float],
                     digest: Optional[str]) -> Plan[FileInfo]:
    """Written beside local_path and renamed into place once checked."""
    with _files.local_replacement(local_path) as f:
        return (yield from download(c, path, f, user, timeout, digest=digest))


def recycle(c: Conn, mark: str, timeout: Optional[float]) -> Plan[Recycled]:
    """The boundary settling every survivor, then a restore of every kept subtree of mark."""
    v = yield Ask(_wire.verify_request(c, True, "settle", (), None, timeout))
    restored = yield Ask(_wire.restore_request(c, mark, None, timeout))
    return Recycled(boundary=v, restored=restored)


def tree(c: Conn, plan: _dirs.Plan) -> Plan[None]:
    """A directory plan of _dirs (upload_dir, download_dir), its requests
    done with the plans above."""
    d: Driver[_dirs.Op, None] = Driver(plan)
    while (op := d.next()) is not None:
        with d.doing():
            d.value = yield from _tree_op(c, op)


def _tree_op(c: Conn, op: _dirs.Op) -> Plan[Any]:
    if isinstance(op, _dirs.Serves):
        return (yield from serves(c, op.extension, op.timeout))
    if isinstance(op, _dirs.Shell):
        msg = _wire.execute_message(
            "sh", ["-c", op.script, "sh", *op.args], environment=None, credentials=None, result_token=None,
            capture_stdout=True, cwd=None, timeout_ms=None, capture_stderr=True, stream=None, on_exit=None,
            detach_ms=None, user=op.user)
        return (yield Ask(_wire.execute_request(c, msg, None, op.timeout)))
    if isinstance(op, _dirs.Put):
        if op.tar:
            return (yield from upload_body(c, op.path, op.f, op.size, None, op.user, True, op.timeout, fmt="tar",
                                           links=op.links))
        return (yield from upload_file(c, op.path, op.f, op.mode, op.user, False, op.timeout, None))
    if isinstance(op, _dirs.Get):
        return (yield from download(c, op.path, op.f, op.user, op.timeout, fmt=op.fmt))
    return (yield op)


def stdin_fields(what: str, msg: Dict[str, Any], stdin: object, stdin_open: bool = False) -> bool:
    """Marks msg as taking stdin when a stdin= source or stdin_open asks
    for it (they exclude each other); whether a source is to be streamed."""
    if stdin_open and stdin is not None:
        raise TypeError(f"{what}: stdin= and stdin_open=True exclude each other")
    if stdin_open:
        msg["stdin"] = True
    if stdin is None:
        return False
    _wire.check_stdin(stdin)
    msg["stdin"] = True
    return True

