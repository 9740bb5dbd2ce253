"""File transfers (protocol 4.6, "Files"): put and get messages, no I/O.

A put is cut into chunks of CHUNK bytes (their lines stay within relayd's
default --max-line-bytes, 1 MiB); a get's content chunks are written to the
caller's file object as they come. Both check relayd's sha256 of the whole
file against the bytes sent or received. A relayd that lists "body" takes
and sends a file as raw bytes after one line instead (protocol 4.6, "Bulk
bodies"): a put whose size is known beforehand goes so, and every get. A
get's raw body is followed by a sent line with relayd's sha256 of the bytes
as it sent them, or by an error (failed) when the file changed meanwhile.
With digest "none" neither side computes a digest."""

from __future__ import annotations

import base64
import contextlib
import hashlib
from dataclasses import dataclass
import os
import stat
import tempfile
from typing import IO, Any, Dict, Iterator, Optional, Tuple, Union

from ._wire import Call, Reply
from .errors import UnexpectedReplyError

__all__ = ["FileInfo"]

CHUNK = 256 << 10

Source = Union[bytes, bytearray, memoryview, IO[bytes]]


@dataclass(frozen=True)
class FileInfo:
    """What relayd reports of a stored (upload) or fetched (download) file."""

    path: str  # absolute as relayd resolved it; "" for a download
    bytes: int
    sha256: str  # lower-case hex of the whole file; "" with digest "none"
    files: int = 0  # a tree's members written or packed (protocol 4.6, "Trees")
    refused: Tuple[str, ...] = ()  # a tree's members relayd refused, "name: why"


BODY = "body"  # the extension of raw bodies, as ready lists it
TREE = "tree"  # the extension of trees, relayd's own tar


NONE = "none"  # digest: no digest on either side (protocol 4.6, "Bulk bodies")


def wants_digest(digest: Optional[str]) -> bool:
    """Whether a transfer with this ``digest`` keyword is checked by sha256:
    None or "sha256" (the default), not "none"; anything else is a ValueError."""
    if digest is None or digest == "sha256":
        return True
    if digest == NONE:
        return False
    raise ValueError(f'digest must be None, "sha256" or "none", not {digest!r}')


@contextlib.contextmanager
def local_replacement(local_path: str) -> Iterator[IO[bytes]]:
    """A temporary file beside local_path, renamed over it when the block
    ends normally and removed when it raises: a download that fails (a
    digest that differs, relayd's failed, a connection lost inside the
    body) leaves no part of a file, and what was there stays."""
    d, base = os.path.split(os.path.abspath(local_path))
    fd, tmp = tempfile.mkstemp(prefix="." + base + ".", suffix=".part", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, local_path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def body_size(data: Source) -> Optional[int]:
    """How many bytes data yields, when that is known beforehand: bytes,
    or a regular file's size past its position; else None."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return memoryview(data).nbytes
    try:
        fd = data.fileno()
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        pos = data.tell()
    except (AttributeError, OSError, ValueError):
        return None  # io.UnsupportedOperation is an OSError and a ValueError
    return st.st_size - pos if st.st_size >= pos else None


def body_pieces(data: Source, n: int, tally: "Tally") -> Iterator[bytes]:
    """The n bytes of a body, in pieces of at most CHUNK, counted by
    tally. ShortBodyError when data yields fewer."""
    left = n
    for b in chunks(data):
        if not b:
            continue
        b = b[:left]
        tally.add(b)
        left -= len(b)
        yield b
        if left == 0:
            return
    if left:
        raise ShortBodyError(f"the data to put ended {left} bytes short of the {n} announced")


class ShortBodyError(ValueError):
    """A put's data ended before the size its body announced."""


def put_body_message(path: str, n: int, *, mode: Optional[int], user: Optional[str], parents: bool,
                     fmt: Optional[str] = None, links: Optional[str] = None,
                     digest: bool = True) -> Dict[str, Any]:
    """The put line of a raw body of n bytes (without token and id); fmt
    "tar" for a tree, links "keep" to keep its links as they are; digest
    False: "digest":"none"."""
    msg: Dict[str, Any] = {"kind": "put", "body": n}
    if fmt is not None:
        msg["format"] = fmt
    if links is not None:
        msg["links"] = links
    return _digest(_head(msg, path, mode, user, parents), not digest)


def get_message(path: str, user: Optional[str], hashing: bool, fmt: Optional[str], body: bool) -> Dict[str, Any]:
    """A get (without token and id): hashing False is "digest":"none"; fmt
    "tar" packs the directory path (in chunks: packed once, a tree changing
    meanwhile is relayd's error, not a cut body); else body asks for the
    file as one raw body."""
    msg: Dict[str, Any] = {"kind": "get", "path": path}
    if user is not None:
        msg["user"] = user
    if not hashing:
        msg["digest"] = NONE
    if fmt is not None:
        msg["format"] = fmt
    elif body:
        msg["body"] = True
    return msg


def chunks(data: Source, size: int = CHUNK) -> Iterator[bytes]:
    """The chunks of data (bytes or a binary file object), at least one."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data).cast("B")
        if len(view) == 0:
            yield b""
        for i in range(0, len(view), size):
            yield bytes(view[i:i + size])
        return
    first = True
    while True:
        b = data.read(size)
        if not b:
            if first:
                yield b""
            return
        first = False
        yield b


class Tally:
    """The bytes of a transfer so far: their count and sha256 (unless
    hashing is False: digest "none")."""

    def __init__(self, hashing: bool = True) -> None:
        self.digest = hashlib.sha256()
        self.hashing = hashing
        self.n = 0

    def add(self, b: bytes) -> None:
        if self.hashing:
            self.digest.update(b)
        self.n += len(b)

    def hexdigest(self) -> str:
        """The sha256 so far, "" without hashing."""
        return self.digest.hexdigest() if self.hashing else ""


def put_messages(path: str, data: Source, *, mode: Optional[int], user: Optional[str],
                 parents: bool, tally: Tally) -> Iterator[Dict[str, Any]]:
    """The put messages of one transfer (without token and id), the last
    without "more"; tally counts every byte sent (its hashing False: the
    first says "digest":"none")."""
    pending: Optional[bytes] = None
    first = True
    for b in chunks(data):
        if pending is not None:
            yield _digest(_put(path if first else None, pending, True, mode, user, parents), first and not tally.hashing)
            first = False
        tally.add(b)
        pending = b
    yield _digest(_put(path if first else None, pending or b"", False, mode, user, parents), first and not tally.hashing)


def _digest(msg: Dict[str, Any], none: bool) -> Dict[str, Any]:
    if none:
        msg["digest"] = NONE
    return msg


def _put(path: Optional[str], b: bytes, more: bool, mode: Optional[int], user: Optional[str], parents: bool) -> Dict[str, Any]:
    msg: Dict[str, Any] = {"kind": "put", "data": base64.b64encode(b).decode("ascii")}
    if more:
        msg["more"] = True
    if path is not None:
        _head(msg, path, mode, user, parents)
    return msg


def _head(msg: Dict[str, Any], path: str, mode: Optional[int], user: Optional[str], parents: bool) -> Dict[str, Any]:
    """msg with what a put's first message says of its file."""
    msg["path"] = path
    if mode is not None:
        msg["mode"] = "0%o" % mode
    if user is not None:
        msg["user"] = user
    if parents:
        msg["parents"] = True
    return msg


def stored(msg: Dict[str, Any], sent: int, digest: str) -> FileInfo:
    """The stored reply, checked against what was sent (digest "": no
    digest was asked for, only the size is checked)."""
    info = FileInfo(str(msg.get("path", "")), int(msg.get("bytes", -1)), str(msg.get("sha256", "")) if digest else "",
                    int(msg.get("files", 0)), tuple(str(x) for x in msg.get("refused") or ()))
    if info.bytes != sent or info.sha256 != digest:
        raise UnexpectedReplyError(
            f"relayd stored {info.bytes} bytes with sha256 {info.sha256}; sent {sent} with {digest}")
    return info


class ContentCall(Call):
    """A get: writes each content chunk to out and answers with the last;
    of a raw body, with the sent line that follows the bytes (a relayd from
    before that line carries the sha256 in the content line and sends
    nothing after the bytes). reader_first: the raw body is handed over
    before its content line (AsyncClient's reader), which then answers
    nothing by itself."""

    def __init__(self, id: int, out: IO[bytes], digest: bool = True, reader_first: bool = False) -> None:
        super().__init__(id, "content")
        self.out = out
        self.tally = Tally(digest)
        self.reader_first = reader_first
        self.head: Optional[Dict[str, Any]] = None  # a raw body's content line

    def take(self, msg: Dict[str, Any], raw: bool = False) -> Optional[Reply]:
        if msg["kind"] != "content":
            return super().take(msg, raw)
        if isinstance(msg.get("body"), int):
            super().take(msg, True)  # its ignored list; the raw body follows
            self.head = msg
            if "sha256" in msg:
                return msg  # an older relayd's: this line is the answer
            self.want = "sent"  # sent, or an error, follows the bytes
            return None if self.reader_first else msg
        try:
            b = base64.b64decode(str(msg.get("data", "")), validate=True)
        except ValueError as e:
            raise UnexpectedReplyError(f"relayd sent a content chunk that is not base64: {e}") from None
        self.out.write(b)
        self.tally.add(b)
        if msg.get("more"):
            return None
        super().take(msg, True)  # its ignored list
        return msg

    def trailer_due(self) -> bool:
        """Whether the line after a raw body (sent) is still to be read."""
        return self.want == "sent"

    def body(self, b: bytes) -> None:
        """Takes a piece of the raw body that follows a content line."""
        self.out.write(b)
        self.tally.add(b)

    def info(self, msg: Dict[str, Any]) -> FileInfo:
        """What the answer msg (the last chunk, or sent) says, checked
        against the bytes received."""
        head = self.head if self.head is not None else msg
        got = self.tally.hexdigest()
        info = FileInfo("", int(head.get("bytes", -1)), str(msg.get("sha256", "")) if self.tally.hashing else "",
                        int(head.get("files", 0)), tuple(str(x) for x in head.get("refused") or ()))
        if info.bytes != self.tally.n or info.sha256 != got:
            raise UnexpectedReplyError(
                f"relayd reported {info.bytes} bytes with sha256 {info.sha256}; received {self.tally.n} with {got}")
        return info
