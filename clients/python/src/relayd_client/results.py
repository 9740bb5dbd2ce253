"""Replies as dataclasses: Ready, Executed (with Survivor and Diagnostic),
Verified, and Output for streamed output (protocol sections 4 and 4.5);
Marked, Changes (with FileEntry), Restored and Recycled for marks (4.9).

Fields are read leniently: a field relayd did not send is None (or empty),
so that a newer client works with an older relayd, and ``raw`` keeps the
whole message for fields this client does not know yet."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from .errors import UnexpectedReplyError

__all__ = [
    "Ready",
    "Executed",
    "Verified",
    "Survivor",
    "Diagnostic",
    "Usage",
    "ExecutionUsage",
    "Output",
    "Marked",
    "Changes",
    "FileEntry",
    "Restored",
    "BoundaryFiles",
    "Recycled",
    "EXITED",
    "FRAMEWORK_TIMEOUT",
    "NONE",
    "SETTLED",
    "DESTROYED",
    "FAILED",
]

Id = Union[int, str]

# termination
EXITED = "exited"
FRAMEWORK_TIMEOUT = "framework_timeout"
# settlement
NONE = "none"
SETTLED = "settled"
DESTROYED = "destroyed"
FAILED = "failed"


def _get(msg: Mapping[str, Any], name: str, typ: Any, default: Any = None) -> Any:
    v = msg.get(name, default)
    if v is None:
        return default
    if typ is int and isinstance(v, bool):
        raise UnexpectedReplyError(f"relayd's {msg.get('kind')} reply: field {name!r} is not an integer")
    if not isinstance(v, typ):
        raise UnexpectedReplyError(f"relayd's {msg.get('kind')} reply: field {name!r} has the wrong type")
    return v


def ignored_of(msg: Mapping[str, Any]) -> Tuple[str, ...]:
    """A reply's ``ignored`` (protocol 4.6): the request's fields relayd did not know."""
    return tuple(str(n) for n in _get(msg, "ignored", list, []))


@dataclass(frozen=True)
class Survivor:
    """A process of an exited subject's scope that was left running.

    ``uid`` is its real uid, ``listens`` the local TCP ports it listens on,
    ``start`` its start time in milliseconds since the Unix epoch,
    ``session`` its session id, ``execution`` the execution whose scope it
    is of; each is None (``listens`` empty) when
    relayd did not say (an older relayd, or a process that ended while the
    reply was built). ``argv_unavailable``: its command line could not be
    read (a zombie, or a process in the middle of exec), and ``argv`` holds
    its name from the kernel (``comm``) instead."""

    pid: int
    argv: Tuple[str, ...]
    uid: Optional[int] = None
    listens: Tuple[int, ...] = ()
    start: Optional[int] = None
    session: Optional[int] = None
    argv_unavailable: bool = False
    execution: Optional[str] = None

    @classmethod
    def _parse(cls, v: Any) -> "Survivor":
        if not isinstance(v, dict):
            raise UnexpectedReplyError("relayd's reply: a survivor is not an object")
        argv = _get(v, "argv", list, [])

        def known(name: str) -> Optional[int]:
            n = _get(v, name, int)
            return None if n is None or n < 0 or (n == 0 and name != "uid") else int(n)

        return cls(pid=_get(v, "pid", int, 0), argv=tuple(str(a) for a in argv),
                   uid=known("uid"), listens=tuple(int(p) for p in _get(v, "listens", list, [])),
                   start=known("start"), session=known("session"),
                   argv_unavailable=_get(v, "argvUnavailable", bool, False),
                   execution=_get(v, "execution", str))


def _survivors(msg: Mapping[str, Any]) -> Tuple[Survivor, ...]:
    return tuple(Survivor._parse(s) for s in _get(msg, "survivors", list, []))


@dataclass(frozen=True)
class Usage:
    """What the processes of an execution's scope that have ended used
    (protocol 4.8), as the kernel accounts it to their reaper: CPU in
    milliseconds, the largest resident set of one process, the processes
    relayd's shim reaped (the subject and every orphan), and storage I/O
    (512-byte blocks times 512)."""

    cpu_user_ms: int = 0
    cpu_system_ms: int = 0
    max_rss_bytes: int = 0
    processes: int = 0
    read_bytes: int = 0
    write_bytes: int = 0

    @property
    def cpu_seconds(self) -> float:
        """User and system CPU time, in seconds."""
        return (self.cpu_user_ms + self.cpu_system_ms) / 1000.0

    @classmethod
    def _parse(cls, v: Any) -> Optional["Usage"]:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise UnexpectedReplyError("relayd's reply: usage is not an object")
        return cls(cpu_user_ms=_get(v, "cpuUserMs", int, 0), cpu_system_ms=_get(v, "cpuSystemMs", int, 0),
                   max_rss_bytes=_get(v, "maxRssBytes", int, 0), processes=_get(v, "processes", int, 0),
                   read_bytes=_get(v, "readBytes", int, 0), write_bytes=_get(v, "writeBytes", int, 0))


@dataclass(frozen=True)
class ExecutionUsage:
    """The whole usage of one execution kept for its survivors (``status``
    and trial boundaries, protocol 4.8): its reply's and its survivors'
    that ended since; ``complete`` once every process of it has ended."""

    execution: str
    usage: Usage
    complete: bool

    @classmethod
    def _parse_list(cls, msg: Mapping[str, Any]) -> Tuple["ExecutionUsage", ...]:
        out = []
        for v in _get(msg, "survivorsUsage", list, []):
            if not isinstance(v, dict):
                raise UnexpectedReplyError("relayd's reply: a survivorsUsage entry is not an object")
            out.append(cls(execution=_get(v, "execution", str, ""), usage=Usage._parse(v.get("usage")) or Usage(),
                           complete=_get(v, "complete", bool, False)))
        return tuple(out)


def _limits(msg: Mapping[str, Any]) -> Optional[Dict[str, int]]:
    v = _get(msg, "limits", dict)
    if v is None:
        return None
    out: Dict[str, int] = {}
    for k, n in v.items():
        if not isinstance(n, int) or isinstance(n, bool):
            raise UnexpectedReplyError("relayd's executed reply: a limit is not an integer")
        out[str(k)] = n
    return out


@dataclass(frozen=True)
class Diagnostic:
    """What the result carrier found (protocol section 5): ``category`` is
    ``none`` or a ``result-frame-*``/``unstructured-output``/
    ``execution-scope-unavailable`` category, with the carrier's size and
    digest for all but ``none``."""

    category: str
    bytes: Optional[int] = None
    sha256: Optional[str] = None


@dataclass(frozen=True)
class Ready:
    """relayd's ``ready``: who it is and where executions run."""

    instruction: str
    cwd: str
    protocol: Optional[int]
    version: str
    scope: str
    detached: Tuple[str, ...] = ()
    # What relayd serves beyond the base protocol (4.6), e.g. "stream", "ignored"; () from an older relayd.
    extensions: Tuple[str, ...] = ()
    ignored: Tuple[str, ...] = ()
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def _parse(cls, msg: Dict[str, Any]) -> "Ready":
        return cls(
            instruction=_get(msg, "instruction", str, ""),
            cwd=_get(msg, "cwd", str, ""),
            protocol=_get(msg, "protocol", int),
            version=_get(msg, "version", str, ""),
            scope=_get(msg, "scope", str, ""),
            detached=tuple(_get(msg, "detached", list, [])),
            extensions=tuple(str(x) for x in _get(msg, "extensions", list, [])),
            ignored=ignored_of(msg),
            raw=msg,
        )


@dataclass(frozen=True)
class Executed:
    """The ``executed`` reply: how one execution ended.

    ``termination`` is ``exited`` (the subject ended by itself, or never
    started) or ``framework_timeout`` (the framework ended it: deadline,
    verify, transport loss, shutdown; ``exit_code`` 124). ``settlement`` is
    what relayd did to the scope: ``none``, ``settled``, ``destroyed`` or
    ``failed``; the last two mean the environment cannot be trusted.
    """

    id: Optional[Id]
    termination: str
    exit_code: int
    stdout: str
    diagnostic: Diagnostic
    execution: str
    settlement: str
    survivors: Tuple[Survivor, ...]
    survivors_omitted: int = 0
    mechanism: str = ""
    signal: Optional[str] = None
    stdout_truncated: Optional[bool] = None
    detail: Optional[str] = None
    duration_ms: Optional[int] = None
    # Extensions (protocol 4.5): present when relayd supports them and they were asked for.
    stderr: Optional[str] = None
    stderr_truncated: Optional[bool] = None
    # The request's fields relayd did not know (protocol 4.6); the client warned about them.
    ignored: Tuple[str, ...] = ()
    # Protocol 4.8: what the scope used (None from an older relayd); why it
    # ended, only with the kernel's evidence: "oom", or "limit" with
    # ``limit`` naming it; the limits applied.
    usage: Optional[Usage] = None
    cause: Optional[str] = None
    limit: Optional[str] = None
    limits: Optional[Dict[str, int]] = None
    # Protocol 4.7: a shell session's command names its session, the
    # shell's directory afterwards, and whether the shell is gone.
    session: Optional[str] = None
    cwd: Optional[str] = None
    session_ended: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def duration(self) -> Optional[float]:
        """The subject's wall time in seconds (None when relayd did not say)."""
        return None if self.duration_ms is None else self.duration_ms / 1000.0

    @property
    def timed_out(self) -> bool:
        """The framework ended the subject (``framework_timeout``)."""
        return self.termination == FRAMEWORK_TIMEOUT

    @property
    def environment_trusted(self) -> bool:
        """False when settling could not be confirmed (``destroyed`` or
        ``failed``): discard the environment, do not score it."""
        return self.settlement in (NONE, SETTLED)

    @classmethod
    def _parse(cls, msg: Dict[str, Any]) -> "Executed":
        d = _get(msg, "diagnostic", dict, {})
        scope = _get(msg, "scope", dict, {})
        if "exitCode" not in msg or "termination" not in msg:
            raise UnexpectedReplyError("relayd's executed reply has no exitCode or termination")
        return cls(
            id=msg.get("id"),
            termination=_get(msg, "termination", str),
            exit_code=_get(msg, "exitCode", int),
            stdout=_get(msg, "stdout", str, ""),
            diagnostic=Diagnostic(
                category=_get(d, "category", str, "none"),
                bytes=_get(d, "bytes", int),
                sha256=_get(d, "sha256", str),
            ),
            execution=_get(msg, "execution", str, ""),
            settlement=_get(msg, "settlement", str, ""),
            survivors=_survivors(msg),
            survivors_omitted=_get(msg, "survivorsOmitted", int, 0),
            mechanism=_get(scope, "mechanism", str, ""),
            signal=_get(msg, "signal", str),
            stdout_truncated=_get(msg, "stdoutTruncated", bool),
            detail=_get(msg, "detail", str),
            duration_ms=_get(msg, "durationMs", int),
            stderr=_get(msg, "stderr", str),
            stderr_truncated=_get(msg, "stderrTruncated", bool),
            ignored=ignored_of(msg),
            usage=Usage._parse(msg.get("usage")),
            cause=_get(msg, "cause", str),
            limit=_get(msg, "limit", str),
            limits=_limits(msg),
            session=_get(msg, "session", str),
            cwd=_get(msg, "cwd", str),
            session_ended=_get(msg, "sessionEnded", bool, False),
            raw=msg,
        )


@dataclass(frozen=True)
class Verified:
    """The ``verified`` reply: ``quiescent`` is true when nothing of this
    session runs and every settlement was confirmed; ``survivors`` are the
    processes exited subjects left running (part of what is scored).
    A trial boundary (``boundary()``, protocol 4.6) has ``boundary``,
    its number from 1, and with ``survivors="settle"`` the pids it
    ``settled``; ``boundary`` is 0 and ``settled`` None otherwise."""

    id: Optional[Id]
    quiescent: bool
    survivors: Tuple[Survivor, ...]
    survivors_omitted: int = 0
    ignored: Tuple[str, ...] = ()
    boundary: int = 0
    settled: Optional[Tuple[int, ...]] = None
    # At a trial boundary: the usage of each execution kept for its survivors (4.8).
    survivors_usage: Tuple[ExecutionUsage, ...] = ()
    # Protocol 4.9: with files=, the changes under protect and what was restored.
    files: Optional["BoundaryFiles"] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def tampered(self) -> Tuple["FileEntry", ...]:
        """With files= (protocol 4.9): what changed under ``protect`` since
        the mark, each entry with its ``change``; () without files."""
        return () if self.files is None else self.files.tampered

    @classmethod
    def _parse(cls, msg: Dict[str, Any]) -> "Verified":
        return cls(
            id=msg.get("id"),
            quiescent=_get(msg, "quiescent", bool, False),
            survivors=_survivors(msg),
            survivors_omitted=_get(msg, "survivorsOmitted", int, 0),
            ignored=ignored_of(msg),
            boundary=_get(msg, "boundary", int, 0),
            settled=None if msg.get("settled") is None else tuple(int(p) for p in _get(msg, "settled", list, [])),
            survivors_usage=ExecutionUsage._parse_list(msg),
            files=BoundaryFiles._parse(msg.get("files")),
            raw=msg,
        )


@dataclass(frozen=True)
class ExecutionStatus:
    """One execution in a ``status`` reply: one that runs, or one detached
    (protocol 4.5) that waits for an attach. ``program`` and ``args`` are
    the execute's, within 4 KiB (``args_omitted`` counts args left out);
    ``user`` whom the subject runs as (None: relayd's own user);
    ``started_ms`` how long ago relayd accepted it; ``timeout_ms`` what is
    left of its deadline (None without one); ``ended``: detached, ended,
    its reply waiting for an attach."""

    execution: str
    program: str
    args: Tuple[str, ...]
    started_ms: int
    detached: bool
    user: Optional[str] = None
    timeout_ms: Optional[int] = None
    ended: bool = False
    args_omitted: int = 0

    @classmethod
    def _parse(cls, v: Any) -> "ExecutionStatus":
        if not isinstance(v, dict):
            raise UnexpectedReplyError("relayd's status reply: an execution is not an object")
        return cls(execution=_get(v, "execution", str, ""), program=_get(v, "program", str, ""),
                   args=tuple(str(a) for a in _get(v, "args", list, [])),
                   started_ms=_get(v, "startedMs", int, 0), detached=_get(v, "detached", bool, False),
                   user=_get(v, "user", str), timeout_ms=_get(v, "timeoutMs", int),
                   ended=_get(v, "ended", bool, False), args_omitted=_get(v, "argsOmitted", int, 0))


@dataclass(frozen=True)
class Status:
    """The ``status`` reply (protocol 4.6, "Looking without touching"):
    what runs or waits detached (``executions``), the open shell sessions
    (``sessions``, raw, empty until relayd has them), the survivors a trial
    boundary would list, and ``boundary``, how many boundaries were drawn.
    Asking changed nothing."""

    id: Optional[Id]
    executions: Tuple[ExecutionStatus, ...]
    sessions: Tuple[Dict[str, Any], ...]
    survivors: Tuple[Survivor, ...]
    boundary: int
    executions_omitted: int = 0
    survivors_omitted: int = 0
    ignored: Tuple[str, ...] = ()
    # The usage of each execution kept for its survivors (4.8).
    survivors_usage: Tuple[ExecutionUsage, ...] = ()
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def _parse(cls, msg: Dict[str, Any]) -> "Status":
        return cls(
            id=msg.get("id"),
            executions=tuple(ExecutionStatus._parse(e) for e in _get(msg, "executions", list, [])),
            sessions=tuple(s for s in _get(msg, "sessions", list, []) if isinstance(s, dict)),
            survivors=_survivors(msg),
            boundary=_get(msg, "boundary", int, 0),
            executions_omitted=_get(msg, "executionsOmitted", int, 0),
            survivors_omitted=_get(msg, "survivorsOmitted", int, 0),
            ignored=ignored_of(msg),
            survivors_usage=ExecutionUsage._parse_list(msg),
            raw=msg,
        )


@dataclass(frozen=True)
class Output:
    """A chunk of live output (``stream: true``, protocol 4.5): ``stream``
    is ``stdout`` or ``stderr`` (``pty`` for a terminal's, 4.7); ``dropped`` counts bytes relayd left out
    since the previous chunk because the connection fell behind."""

    execution: str
    stream: str
    data: str
    dropped: int = 0

    @classmethod
    def _parse(cls, msg: Dict[str, Any]) -> "Output":
        return cls(
            execution=_get(msg, "execution", str, ""),
            stream=_get(msg, "stream", str, ""),
            data=_get(msg, "data", str, ""),
            dropped=_get(msg, "dropped", int, 0),
        )


# --- the filesystem half of the boundary (protocol 4.9)

def _name(v: Mapping[str, Any], field: str) -> Optional[str]:
    """A path or link target: ``field`` as sent, or ``fieldBase64`` (a name
    that is not valid UTF-8) decoded to bytes and then to str with
    surrogateescape, as os.listdir gives such a name on Linux, so that
    os.fsencode (or ``.encode("utf-8", "surrogateescape")``) gives back
    its bytes."""
    s = _get(v, field, str)
    if s is not None:
        return str(s)
    b64 = _get(v, field + "Base64", str)
    if b64 is None:
        return None
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise UnexpectedReplyError(f"relayd's reply: {field}Base64 is not base64") from None
    return raw.decode("utf-8", "surrogateescape")


def _mode(v: Mapping[str, Any]) -> int:
    m = v.get("mode")
    if isinstance(m, str):
        try:
            return int(m, 8)
        except ValueError:
            raise UnexpectedReplyError(f"relayd's reply: mode {m!r} is not octal digits") from None
    if isinstance(m, int) and not isinstance(m, bool):
        return m
    return 0


@dataclass(frozen=True)
class FileEntry:
    """One entry of a change list (protocol 4.9): ``path`` (absolute; a
    name that is not UTF-8 decoded with surrogateescape, its bytes in
    ``path_bytes``), ``type`` (``file``, ``dir``, ``symlink``, ``other``),
    ``mode`` (permission bits as an int, e.g. 0o644), ``uid``, ``gid``,
    ``size``, for a file ``sha256`` of what it holds, for a symbolic link
    ``target``. A modified entry also has ``was`` (the entry as the mark
    saw it) and ``what``, what differs (``content``, ``type``, ``mode``,
    ``owner``, ``target``). ``change`` says whether it was ``added``,
    ``modified`` or ``deleted``; a deleted entry is described as the mark
    saw it."""

    path: str
    type: str
    mode: int = 0
    uid: int = 0
    gid: int = 0
    size: int = 0
    sha256: Optional[str] = None
    target: Optional[str] = None
    was: Optional["FileEntry"] = None
    what: Tuple[str, ...] = ()
    change: Optional[str] = None

    @property
    def path_bytes(self) -> bytes:
        """The path's bytes, as the filesystem holds them."""
        return self.path.encode("utf-8", "surrogateescape")

    @classmethod
    def _parse(cls, v: Any, change: Optional[str] = None, path: str = "") -> "FileEntry":
        if not isinstance(v, dict):
            raise UnexpectedReplyError("relayd's reply: a changed entry is not an object")
        was = v.get("was")
        path = _name(v, "path") or path
        return cls(path=path, type=_get(v, "type", str, ""), mode=_mode(v),
                   uid=_get(v, "uid", int, 0), gid=_get(v, "gid", int, 0), size=_get(v, "size", int, 0),
                   sha256=_get(v, "sha256", str), target=_name(v, "target"),
                   was=None if was is None else cls._parse(was, path=path),
                   what=tuple(str(w) for w in _get(v, "what", list, [])),
                   change=_get(v, "change", str, change))


def _entries(msg: Mapping[str, Any], name: str, change: Optional[str] = None) -> Tuple[FileEntry, ...]:
    return tuple(FileEntry._parse(e, change) for e in _get(msg, name, list, []))


@dataclass(frozen=True)
class Marked:
    """The reply to ``mark`` (protocol 4.9): ``entries`` recorded,
    ``bytes`` the regular files' sizes, ``kept_bytes`` the content this
    mark keeps (each content once), ``duration_ms`` what it took."""

    mark: str
    entries: int
    bytes: int
    kept_bytes: int
    duration_ms: Optional[int] = None
    ignored: Tuple[str, ...] = ()
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def _parse(cls, msg: Dict[str, Any]) -> "Marked":
        return cls(mark=_get(msg, "mark", str, ""), entries=_get(msg, "entries", int, 0), bytes=_get(msg, "bytes", int, 0),
                   kept_bytes=_get(msg, "keptBytes", int, 0), duration_ms=_get(msg, "durationMs", int),
                   ignored=ignored_of(msg), raw=msg)


@dataclass(frozen=True)
class Changes:
    """The reply to ``changes`` (protocol 4.9): what differs from the mark,
    found by a stat walk (content read only where the kernel's change
    time, size or inode differ), touching nothing. ``omitted`` counts the
    entries left out past relayd's 10,000; ``entries`` how many it
    looked at. False (and ``len`` 0) when nothing changed."""

    mark: str
    added: Tuple[FileEntry, ...]
    modified: Tuple[FileEntry, ...]
    deleted: Tuple[FileEntry, ...]
    omitted: int = 0
    entries: int = 0
    duration_ms: Optional[int] = None
    ignored: Tuple[str, ...] = ()
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.added) + len(self.modified) + len(self.deleted) + self.omitted

    def __bool__(self) -> bool:
        return len(self) > 0

    def all(self) -> Tuple[FileEntry, ...]:
        """Every listed entry, each with its ``change``, ordered by path."""
        return tuple(sorted((e if e.change else replace(e, change=c) for c, es in
                             (("added", self.added), ("modified", self.modified), ("deleted", self.deleted))
                             for e in es), key=lambda e: e.path_bytes))

    @classmethod
    def _parse(cls, msg: Dict[str, Any]) -> "Changes":
        return cls(mark=_get(msg, "mark", str, ""), added=_entries(msg, "added", "added"),
                   modified=_entries(msg, "modified", "modified"), deleted=_entries(msg, "deleted", "deleted"),
                   omitted=_get(msg, "omitted", int, 0), entries=_get(msg, "entries", int, 0),
                   duration_ms=_get(msg, "durationMs", int), ignored=ignored_of(msg), raw=msg)


@dataclass(frozen=True)
class Restored:
    """The reply to ``restore`` (protocol 4.9): entries ``removed``,
    ``written`` back and ``reset`` (mode, owner, times). A restore that
    could not finish (a full disk) names the paths it left as they were
    in ``not_restored`` (``not_restored_omitted`` counts more) and says
    why in ``reason``; ``complete`` is true when there are none."""

    mark: str
    removed: int = 0
    written: int = 0
    reset: int = 0
    not_restored: Tuple[str, ...] = ()
    not_restored_omitted: int = 0
    reason: Optional[str] = None
    duration_ms: Optional[int] = None
    ignored: Tuple[str, ...] = ()
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def complete(self) -> bool:
        return not self.not_restored and not self.not_restored_omitted

    @classmethod
    def _parse(cls, msg: Dict[str, Any]) -> "Restored":
        return cls(mark=_get(msg, "mark", str, ""), removed=_get(msg, "removed", int, 0),
                   written=_get(msg, "written", int, 0), reset=_get(msg, "reset", int, 0),
                   not_restored=tuple(str(p) for p in _get(msg, "notRestored", list, [])),
                   not_restored_omitted=_get(msg, "notRestoredOmitted", int, 0), reason=_get(msg, "reason", str),
                   duration_ms=_get(msg, "durationMs", int), ignored=ignored_of(msg), raw=msg)


@dataclass(frozen=True)
class BoundaryFiles:
    """A trial boundary's ``files`` (protocol 4.9): the changes under
    ``protect`` as ``tampered`` (each with its ``change``), and what the
    restore did (None without ``restore``). ``error`` says why relayd
    could not look at the files (the mark is gone); the processes'
    evidence of the boundary stands."""

    mark: str
    tampered: Tuple[FileEntry, ...] = ()
    omitted: int = 0
    restored: Optional[Restored] = None
    error: Optional[str] = None

    @classmethod
    def _parse(cls, v: Any) -> Optional["BoundaryFiles"]:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise UnexpectedReplyError("relayd's verified reply: files is not an object")
        r = v.get("restored")
        if r is not None and not isinstance(r, dict):
            raise UnexpectedReplyError("relayd's verified reply: files.restored is not an object")
        return cls(mark=_get(v, "mark", str, ""), tampered=_entries(v, "tampered"), omitted=_get(v, "omitted", int, 0),
                   restored=None if r is None else Restored._parse(r), error=_get(v, "error", str))


@dataclass(frozen=True)
class Recycled:
    """What recycle() did (protocol 4.9, "Recycling a container"): the
    trial boundary that settled every survivor (``boundary``) and the
    restore of every kept subtree of the mark (``restored``), each with
    its evidence. ``pristine``: the processes are gone, confirmed, and the
    kept files are as marked."""

    boundary: Verified
    restored: Restored

    @property
    def pristine(self) -> bool:
        return self.boundary.quiescent and self.restored.complete
