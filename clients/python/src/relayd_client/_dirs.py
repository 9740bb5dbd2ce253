"""Directories over the file messages (protocol 4.6): a tar stream, made on
one side into a temporary file, moved with put or get (chunked, checked by
sha256, one chunk in memory at a time) and unpacked by tar on the other.
Why not tar over an execute's stdin: put and get are already chunked,
checksummed and bounded whatever the size, and a refused or cut transfer
leaves no half-unpacked tree behind. It needs tar in the container (every
Debian, Ubuntu, Alpine and busybox image has one), unless relayd lists
"tree" (protocol 4.6, "Trees"): then the archive goes as one put or get
with "format":"tar", and relayd unpacks or packs it itself.

Symbolic links (protocol 4.6, "Trees"): by default a link whose target
leads outside the directory is refused, by relayd on the way up and here
on the way down; with ``links="keep"`` every link is kept as it is,
whatever its target (a virtual environment's link to /usr/bin/python3),
as docker cp keeps them. Either way nothing is ever written through a
link: here, every directory on a member's way is opened one name at a
time with O_NOFOLLOW, and a member whose path passes through a link (the
archive's own, or one already in the local directory) is refused.

This module is part of the clients' sans-I/O core (with _wire and
_files): upload_dir and download_dir are plans, generators that yield
what they need done (Serves, Shell, Put, Get, Local) and are sent the
results; _ops turns their requests into its own, which Client and
AsyncClient each do with their own I/O. It imports neither client."""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from typing import IO, Any, Callable, Generator, List, Optional, Tuple, Union

from . import _files
from .errors import ProtocolError, RelaydError


class DirectoryError(RelaydError):
    """tar on relayd's side failed (its stderr is the message), or the
    archive held a member that would land outside the directory."""


# The scripts run on relayd's side where relayd serves no trees.
MKDIR = 'mkdir -p -- "$1"'
# -o: files are the user's, not the archive's owners.
UNTAR = 'tar -x -o -f "$1" -C "$2"; s=$?; rm -f -- "$1"; exit $s'
TAR = 't=$(mktemp) && tar -c -f "$t" -C "$1" . && echo "$t"'
RM = 'rm -f -- "$1"'


def _failed(script: str, exit_code: int, stderr: Optional[str]) -> DirectoryError:
    return DirectoryError(f"{script.split()[0]} on relayd's side exited {exit_code}: {(stderr or '').strip()}")


KEEP = "keep"


def _keep(links: Optional[str]) -> bool:
    """Validates a links argument: None (links that lead out are refused) or "keep"."""
    if links is None:
        return False
    if links == KEEP:
        return True
    raise ValueError(f'links must be None or "keep", not {links!r}')


def _remote_tar(remote_dir: str) -> str:
    return remote_dir.rstrip("/") + "/.relayd-upload-" + secrets.token_hex(8) + ".tar"


def _pack(local_dir: str, f: IO[bytes]) -> None:
    with tarfile.open(fileobj=f, mode="w") as tar:
        for name in sorted(os.listdir(local_dir)):
            tar.add(os.path.join(local_dir, name), arcname=name)
    f.seek(0)


def _unpack(f: IO[bytes], local_dir: str, keep: bool = False) -> None:
    f.seek(0)
    with tarfile.open(fileobj=f, mode="r") as tar:
        _extract(tar, local_dir, keep)


def _refused(what: str, info: _files.FileInfo) -> None:
    if info.refused:
        raise DirectoryError(f"relayd {what} members: " + "; ".join(info.refused))


def _size(f: IO[bytes]) -> int:
    return os.fstat(f.fileno()).st_size


# What a plan asks its client to do (sans I/O, as h11 hands its caller
# events): a plan is a generator that yields these and is sent each one's
# result (or thrown its exception). _ops.tree runs them, and Client and
# AsyncClient drive that, each with its own I/O (AsyncClient runs Local in a thread).


@dataclass(frozen=True)
class Serves:
    """Whether relayd lists extension in its ready: a bool."""
    extension: str
    timeout: Optional[float]


@dataclass(frozen=True)
class Shell:
    """execute("sh", ["-c", script, "sh", *args], capture_stderr=True): an Executed."""
    script: str
    args: Tuple[str, ...]
    user: Optional[str]
    timeout: Optional[float]


@dataclass(frozen=True)
class Put:
    """With tar, the archive f (size bytes) as one put of a raw body with
    "format":"tar" (parents made); else upload_file(path, f, mode=mode):
    a FileInfo."""
    path: str
    f: IO[bytes]
    user: Optional[str]
    timeout: Optional[float]
    tar: bool = False
    size: int = 0
    mode: Optional[int] = None
    links: Optional[str] = None


@dataclass(frozen=True)
class Get:
    """download_file_to(path, f), or with fmt "tar" the directory packed by relayd: a FileInfo."""
    path: str
    f: IO[bytes]
    user: Optional[str]
    timeout: Optional[float]
    fmt: Optional[str] = None


@dataclass(frozen=True)
class Local:
    """fn(*args) on this side, blocking (AsyncClient runs it in a thread): its result."""
    fn: Callable[..., Any]
    args: Tuple[Any, ...]


Op = Union[Serves, Shell, Put, Get, Local]
Plan = Generator[Op, Any, None]


def _run(script: str, *args: str, user: Optional[str], timeout: Optional[float]) -> Generator[Op, Any, str]:
    x = yield Shell(script, args, user, timeout)
    if x.exit_code != 0:
        raise _failed(script, x.exit_code, x.stderr)
    return str(x.stdout)


def upload_dir(local_dir: str, remote_dir: str, *, user: Optional[str], timeout: Optional[float],
               links: Optional[str] = None) -> Plan:
    """The plan of Client.upload_dir and AsyncClient.upload_dir."""
    keep = _keep(links)
    if not os.path.isdir(local_dir):
        raise NotADirectoryError(local_dir)
    if (yield Serves(_files.TREE, timeout)) and (yield Serves(_files.BODY, timeout)):
        with tempfile.TemporaryFile() as f:
            yield Local(_pack, (local_dir, f))
            info = yield Put(remote_dir, f, user, timeout, tar=True, size=_size(f), links=KEEP if keep else None)
        _refused("refused", info)
        return
    yield from _run(MKDIR, remote_dir, user=user, timeout=timeout)
    remote_tar = _remote_tar(remote_dir)
    with tempfile.TemporaryFile() as f:
        yield Local(_pack, (local_dir, f))
        yield Put(remote_tar, f, user, timeout, mode=0o600)
    yield from _run(UNTAR, remote_tar, remote_dir, user=user, timeout=timeout)


def download_dir(remote_dir: str, local_dir: str, *, user: Optional[str], timeout: Optional[float],
                 links: Optional[str] = None) -> Plan:
    """The plan of Client.download_dir and AsyncClient.download_dir."""
    keep = _keep(links)
    if (yield Serves(_files.TREE, timeout)):
        with tempfile.TemporaryFile() as f:
            try:
                info = yield Get(remote_dir, f, user, timeout, fmt="tar")
            except ProtocolError as e:
                raise DirectoryError(str(e)) from e  # as tar's failure was: no such directory, say
            _refused("left out", info)
            os.makedirs(local_dir, exist_ok=True)
            yield Local(_unpack, (f, local_dir, keep))
        return
    remote_tar = (yield from _run(TAR, remote_dir, user=user, timeout=timeout)).strip()
    try:
        os.makedirs(local_dir, exist_ok=True)
        with tempfile.TemporaryFile() as f:
            yield Get(remote_tar, f, user, timeout)
            yield Local(_unpack, (f, local_dir, keep))
    finally:
        yield from _run(RM, remote_tar, user=user, timeout=timeout)


# A directory held for names relative to it: O_PATH where there is one
# (Linux), so that a directory the caller may not read is still passed.
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINKS = 40


def _unsafe(name: str, why: str) -> DirectoryError:
    return DirectoryError(f"the archive's member {name!r} {why}")


def _parts(name: str) -> Optional[List[str]]:
    """A member's name as names below the directory, or None for an
    absolute name or one with ".."."""
    if name.startswith("/") or "\0" in name:
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return None if ".." in parts else parts


def _open_dirs(root: int, parts: List[str], mkdir: bool, member: str) -> int:
    """A descriptor of the directory parts below root, each name opened
    with O_NOFOLLOW from the one before (made, 0755, when missing and
    mkdir): a link or a file on the way is refused, never followed."""
    fd = os.dup(root)
    try:
        for i, p in enumerate(parts):
            where = "/".join(parts[:i + 1])
            try:
                st = os.lstat(p, dir_fd=fd)
            except FileNotFoundError:
                if not mkdir:
                    raise _unsafe(member, f"passes through {where}, which is not there")
                try:
                    os.mkdir(p, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                st = os.lstat(p, dir_fd=fd)
            if stat.S_ISLNK(st.st_mode):
                raise _unsafe(member, f"passes through {where}, a symbolic link: nothing is written through one")
            if not stat.S_ISDIR(st.st_mode):
                raise _unsafe(member, f"passes through {where}, which is not a directory")
            try:
                nfd = os.open(p, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _unsafe(member, f"passes through {where}, which is not a directory any more") from e
                raise
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def _leaves(root: int, start: List[str], target: str) -> Optional[str]:
    """Why a link in the directory start (names below root) to target
    leads outside root, following the links on disk as the kernel would
    (".." is the parent of the directory reached), or None when it stays
    inside. After a name that is missing or not a directory, any ".."
    counts as leaving: a later link in its place could lead anywhere."""
    if not target or target.startswith("/"):
        return "an absolute target"
    done: List[str] = []
    todo = list(start) + target.split("/")
    hops = 0
    missing = ""
    while todo:
        c = todo.pop(0)
        if c in ("", "."):
            continue
        if missing:
            if c == "..":
                return f'it climbs ("..") out of {missing}, which is not a directory there'
            continue
        if c == "..":
            if not done:
                return "it climbs above the directory"
            done.pop()
            continue
        fd = _open_dirs(root, done, False, "/".join(done))
        try:
            try:
                st = os.lstat(c, dir_fd=fd)
            except FileNotFoundError:
                missing = "/".join(done + [c])
                continue
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > _MAX_LINKS:
                    return f"more than {_MAX_LINKS} links deep (a loop?)"
                to = os.readlink(c, dir_fd=fd)
                if not to or to.startswith("/"):
                    return f"it leads through {'/'.join(done + [c])}, a link to {to}"
                todo = to.split("/") + todo
            elif stat.S_ISDIR(st.st_mode):
                done.append(c)
            else:
                missing = "/".join(done + [c])
        finally:
            os.close(fd)
    return None


def _extract(tar: tarfile.TarFile, dest: str, keep: bool = False) -> None:
    """Unpacks tar into dest. Refused, before anything is written: a member
    that would land outside dest (an absolute name, ".."), a device, a FIFO,
    a hard link to outside; without keep, a link whose target its name
    shows to lead out. Then each member is written relative to dest's
    descriptor, never through a link (a member under one, whoever made
    it, is refused), and without keep each link is judged on disk, when
    it is written and again at the end (removed then if it leads out).
    Files keep their permission bits (without setuid, setgid, sticky) and
    times; directories get theirs once everything is in."""
    members = tar.getmembers()
    for m in members:
        parts = _parts(m.name)
        if parts is None:
            raise _unsafe(m.name, f"would land outside {dest}")
        if m.issym():
            if not m.linkname:
                raise _unsafe(m.name, "links to no name")
            if not keep and _lexically_out(parts[:-1], m.linkname):
                raise _unsafe(m.name, f"links to {m.linkname!r}, outside {dest}")
        elif m.islnk():
            if _parts(m.linkname) in (None, []):
                raise _unsafe(m.name, f"links to {m.linkname!r}, outside {dest}")
        elif not (m.isreg() or m.isdir()):
            raise _unsafe(m.name, f"would land outside {dest} or is not a plain file, directory or link")
    root = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        dirs: List[Tuple[List[str], int, float]] = []
        links: List[Tuple[List[str], str]] = []
        for m in members:
            parts = _parts(m.name) or []
            if not parts:
                continue
            _member(tar, m, root, parts, keep, dirs, links)
        out = []
        for parts, target in links:
            fd = _open_dirs(root, parts[:-1], False, "/".join(parts))
            try:
                if os.readlink(parts[-1], dir_fd=fd) == target and _leaves(root, parts[:-1], target):
                    os.unlink(parts[-1], dir_fd=fd)
                    out.append("/".join(parts))
            except OSError:
                pass
            finally:
                os.close(fd)
        if out:
            raise _unsafe(out[0], "points outside through the archive's other links")
        for parts, mode, mtime in sorted(dirs, key=lambda d: -len(d[0])):
            fd = _open_dirs(root, parts[:-1], False, "/".join(parts))
            try:
                dfd = os.open(parts[-1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            finally:
                os.close(fd)
            try:
                os.fchmod(dfd, mode)
                os.utime(dfd, (mtime, mtime))
            finally:
                os.close(dfd)
    finally:
        os.close(root)


def _lexically_out(start: List[str], target: str) -> bool:
    if target.startswith("/"):
        return True
    depth = len(start)
    for p in target.split("/"):
        if p == "..":
            depth -= 1
            if depth < 0:
                return True
        elif p not in ("", "."):
            depth += 1
    return False


def _member(tar: tarfile.TarFile, m: tarfile.TarInfo, root: int, parts: List[str], keep: bool,
            dirs: List[Tuple[List[str], int, float]], links: List[Tuple[List[str], str]]) -> None:
    """Writes one member below root (see _extract)."""
    name = parts[-1]
    fd = _open_dirs(root, parts[:-1], True, m.name)
    try:
        try:
            st: Optional[os.stat_result] = os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            st = None
        if m.isdir():
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise _unsafe(m.name, "is a directory where a symbolic link is: it is neither replaced nor followed")
            if st is not None and not stat.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=fd)
                st = None
            if st is None:
                os.mkdir(name, 0o700, dir_fd=fd)
            dirs.append((parts, m.mode & 0o777, m.mtime))
            return
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise _unsafe(m.name, "is not a directory, and a directory is there")
            os.unlink(name, dir_fd=fd)  # a link is removed, not followed
        if m.isreg():
            src = tar.extractfile(m)
            assert src is not None
            wfd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
            with os.fdopen(wfd, "wb") as w:
                shutil.copyfileobj(src, w)
                os.fchmod(w.fileno(), m.mode & 0o777)
                w.flush()
                os.utime(w.fileno(), (m.mtime, m.mtime))
        elif m.issym():
            if not keep:
                why = _leaves(root, parts[:-1], m.linkname)
                if why:
                    raise _unsafe(m.name, f"links to {m.linkname!r}, outside: {why}")
            os.symlink(m.linkname, name, dir_fd=fd)
            if not keep:
                links.append((parts, m.linkname))
        elif m.islnk():
            src_parts = _parts(m.linkname) or []
            sfd = _open_dirs(root, src_parts[:-1], False, m.name)
            try:
                sst = os.lstat(src_parts[-1], dir_fd=sfd)
                if not stat.S_ISREG(sst.st_mode):
                    raise _unsafe(m.name, f"links to {m.linkname!r}, which is not a file of the tree")
                os.link(src_parts[-1], name, src_dir_fd=sfd, dst_dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError as e:
                raise _unsafe(m.name, f"links to {m.linkname!r}, which is not there") from e
            finally:
                os.close(sfd)
    finally:
        os.close(fd)
