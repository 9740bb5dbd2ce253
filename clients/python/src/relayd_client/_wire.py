"""Framing and message building shared by Client and AsyncClient: no I/O."""

from __future__ import annotations

import base64
import hmac
import json
import os
import sys
import socket
import warnings
from dataclasses import dataclass
from typing import (IO, Any, AsyncIterable, Callable, Dict, Generic, Iterable, Iterator, List, Mapping, Optional, Protocol,
                    Sequence, Tuple, Type, TypeVar, Union)

from .errors import CLOSING, IgnoredFieldsWarning, ProtocolError, UnexpectedReplyError, error_for
from .results import Changes, Executed, Marked, Output, Ready, Restored, Status, Survivor, Verified, ignored_of

Address = Union[str, Tuple[str, int]]

# The longest reply line read: relayd returns at most --max-stdout-bytes and
# --max-stderr-bytes (1 MiB each by default) of text that JSON escaping can
# grow six-fold. A longer line is a broken peer, not a reply.
MAX_REPLY_LINE = 64 << 20

# A dial-out relayd's first line (its ready) may be as long as a reply, since
# it carries the --instruction-file (relayd allows 8 MiB). But until its
# ready a peer is nobody: a listener reads its first MAX_HELLO bytes freely,
# and more only while it holds one of MAX_LONG_HELLOS slots shared by the
# listener (another is closed at once). So peers that are not relayd can make
# a listener hold at most max_pending * MAX_HELLO + MAX_LONG_HELLOS *
# MAX_REPLY_LINE bytes.
MAX_HELLO = 64 << 10
MAX_LONG_HELLOS = 4
# How long a listener keeps a relayd whose trial has not called accept yet.
DEFAULT_HOLD_TIMEOUT = 60.0
# A listener's accept backlog (the kernel caps it at net.core.somaxconn):
# a fleet of relayds dialling at once waits there while every pending slot
# is taken, rather than being refused.
LISTEN_BACKLOG = 4096
# While peers wait for a pending slot, a handshake silent this long (seconds)
# gives its slot up: a relayd sends its ready as soon as it is connected.
CROWDED_HELLO = 1.0

# relayd's --teardown-timeout default: how long settling a scope may take.
DEFAULT_TEARDOWN_BUDGET = 10.0
# Beyond the teardown deadline: relayd's "small constant" (rule 6.7) plus the network.
SETTLE_SLACK = 5.0
# How long a reply that relayd writes at once (ready, verified, error) may take.
DEFAULT_REPLY_TIMEOUT = 30.0
# Beyond it, how long a mark, changes or restore (protocol 4.9) may take: a walk
# of a tree, which a mark may copy whole.
FS_REPLY_TIMEOUT = 600.0

OnOutput = Callable[[Output], None]
OnStarted = Callable[[str], None]
Reply = Union[Ready, Executed, Verified, Status, Marked, Changes, Restored, Dict[str, Any]]
# What verify(keep=...) takes: a Survivor as relayd listed it, or a
# (pid, start) pair copied from one (protocol 4.6: relayd keeps a process
# only when both match; a pid alone may name another process by then).
KeepEntry = Union[Survivor, Tuple[int, int]]
# What execute(stdin=...) streams: a binary file object read in chunks, or
# an iterable of bytes (AsyncClient also takes an async iterable).
StdinSource = Union[IO[bytes], Iterable[bytes]]
AsyncStdinSource = Union[IO[bytes], Iterable[bytes], AsyncIterable[bytes]]
# The most one stdin message carries: its base64 (about 342 KiB) fits
# relayd's default --max-line-bytes (1 MiB) with room.
STDIN_CHUNK = 256 << 10


def parse_address(address: Address) -> Tuple[str, int]:
    """("host", port) from "host:port", "[::1]:port" or a (host, port) pair."""
    if isinstance(address, tuple):
        return str(address[0]), int(address[1])
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"relayd address {address!r}: want HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def encode(msg: Mapping[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


def decode(line: bytes) -> Dict[str, Any]:
    try:
        msg = json.loads(line)
    except ValueError as e:
        raise UnexpectedReplyError(f"relayd sent a line that is not JSON: {e}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("kind"), str):
        raise UnexpectedReplyError("relayd sent a JSON line that is not a message (no kind)")
    return msg


def hello(line: bytes) -> Optional[Tuple[str, Dict[str, Any]]]:
    """A dialling relayd's first line (listen mode): its token and its
    ready without it (the client's own token from there on, not its
    replies'), or None for anything else (the peer is dropped)."""
    try:
        msg = decode(line)
    except UnexpectedReplyError:
        return None
    token = msg.pop("token", None)
    if msg["kind"] != "ready" or not isinstance(token, str):
        return None
    return token, msg


def check_token(msg: Dict[str, Any], token: str) -> None:
    """relayd's messages carry the token on an authenticated connection; a
    different one means this is not the relayd the controller meant. The
    token is then taken out of msg: no reply the caller gets (a dict, a
    dataclass's raw) holds it, so printing one never prints the secret."""
    t = msg.pop("token", None)
    if t is not None and not (isinstance(t, str) and hmac.compare_digest(t.encode(), token.encode())):
        raise UnexpectedReplyError(f"relayd's {msg.get('kind')} message carries another token")


def keepalive(sock: socket.socket) -> None:
    """TCP keepalive, so that a relayd whose host vanished is noticed while
    a long execution runs (about 40 s on Linux). Not for a socket pair to a
    command (Client.over_command): its end is the command's."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        opt = getattr(socket, name, None)
        if opt is not None:
            sock.setsockopt(socket.IPPROTO_TCP, opt, value)


def execute_message(
    command: Union[str, Sequence[str]],
    args: Optional[Sequence[str]],
    *,
    environment: Optional[Mapping[str, str]],
    credentials: Optional[Mapping[str, str]],
    result_token: Optional[str],
    capture_stdout: bool,
    cwd: Optional[str],
    timeout_ms: Optional[int],
    capture_stderr: Optional[bool],
    stream: Optional[bool],
    on_exit: Optional[str],
    detach_ms: Optional[int],
    input: Union[str, bytes, None] = None,
    user: Optional[str] = None,
    max_output_bytes: Optional[int] = None,
    output_keep: Optional[str] = None,
    pty: Optional[Tuple[int, int]] = None,
    limits: Optional[Mapping[str, int]] = None,
) -> Dict[str, Any]:
    """The execute message; relayd validates it (a bad one is BadRequestError).
    ``input`` (protocol 4.6) goes as text when it is str, as base64 when bytes;
    ``pty`` (4.7) is the terminal's (rows, cols)."""
    if not isinstance(command, str):
        if args is not None:
            raise TypeError("execute: give the command as a list, or a string and args, not both")
        command, *rest = command
        args = rest
    msg: Dict[str, Any] = {"kind": "execute", "command": command, "args": list(args or ())}
    optional = {
        "environment": dict(environment) if environment is not None else None,
        "credentials": dict(credentials) if credentials is not None else None,
        "resultToken": result_token,
        "cwd": cwd,
        "timeoutMs": timeout_ms,
        "captureStderr": capture_stderr,
        "stream": stream,
        "onExit": on_exit,
        "detachMs": detach_ms,
        "user": user,
        "maxOutputBytes": max_output_bytes,
        "outputKeep": output_keep,
        "limits": dict(limits) if limits is not None else None,
    }
    msg.update({k: v for k, v in optional.items() if v is not None})
    if isinstance(input, bytes):
        msg["input"] = base64.b64encode(input).decode("ascii")
        msg["inputEncoding"] = "base64"
    elif input is not None:
        msg["input"] = input
    if not capture_stdout:
        msg["captureStdout"] = False
    if pty is not None:
        rows, cols = pty
        msg["pty"] = {"rows": rows, "cols": cols}
    return msg


# RESIZE_ID is the id of every resize message: no call has it (calls are
# numbered), so relayd's refusal of one is told from the running call's
# errors and only warned about.
RESIZE_ID = "resize"


def resize_message(token: str, execution: str, rows: int, cols: int) -> bytes:
    """One resize line (protocol 4.7)."""
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1000:
            raise ValueError(f"resize: {name} must be an integer from 1 to 1000")
    return encode({"token": token, "kind": "resize", "id": RESIZE_ID, "execution": execution, "rows": rows, "cols": cols})


def aside(msg: Mapping[str, Any]) -> bool:
    """Whether msg answers no call, and is dealt with here: relayd's
    refusal of a resize (no such execution, no terminal), a warning rather
    than the running call's error, or a message for no request (a dial-out
    relayd's unprompted ready). An error without an id is a call's."""
    mid = msg.get("id")
    if mid == RESIZE_ID and msg["kind"] == "error":
        warnings.warn(f"relayd refused a resize: {error_from(msg)}", RuntimeWarning, stacklevel=4)
        return True
    return mid is None and msg["kind"] != "error"


def check_stdin(source: object) -> None:
    """Refuses what looks like data rather than a source, before anything is sent."""
    if isinstance(source, (str, bytes, bytearray, memoryview)):
        raise TypeError("execute: stdin= takes a binary file object or an iterable of bytes; give bytes as input=")


def stdin_pieces(source: StdinSource) -> Iterator[bytes]:
    """The source's bytes in pieces of at most STDIN_CHUNK, empty ones left out."""
    read = getattr(source, "read", None)
    if read is not None:
        while True:
            b = read(STDIN_CHUNK)
            if not b:
                return
            yield bytes(b)
    for b in source:
        yield from split_piece(b)


def split_piece(b: bytes) -> Iterator[bytes]:
    view = memoryview(b).cast("B")
    for i in range(0, len(view), STDIN_CHUNK):
        yield bytes(view[i:i + STDIN_CHUNK])


def stdin_message(token: str, execution: str, data: bytes, eof: bool) -> bytes:
    """One stdin line (protocol 4.6): data as base64, eof on the last."""
    msg: Dict[str, Any] = {"token": token, "kind": "stdin", "execution": execution}
    if data:
        msg["data"] = base64.b64encode(data).decode("ascii")
        msg["encoding"] = "base64"
    if eof:
        msg["eof"] = True
    return encode(msg)


def execute_wait(timeout_ms: Optional[int], teardown_budget: float, timeout: Optional[float]) -> Optional[float]:
    """How long to wait for an executed reply: the caller's timeout if given;
    else, with timeoutMs, the deadline plus the teardown budget plus slack
    (relayd settles before it replies); else no limit (the subject's own time)."""
    if timeout is not None:
        return timeout
    if timeout_ms is not None:
        return timeout_ms / 1000.0 + teardown_budget + SETTLE_SLACK
    return None


class Call:
    """One request awaiting its reply: takes the messages relayd sends for
    its id and says when it is answered."""

    def __init__(self, id: int, want: str, on_output: Optional[OnOutput] = None, on_started: Optional[OnStarted] = None) -> None:
        self.id = id
        self.want = want
        self.on_output = on_output
        self.on_started = on_started
        self.execution = ""
        # The answer's "ignored" (protocol 4.6): fields relayd did not know.
        self.ignored: Tuple[str, ...] = ()

    def take(self, msg: Dict[str, Any], raw: bool = False) -> Optional[Reply]:
        """The result when msg answers this call (msg itself when raw), None
        for an intermediate message (started, output); raises for an error."""
        kind = msg["kind"]
        if kind in ("error", self.want):
            self.ignored = ignored_of(msg)
        if raw and kind == self.want:
            return msg
        if kind == "error":
            err = error_from(msg)
            err.ignored = self.ignored
            raise err
        if kind == "started":
            self.execution = str(msg.get("execution", ""))
            if self.on_started is not None:
                self.on_started(self.execution)
            return None
        if kind == "output":
            if self.on_output is not None:
                self.on_output(Output._parse(msg))
            return None
        if kind != self.want:
            raise UnexpectedReplyError(f"relayd answered a {self.want} request with {kind!r}")
        if kind == "ready":
            return Ready._parse(msg)
        if kind == "executed":
            return Executed._parse(msg)
        if kind == "verified":
            return Verified._parse(msg)
        if kind == "status":
            return Status._parse(msg)
        if kind == "marked":
            return Marked._parse(msg)
        if kind == "changes":
            return Changes._parse(msg)
        if kind == "restored":
            return Restored._parse(msg)
        return msg


WANT = {"ready": "ready", "execute": "executed", "verify": "verified", "attach": "executed", "status": "status",
        "open": "opened", "close": "closed", "mark": "marked", "unmark": "unmarked", "changes": "changes",
        "restore": "restored"}


def open_message(shell: Optional[str], user: Optional[str], cwd: Optional[str],
                 environment: Optional[Mapping[str, str]], credentials: Optional[Mapping[str, str]],
                 limits: Optional[Mapping[str, int]]) -> Dict[str, Any]:
    """An open request (protocol 4.7) without token and id."""
    msg: Dict[str, Any] = {"kind": "open"}
    for k, v in (("shell", shell), ("user", user), ("cwd", cwd)):
        if v is not None:
            msg[k] = v
    for k, m in (("environment", environment), ("credentials", credentials), ("limits", limits)):
        if m:
            msg[k] = dict(m)
    return msg


def run_message(session: str, script: str, timeout_ms: Optional[int], input: Union[str, bytes, None],
                max_output_bytes: Optional[int]) -> Dict[str, Any]:
    """An execute of a shell session's command (protocol 4.7)."""
    if not isinstance(script, str):
        raise TypeError("run: script must be a str")
    msg: Dict[str, Any] = {"kind": "execute", "session": session, "script": script}
    if timeout_ms is not None:
        msg["timeoutMs"] = timeout_ms
    if max_output_bytes is not None:
        msg["maxOutputBytes"] = max_output_bytes
    if input is not None:
        if isinstance(input, bytes):
            try:
                msg["input"] = input.decode("utf-8")
            except UnicodeDecodeError:
                msg["input"] = base64.b64encode(input).decode("ascii")
                msg["inputEncoding"] = "base64"
        else:
            msg["input"] = input
    return msg


# The clients' own files: a warning points at the first line outside them.
_HERE = os.path.dirname(__file__)
_CLIENT_FILES = frozenset(("client.py", "aio.py", "_ops.py", "_dirs.py", "_files.py", "_wire.py"))


def callers_level() -> int:
    """The stacklevel, for a warning issued where this is called, of the
    line that called the client: the first frame outside the clients'
    files, however deep the call went (a plan of _ops, a coroutine)."""
    level, f = 1, sys._getframe(1)
    while f.f_back is not None and os.path.dirname(f.f_code.co_filename) == _HERE \
            and os.path.basename(f.f_code.co_filename) in _CLIENT_FILES:
        level, f = level + 1, f.f_back
    return level


def warn_ignored(call: Call, kind: str) -> None:
    """Warn (IgnoredFieldsWarning) when relayd's answer to call named fields
    it did not know; stacklevel points at the line that called the client."""
    if call.ignored:
        names = ", ".join(repr(n) for n in call.ignored)
        warnings.warn(IgnoredFieldsWarning(
            f"relayd ignored fields of a {kind} request that it does not know: {names} "
            "(misspelled, or newer than that relayd; protocol 4.6)"), stacklevel=callers_level())


def error_from(msg: Mapping[str, Any]) -> ProtocolError:
    e = msg.get("error")
    if not isinstance(e, dict):
        e = {}
    return error_for(str(e.get("category", "")), str(e.get("message", "")), msg.get("id"))


def closes(err: BaseException) -> bool:
    """relayd closes the connection after these errors."""
    return isinstance(err, ProtocolError) and err.category in CLOSING


def keep_entry(k: KeepEntry) -> Dict[str, int]:
    """One entry of a verify's keep: {"pid","start"}. A survivor relayd
    reported without a start (it ended) goes with start 0, which keeps
    nothing."""
    if isinstance(k, Survivor):
        return {"pid": k.pid, "start": k.start or 0}
    if (isinstance(k, tuple) and len(k) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in k)):
        return {"pid": k[0], "start": k[1]}
    raise TypeError(f"keep entry {k!r}: want a Survivor or a (pid, start) pair as relayd's survivors list them;"
                    " a bare pid may name another process by now")


def verify_message(all: bool, survivors: Optional[str], keep: Sequence[KeepEntry],
                   files: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """A verify request; with ``all``, the trial boundary of protocol 4.6
    (and with ``files``, its filesystem half, 4.9)."""
    if survivors not in (None, "leave", "settle"):
        raise ValueError(f"survivors={survivors!r}: want 'leave' or 'settle'")
    if (survivors is not None or keep or files is not None) and not all:
        raise ValueError("survivors, keep and files belong to the trial boundary: give all=True")
    msg: Dict[str, Any] = {"kind": "verify"}
    if all:
        msg["all"] = True
    if survivors is not None:
        msg["survivors"] = survivors
    if keep:
        msg["keep"] = [keep_entry(k) for k in keep]
    if files is not None:
        msg["files"] = files_field(files)
    return msg


# Paths a mark request names: one path, or several (str or path objects).
PathArg = Union[str, "os.PathLike[str]"]
Paths = Union[PathArg, Iterable[PathArg]]
# What verify(files=...) takes (protocol 4.9): {"mark": NAME, "protect": [paths], "restore": bool}.
BoundaryFilesSpec = Mapping[str, Any]


def files_field(files: BoundaryFilesSpec) -> Dict[str, Any]:
    """verify's "files" from the caller's mapping, checked for its shape
    here (relayd checks the rest): a mark's name, the paths to protect
    (a str alone is one path), restore true or false (default false)."""
    if not isinstance(files, Mapping):
        raise TypeError(f"files={files!r}: want {{'mark': NAME, 'protect': [paths], 'restore': bool}}")
    unknown = sorted(set(files) - {"mark", "protect", "restore"})
    if unknown:
        raise ValueError(f"files: unknown keys {unknown}: want 'mark', 'protect' and 'restore'")
    mark, protect, restore = files.get("mark"), files.get("protect"), files.get("restore", False)
    if not isinstance(mark, str) or not mark:
        raise ValueError("files: 'mark' must name a mark")
    if not isinstance(restore, bool):
        raise TypeError("files: 'restore' must be True or False")
    return {"mark": mark, "protect": path_list("files['protect']", protect, True), "restore": restore}


def path_list(what: str, paths: Optional[Paths], required: bool = False) -> List[str]:
    """A list of paths as the wire takes it: a str (or path object) alone
    is one path, not its characters."""
    if paths is None:
        if required:
            raise ValueError(f"{what}: give at least one absolute path")
        return []
    items: Iterable[PathArg] = [paths] if isinstance(paths, (str, os.PathLike)) else paths
    out = []
    for p in items:
        p = os.fspath(p)
        if not isinstance(p, str):
            raise TypeError(f"{what}: {p!r}: want str paths (relayd takes paths as JSON text)")
        out.append(p)
    if required and not out:
        raise ValueError(f"{what}: give at least one absolute path")
    return out


def mark_message(name: str, paths: Paths, exclude: Optional[Paths], keep: Optional[Paths]) -> Dict[str, Any]:
    """A mark request (protocol 4.9) without token and id."""
    msg: Dict[str, Any] = {"kind": "mark", "name": name, "paths": path_list("mark: paths", paths, True)}
    if exclude is not None:
        msg["exclude"] = path_list("mark: exclude", exclude)
    if keep is not None:
        msg["keep"] = path_list("mark: keep", keep)
    return msg


def mark_use_message(kind: str, mark: str, paths: Optional[Paths]) -> Dict[str, Any]:
    """A changes or restore request (protocol 4.9): the mark, narrowed to paths."""
    msg: Dict[str, Any] = {"kind": kind, "mark": mark}
    if paths is not None:
        msg["paths"] = path_list(f"{kind}: paths", paths, True)
    return msg


# -- requests, sans I/O: what to send, which reply ends it, how long to
# wait, what it parses into. Client and AsyncClient send them (_call). --

T = TypeVar("T")
RAW: Type[Dict[str, Any]] = dict  # the reply as relayd sent it


class Timing(Protocol):
    """A client's waits (seconds)."""
    reply_timeout: float
    teardown_budget: float


@dataclass(frozen=True)
class Request(Generic[T]):
    """One request: msg (without token and id), the kind of the reply that
    answers it (want), how long to wait for it (None: no limit) and what
    that reply is (a results class, or RAW)."""
    msg: Dict[str, Any]
    want: str
    wait: Optional[float]
    result: Type[T]

    @property
    def raw(self) -> bool:
        return self.result is RAW

    def of(self, r: Reply) -> T:
        """The reply Call.take returned, as result."""
        assert isinstance(r, self.result)
        return r


def reply_wait(t: Timing, timeout: Optional[float]) -> float:
    return t.reply_timeout if timeout is None else timeout


def fs_wait(t: Timing, timeout: Optional[float]) -> float:
    """How long a mark, changes or restore may take: a walk of a tree."""
    return t.reply_timeout + FS_REPLY_TIMEOUT if timeout is None else timeout


def ready_request(t: Timing, timeout: Optional[float]) -> Request[Ready]:
    return Request({"kind": "ready"}, "ready", reply_wait(t, timeout), Ready)


def execute_request(t: Timing, msg: Dict[str, Any], timeout_ms: Optional[int], timeout: Optional[float],
                    budgets: int = 1) -> Request[Executed]:
    """An execute (a session's command settles twice: budgets=2)."""
    return Request(msg, "executed", execute_wait(timeout_ms, budgets * t.teardown_budget, timeout), Executed)


def attach_request(execution: str, timeout: Optional[float]) -> Request[Executed]:
    return Request({"kind": "attach", "execution": execution}, "executed", timeout, Executed)


def verify_request(t: Timing, all: bool, survivors: Optional[str], keep: Sequence[KeepEntry],
                   files: Optional[BoundaryFilesSpec], timeout: Optional[float]) -> Request[Verified]:
    """verify, or with all the boundary: relayd settles (twice for all) and,
    with files, walks the trees before it answers."""
    msg = verify_message(all, survivors, keep, files)
    wait = timeout if timeout is not None else t.reply_timeout + t.teardown_budget * (2 if all else 1)
    if files is not None and timeout is None:
        wait += FS_REPLY_TIMEOUT
    return Request(msg, "verified", wait, Verified)


def status_request(t: Timing, timeout: Optional[float]) -> Request[Status]:
    return Request({"kind": "status"}, "status", reply_wait(t, timeout), Status)


def mark_request(t: Timing, name: str, paths: Paths, exclude: Optional[Paths], keep: Optional[Paths],
                 timeout: Optional[float]) -> Request[Marked]:
    return Request(mark_message(name, paths, exclude, keep), "marked", fs_wait(t, timeout), Marked)


def changes_request(t: Timing, mark: str, paths: Optional[Paths], timeout: Optional[float]) -> Request[Changes]:
    return Request(mark_use_message("changes", mark, paths), "changes", fs_wait(t, timeout), Changes)


def restore_request(t: Timing, mark: str, paths: Optional[Paths], timeout: Optional[float]) -> Request[Restored]:
    return Request(mark_use_message("restore", mark, paths), "restored", fs_wait(t, timeout), Restored)


def unmark_request(t: Timing, name: str, timeout: Optional[float]) -> Request[Dict[str, Any]]:
    return Request({"kind": "unmark", "name": name}, "unmarked", fs_wait(t, timeout), RAW)


def open_request(t: Timing, shell: Optional[str], user: Optional[str], cwd: Optional[str],
                 environment: Optional[Mapping[str, str]], credentials: Optional[Mapping[str, str]],
                 limits: Optional[Mapping[str, int]], pty: Optional[Tuple[int, int]],
                 timeout: Optional[float]) -> Request[Dict[str, Any]]:
    msg = open_message(shell, user, cwd, environment, credentials, limits)
    if pty is not None:
        msg["pty"] = {"rows": pty[0], "cols": pty[1]}
    return Request(msg, "opened", reply_wait(t, timeout), RAW)


def opened(r: Mapping[str, Any]) -> Tuple[str, str, str]:
    """A session's name, shell and cwd from relayd's opened reply."""
    return str(r.get("session", "")), str(r.get("shell", "")), str(r.get("cwd", ""))


def any_request(message: Mapping[str, Any], timeout: Optional[float]) -> Request[Dict[str, Any]]:
    """Any message: the reply it waits for is WANT's, else a reply of its kind."""
    kind = str(message.get("kind", ""))
    return Request(dict(message), WANT.get(kind, kind), timeout, RAW)


def run_request(t: Timing, session: str, script: str, timeout_ms: Optional[int], input: Union[str, bytes, None],
                max_output_bytes: Optional[int], stream: Optional[bool], timeout: Optional[float]) -> Request[Executed]:
    """A session's command."""
    msg = run_message(session, script, timeout_ms, input, max_output_bytes)
    if stream is not None:
        msg["stream"] = stream
    return execute_request(t, msg, timeout_ms, timeout, budgets=2)


def close_request(t: Timing, session: str, timeout: Optional[float]) -> Request[Dict[str, Any]]:
    wait = timeout if timeout is not None else t.reply_timeout + t.teardown_budget
    return Request({"kind": "close", "session": session}, "closed", wait, RAW)
