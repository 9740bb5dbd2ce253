"""The blocking client: Client for one connection to relayd, and serve()
with its Listener for relayds that dial out (relayd --connect).

A Client runs one request at a time: calls from several threads wait for
each other. For several executions at once, open several Clients (one
execution per connection, as the protocol has it). Two calls are for
another thread while an execute waits: interrupt() (end it) and
write_stdin() (feed an execute run with ``stdin_open``)."""

from __future__ import annotations

import hmac
import select
import selectors
import socket
import subprocess
import threading
import time
from types import TracebackType
from typing import IO, Any, Dict, FrozenSet, Iterator, List, Mapping, Optional, Sequence, Tuple, Type, Union

from . import _dirs, _files, _ops, _wire
from ._files import FileInfo
from ._wire import Address, BoundaryFilesSpec, KeepEntry, OnOutput, OnStarted, Paths, StdinSource
from .errors import ConnectionLostError, ProtocolError, RelaydError, ReplyTimeoutError, UnexpectedReplyError
from .results import Changes, Executed, Marked, Ready, Recycled, Restored, Status, Verified

__all__ = ["Client", "Listener", "serve"]


class Client:
    """A connection to relayd.

    ``Client(address, token)`` connects to a listening relayd
    ("127.0.0.1:7700" or ("127.0.0.1", 7700)). ``teardown_budget`` is
    relayd's --teardown-timeout in seconds: an execute with ``timeout_ms``
    waits for its reply up to the deadline plus that budget plus a few
    seconds, since relayd settles the scope before it replies. Use it as a
    context manager, or call close(). The client half-closes its side of
    the connection only in interrupt(): relayd takes that as the controller
    gone.
    """

    def __init__(
        self,
        address: Address,
        token: str,
        *,
        connect_timeout: float = 10.0,
        teardown_budget: float = _wire.DEFAULT_TEARDOWN_BUDGET,
        reply_timeout: float = _wire.DEFAULT_REPLY_TIMEOUT,
        _sock: Optional[socket.socket] = None,
        _buffer: bytes = b"",
    ) -> None:
        self._token = token
        self.teardown_budget = teardown_budget
        self.reply_timeout = reply_timeout
        self._lock = threading.Lock()
        self._wlock = threading.Lock()  # one line at a time: write_stdin comes from another thread
        self._next_id = 1
        self._buf = bytearray(_buffer)
        if _sock is None:
            _sock = socket.create_connection(_wire.parse_address(address), timeout=connect_timeout)
        self._sock: Optional[socket.socket] = _sock
        _wire.keepalive(_sock)
        #: The ready relayd sent first, for a relayd that dialed out (Listener.accept).
        self.first_ready: Optional[Ready] = None
        self._extensions: Optional[FrozenSet[str]] = None  # relayd's, asked once (_ops.serves)
        self._proc: Optional[subprocess.Popen[bytes]] = None  # over_command's command
        self._pump: Optional[_StdinPump] = None  # the running execute's stdin=, sent between reads

    @classmethod
    def over_command(
        cls,
        argv: Sequence[str],
        token: str,
        *,
        teardown_budget: float = _wire.DEFAULT_TEARDOWN_BUDGET,
        reply_timeout: float = _wire.DEFAULT_REPLY_TIMEOUT,
        ready_timeout: float = 30.0,
        stderr: Union[None, int, IO[bytes]] = None,
    ) -> "Client":
        """A Client that reaches relayd through a command's stdin and stdout:
        ``relayd bridge`` through an exec channel the harness already has,
        e.g. ``["docker", "exec", "-i", C, "relayd", "bridge"]`` or
        ``["kubectl", "exec", "-i", POD, "--", "relayd", "bridge"]``
        (protocol 4.6). The command gets one end of a socket pair as its
        stdin and stdout (its stderr is this process's, or ``stderr``: a
        file or subprocess.DEVNULL); the handshake is
        done here, and its ready is ``first_ready``. close() ends the
        command's stdin, which relayd takes as the end of the stream (what
        runs is settled), and waits for the command, killing it after 5 s."""
        ours, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen(list(argv), stdin=theirs.fileno(), stdout=theirs.fileno(), stderr=stderr)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # the command has its own: its end is then our EOF
        c = cls("", token, teardown_budget=teardown_budget, reply_timeout=reply_timeout, _sock=ours)
        c._proc = proc
        try:
            c.first_ready = c.ready(timeout=ready_timeout)
        except BaseException:
            c.close()
            raise
        return c

    def __repr__(self) -> str:
        peer = "closed"
        if self._sock is not None:
            try:
                peer = "%s:%s" % self._sock.getpeername()[:2]
            except OSError:
                peer = "?"
        return f"<relayd_client.Client {peer}>"

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._sock is None

    def close(self) -> None:
        """Close the connection. While an execution runs, relayd settles it (transport loss)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                # Wakes a call blocked reading it in another thread, and ends
                # the stream now: close alone waits for that read to return.
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()  # our own child, not yet reaped
                proc.wait()

    def idle_ok(self) -> bool:
        """Whether a connection kept idle (in a pool) may still serve: open,
        with nothing from relayd waiting (it sends nothing unprompted in
        listen mode; what is there is its end, or an error). Call it only
        while no call runs."""
        return not self.closed and not self._answered()

    def interrupt(self) -> None:
        """End this connection's stream from another thread while a call
        waits (a half-close): relayd handles what it read, settles what
        still runs (transport loss, rule 6.4) and still writes the replies
        owed (protocol section 2), so the waiting execute returns its
        executed reply once the scope is settled, and then sees the
        connection end. The connection serves nothing afterwards; close()
        it. Through ``relayd bridge`` the half-close travels as the end of
        the bridge's stdin."""
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # closed or reset already: relayd sees the loss either way

    def write_stdin(self, execution: str, data: bytes = b"", *, eof: bool = False) -> None:
        """Send ``data`` (and with ``eof`` the end) to the stdin of the
        running ``execution``, started with ``stdin_open=True`` and named by
        its ``on_started``; from another thread while execute waits.
        relayd holds what the subject has not read up to
        --max-stdin-buffer, then stops reading this connection until it
        does, so a call may wait that long."""
        pieces = [data[i:i + _wire.STDIN_CHUNK] for i in range(0, len(data), _wire.STDIN_CHUNK)] or [b""]
        for i, piece in enumerate(pieces):
            try:
                self._send(_wire.stdin_message(self._token, execution, piece, eof and i == len(pieces) - 1))
            except OSError as e:
                raise ConnectionLostError(f"relayd connection lost while sending stdin: {e}") from e

    def ready(self, *, timeout: Optional[float] = None) -> Ready:
        """Ask relayd who it is (a handshake or liveness probe)."""
        return self._call(_wire.ready_request(self, timeout))

    def execute(
        self,
        command: Union[str, Sequence[str]],
        args: Optional[Sequence[str]] = None,
        *,
        environment: Optional[Mapping[str, str]] = None,
        credentials: Optional[Mapping[str, str]] = None,
        result_token: Optional[str] = None,
        capture_stdout: bool = True,
        cwd: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        capture_stderr: Optional[bool] = None,
        stream: Optional[bool] = None,
        on_exit: Optional[str] = None,
        detach_ms: Optional[int] = None,
        input: Union[str, bytes, None] = None,
        stdin: Optional[StdinSource] = None,
        stdin_open: bool = False,
        user: Optional[str] = None,
        max_output_bytes: Optional[int] = None,
        output_keep: Optional[str] = None,
        pty: Optional[Tuple[int, int]] = None,
        limits: Optional[Mapping[str, int]] = None,
        timeout: Optional[float] = None,
        on_output: Optional[OnOutput] = None,
        on_started: Optional[OnStarted] = None,
    ) -> Executed:
        """Run a command in a tracked scope and wait for its executed reply.

        ``command`` is a program (path or name in PATH; no shell) with
        ``args``, or a list of both. ``timeout_ms`` is the framework's
        deadline: relayd settles the scope when it passes and reports
        ``framework_timeout``. ``timeout`` (seconds) bounds the wait here
        instead of the default (see the class); when it passes the
        connection is closed, so relayd settles the execution, and
        ReplyTimeoutError is raised. ``capture_stderr``, ``stream``,
        ``on_exit`` and ``detach_ms`` are protocol 4.5 extensions, sent
        only when given; ``on_output`` receives streamed Output chunks and
        ``on_started`` the execution's name. ``input`` (protocol 4.6) is
        written to the subject's stdin, which then closes (str as text,
        bytes as base64; at most --max-line-bytes in all). ``stdin`` (a
        binary file object, or an iterable of bytes) is streamed after
        ``input`` as stdin messages once relayd names the execution, then
        its end: any size, paced by relayd (which stops reading while the
        subject does not read), sent between reads of the replies here, so
        a subject that never reads only runs into its ``timeout_ms``; what
        is left when the executed reply comes is not sent. ``stdin_open``
        keeps stdin open after ``input`` for write_stdin() from another
        thread instead (not with ``stdin``). ``user`` runs
        the subject as that user (``"name"``, ``"uid"``, ``"name:group"``;
        relayd must be root). ``max_output_bytes`` returns at most that much
        of stdout and of stderr each (within relayd's limits), and
        ``output_keep="tail"`` their last bytes instead of the first; a cut
        sets ``stdout_truncated`` / ``stderr_truncated``. ``pty=(rows,
        cols)`` (protocol 4.7) runs the subject on a terminal of its own:
        ``input`` and ``stdin`` are keystrokes, output chunks have stream
        ``"pty"``, ``stdout`` is what the terminal showed, and resize()
        changes its size. ``limits``
        (protocol 4.8), e.g. ``{"nofile": 64, "cpuSeconds": 60}``, are set
        on the subject (``memoryBytes`` and ``pids`` on its cgroup, where
        relayd has those controllers); the reply's ``usage``, ``cause`` and
        ``limits`` say what it used, why it ended, what was applied.
        """
        msg = _wire.execute_message(
            command, args, environment=environment, credentials=credentials, result_token=result_token,
            capture_stdout=capture_stdout, cwd=cwd, timeout_ms=timeout_ms, capture_stderr=capture_stderr,
            stream=stream, on_exit=on_exit, detach_ms=detach_ms, input=input, user=user,
            max_output_bytes=max_output_bytes, output_keep=output_keep, pty=pty, limits=limits,
        )
        pump = _stdin_pump("execute", msg, stdin, stdin_open, self._token)
        return self._call(_wire.execute_request(self, msg, timeout_ms, timeout), on_output, on_started, pump=pump)

    def resize(self, execution: str, rows: int, cols: int) -> None:
        """Resize the terminal of ``execution``, an execute with ``pty``
        running on this connection (protocol 4.7): its foreground job gets
        SIGWINCH. Call it from that execute's ``on_started`` or
        ``on_output`` (the thread that runs it; Client is not shared between
        threads). relayd does not answer a resize; one it refuses is a
        RuntimeWarning, not the execute's error."""
        line = _wire.resize_message(self._token, execution, rows, cols)
        pump = self._pump
        if pump is not None and pump.queue(line):
            return  # sent after the stdin line that is half out
        self._send(line)

    def attach(self, execution: str, *, timeout: Optional[float] = None, on_output: Optional[OnOutput] = None) -> Executed:
        """Take over ``execution``, run with ``detach_ms`` and detached by the
        loss of its connection (protocol 4.5), and wait for its executed
        reply: the real one, also when it ended while detached.
        ``on_output`` receives its streamed output from now on (what was
        written while detached is counted in the first chunk's
        ``dropped``). The execution is then this connection's: its
        ``verify`` ends it, its loss detaches it again. NotFoundError when
        relayd holds no such detached execution; relayd sees a connection's
        loss a moment after the controller does, so a caller may retry for
        a moment. ``timeout`` (seconds) bounds the wait; by default it is
        unbounded, as this client cannot know how long the execution has
        left.
        """
        return self._call(_wire.attach_request(execution, timeout), on_output)

    def verify(self, *, all: bool = False, survivors: Optional[str] = None, keep: Sequence[KeepEntry] = (),
               files: Optional[BoundaryFilesSpec] = None, timeout: Optional[float] = None) -> Verified:
        """This connection's verification boundary (protocol 4.3): relayd
        ends what still runs on this connection and reports whether the
        session is quiescent; other connections' executions run on. For the
        whole trial's end use boundary().

        ``all=True`` (with ``survivors`` and ``keep``) is boundary(), kept
        for existing callers. ``keep`` holds survivors as relayd listed them
        (or ``(pid, start)`` pairs copied from them): relayd keeps a process only if its pid and start time
        both match, so a process that took the pid of a service since is
        settled; a bare pid is a TypeError. ``files`` (with ``all``) is
        boundary()'s."""
        return self._call(_wire.verify_request(self, all, survivors, keep, files, timeout))

    def boundary(self, *, survivors: Optional[str] = None, keep: Sequence[KeepEntry] = (),
                 files: Optional[BoundaryFilesSpec] = None, timeout: Optional[float] = None) -> Verified:
        """The trial boundary (protocol 4.6; ``relayctl verify``): every
        execution of relayd ends, on any connection or detached, and
        ``survivors`` lists what every execution left; ``survivors="settle"``
        settles those too, except the processes in ``keep`` (survivors as
        relayd listed them, or ``(pid, start)`` pairs) and their descendants. The connection stays open; ``boundary`` on the reply
        numbers it from 1.

        ``files={"mark": NAME, "protect": [paths], "restore": True}``
        (protocol 4.9) is the filesystem half: once the processes are
        settled, the reply's ``tampered`` lists what changed under
        ``protect`` since the mark (each entry with its ``change``), and
        with ``restore`` those paths are put back as marked before relayd
        replies (``files.restored``), so that the verifier starts on the
        files the controller put there."""
        # not through verify(): a warning points at the caller's line
        return self._call(_wire.verify_request(self, True, survivors, keep, files, timeout))

    def status(self, *, timeout: Optional[float] = None) -> Status:
        """Look without touching (protocol 4.6): what runs or waits
        detached, the shell sessions, the survivors boundary() would list,
        and how many boundaries were drawn. Nothing ends, nothing is
        signalled. UnknownKindError from a relayd without it (its ready
        lists no "status")."""
        return self._call(_wire.status_request(self, timeout))

    # -- the filesystem half of the boundary (protocol 4.9) --

    def mark(self, name: str, paths: Paths, exclude: Optional[Paths] = None, keep: Optional[Paths] = None, *,
             timeout: Optional[float] = None) -> Marked:
        """Record the state of every entry under ``paths`` (absolute) as the
        mark ``name``: type, mode, owner, size, times, link target, content
        digest, and the kernel's change time, which user space cannot set
        back. ``exclude`` leaves subtrees out; the content under ``keep``
        is kept too (in relayd's state directory, out of every subject's
        reach), so that restore() can put it back. The mark outlives this
        connection and a restart of relayd; unmark() frees it.
        BadRequestError for a name that exists, or a mark whose kept
        content would pass relayd's --mark-bytes (nothing written then).
        ``timeout`` (seconds) bounds the wait; by default 10 minutes."""
        return self._call(_wire.mark_request(self, name, paths, exclude, keep, timeout))

    def changes(self, mark: str, paths: Optional[Paths] = None, *, timeout: Optional[float] = None) -> Changes:
        """What differs from ``mark`` (under ``paths``, else all it
        recorded): ``added``, ``modified`` (each with ``was`` and
        ``what``) and ``deleted`` entries, found by a stat walk; touches
        nothing. A modification time set back does not hide a change; a
        file rewritten with the same bytes is none. NotFoundError for a
        mark relayd does not hold (restore and unmark too)."""
        return self._call(_wire.changes_request(self, mark, paths, timeout))

    def restore(self, mark: str, paths: Optional[Paths] = None, *, timeout: Optional[float] = None) -> Restored:
        """Put ``paths`` (any entries inside the mark's ``keep``; default:
        every kept subtree) back as they were at ``mark``: what was added
        removed, what was modified or deleted written back, modes, owners,
        link targets and times reset; never through a symlink the agent
        placed, each file replaced whole. changes() for them is empty
        afterwards. A restore that could not finish names what it left in
        ``not_restored`` (``complete`` is then False). BadRequestError for a
        path outside the mark's keep."""
        return self._call(_wire.restore_request(self, mark, paths, timeout))

    def unmark(self, name: str, *, timeout: Optional[float] = None) -> None:
        """Free the mark ``name`` and the content only it kept."""
        self._call(_wire.unmark_request(self, name, timeout))

    def recycle(self, mark: str, *, timeout: Optional[float] = None) -> Recycled:
        """Hand a used container to the next trial (protocol 4.9,
        "Recycling a container"): the trial boundary with every survivor
        settled, then a restore of every kept subtree of ``mark``. Returns
        both replies' evidence; ``pristine`` says whether the processes are
        gone (confirmed) and the kept files are as marked."""
        return self._drive(_ops.recycle(self, mark, timeout))

    def session(self, *, shell: Optional[str] = None, user: Optional[str] = None, cwd: Optional[str] = None,
                environment: Optional[Mapping[str, str]] = None, credentials: Optional[Mapping[str, str]] = None,
                limits: Optional[Mapping[str, int]] = None, pty: Optional[Tuple[int, int]] = None,
                timeout: Optional[float] = None) -> "Session":
        """Open a shell session (protocol 4.7): a shell (``bash``, or
        ``shell="sh"``) whose directory, variables, functions and
        background jobs last from one command to the next::

            with client.session() as sh:
                sh.run("cd repo")
                r = sh.run("pytest -x", timeout_ms=600000)

        Leaving the ``with`` closes it (its processes settled). BusyError
        when relayd has --max-sessions open. ``pty=(rows, cols)`` runs an
        interactive shell on a terminal: write() types into it, read()
        returns what it printed, resize() changes its size."""
        r = self._call(_wire.open_request(self, shell, user, cwd, environment, credentials, limits, pty, timeout))
        return Session(self, *_wire.opened(r))

    def attach_session(self, name: str) -> "Session":
        """The open session ``name`` (another connection may have opened
        it), used through this connection."""
        return Session(self, name, "", "")

    def request(self, message: Mapping[str, Any], *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Send any message (token and id added) and return relayd's reply as
        a dict: for kinds this client has no method for."""
        return self._call(_wire.any_request(message, timeout))

    def upload_file(self, path: str, data: _files.Source, *, mode: Optional[int] = None, user: Optional[str] = None,
                    parents: bool = False, timeout: Optional[float] = None, digest: Optional[str] = None) -> FileInfo:
        """Store ``data`` (bytes, or a binary file object read in chunks) at
        ``path`` on relayd's side (relative to its workspace), atomically:
        a reader there sees the old file or the whole new one (protocol
        4.6). ``mode`` (e.g. 0o755; default 0o644), ``user`` (write with that
        user's rights, the new file is its; default relayd's
        --subject-user), ``parents`` (make missing directories). relayd's
        sha256 is checked against the bytes sent; ``digest="none"``: no
        digest on either side, for a transport that checks its bytes
        itself (protocol 4.6, "Bulk bodies"). NotFoundError for a
        missing parent, BadRequestError for a directory, a symbolic link
        relayd does not follow, a bad mode, a file over --max-file-bytes."""
        return self._drive(_ops.upload_file(self, path, data, mode, user, parents, timeout, digest))

    def _put_failed(self, call: _wire.Call, e: BaseException) -> BaseException:
        """What a put that failed while sending raises: a refusal as it
        is (the connection serves on); anything else closes the connection,
        so that relayd drops the put's temporary file, an OSError as
        ConnectionLostError."""
        if isinstance(e, ProtocolError):
            _wire.warn_ignored(call, "put")
            return e
        self.close()
        if isinstance(e, OSError) and not isinstance(e, RelaydError):
            lost = ConnectionLostError(f"relayd connection lost while sending a file: {e}")
            lost.__cause__, lost.__suppress_context__ = e, True  # as "raise lost from e"
            return lost
        return e

    def _put_lines(self, op: _ops.PutLines) -> Any:
        """A put as lines, each sent while relayd has not answered (a refusal)."""
        with self._lock:
            id = self._next_id
            self._next_id += 1
            call = _wire.Call(id, "stored")
            try:
                line: Optional[bytes] = None
                for m in op.msgs:
                    if line is not None:
                        if self._answered():
                            line = b""  # refused already: relayd drops what would follow; read why
                            break
                        self._send(line)
                    line = _wire.encode({"token": self._token, **m, "id": id})
                assert line is not None
                r = self._exchange(line, call, op.wait, raw=True)
            except BaseException as e:
                raise self._put_failed(call, e)
        _wire.warn_ignored(call, "put")
        return r

    def _put_body(self, op: _ops.PutBody) -> Any:
        """A put of one raw body: its line, then the bytes, sent whole even
        when relayd refuses the put (it reads and drops them, and the
        stream stays in step)."""
        with self._lock:
            id = self._next_id
            self._next_id += 1
            call = _wire.Call(id, "stored")
            try:
                self._send(_wire.encode({"token": self._token, **op.msg, "id": id}))
                for b in op.pieces:
                    self._send(b)
                r = self._exchange(b"", call, op.wait, raw=True)
            except BaseException as e:
                raise self._put_failed(call, e)
        _wire.warn_ignored(call, "put")
        return r

    def _read_body(self, n: int, call: _files.ContentCall, deadline: Optional[float]) -> None:
        """Hands the n raw bytes that follow a content line to call."""
        left = n
        if self._buf:
            b = bytes(self._buf[:left])
            del self._buf[:len(b)]
            call.body(b)
            left -= len(b)
        while left:
            sock, remaining = self._until(deadline, "the file did not arrive in time; the connection is closed")
            chunk = self._recv(sock, min(left, 1 << 18), remaining, "relayd connection failed inside a file's body")
            if chunk is None:
                continue
            if not chunk:
                self.close()
                raise ConnectionLostError(f"relayd closed the connection {left} bytes before the end of a file's body")
            call.body(chunk)
            left -= len(chunk)

    def upload_dir(self, local_dir: str, remote_dir: str, *, user: Optional[str] = None,
                   timeout: Optional[float] = None, links: Optional[str] = None) -> None:
        """Copy the directory ``local_dir`` into ``remote_dir`` on relayd's
        side (made if missing), as a tar stream over put: bounded memory,
        checked by sha256, unpacked there by relayd itself when it serves
        "tree" (protocol 4.6), else by ``tar`` (as ``user``, whose files
        they then are). DirectoryError when the unpacking fails, or when
        relayd refused a member: by default a symbolic link that leads
        outside ``remote_dir``; with ``links="keep"`` every link is kept as
        it is, whatever its target (a virtual environment's link to
        /usr/bin/python3), as docker cp keeps it. Nothing is ever written
        through a link. ``links`` other than None or "keep": ValueError."""
        self._drive(_ops.tree(self, _dirs.upload_dir(local_dir, remote_dir, user=user, timeout=timeout, links=links)))

    def download_dir(self, remote_dir: str, local_dir: str, *, user: Optional[str] = None,
                     timeout: Optional[float] = None, links: Optional[str] = None) -> None:
        """Copy the directory ``remote_dir`` on relayd's side into
        ``local_dir`` (made if missing), as a tar stream over get. Members
        that would land outside ``local_dir`` are refused (the container
        is the subject's to write), and nothing is written through a
        symbolic link, the archive's or one already in ``local_dir``
        (DirectoryError). By default a link that leads outside
        ``local_dir`` is refused too; with ``links="keep"`` every link is
        kept as it is, whatever its target, as docker cp keeps it."""
        self._drive(_ops.tree(self, _dirs.download_dir(remote_dir, local_dir, user=user, timeout=timeout, links=links)))

    def _drive(self, plan: _ops.Plan[_wire.T]) -> _wire.T:
        """Runs a plan of the core (_ops) with this client's I/O."""
        d: _ops.Driver[_ops.Op, _wire.T] = _ops.Driver(plan)
        while (op := d.next()) is not None:
            with d.doing():
                d.value = self._do(op)
        return d.result

    def _do(self, op: _ops.Op) -> Any:
        """What one request of a plan asks, done."""
        if isinstance(op, _ops.Ask):
            return self._call(op.req)
        if isinstance(op, _ops.PutLines):
            return self._put_lines(op)
        if isinstance(op, _ops.PutBody):
            return self._put_body(op)
        if isinstance(op, _ops.Fetch):
            return self._fetch(op)
        return op.fn(*op.args)

    def download_file(self, path: str, *, user: Optional[str] = None, timeout: Optional[float] = None,
                      digest: Optional[str] = None) -> bytes:
        """The bytes of the file at ``path`` on relayd's side (relative to
        its workspace), checked against relayd's sha256 (protocol 4.6;
        ``digest="none"``: no digest on either side). ``user`` reads it
        with that user's rights (default relayd's --subject-user).
        FailedError when the file changed while relayd sent it. For a
        large file, use download_file_to, which holds one chunk at a
        time, or download_file_as."""
        return self._drive(_ops.download_file(self, path, user, timeout, digest))

    def download_file_to(self, path: str, out: IO[bytes], *, user: Optional[str] = None,
                         timeout: Optional[float] = None, digest: Optional[str] = None) -> FileInfo:
        """Write the file at ``path`` on relayd's side to the binary file
        object ``out`` as its bytes arrive, and check relayd's sha256 of
        them (``digest="none"``: none on either side); on an error part of
        the file may have been written (download_file_as leaves nothing).
        ``timeout`` (seconds) bounds the whole transfer; by default there
        is none (TCP keepalive notices a relayd that vanished)."""
        return self._drive(_ops.download(self, path, out, user, timeout, digest=digest))

    def download_file_as(self, path: str, local_path: str, *, user: Optional[str] = None,
                         timeout: Optional[float] = None, digest: Optional[str] = None) -> FileInfo:
        """Copy the file at ``path`` on relayd's side to ``local_path``: written
        to a temporary file beside it and renamed into place only once the
        transfer checked out, so that a failed one leaves what was there."""
        return self._drive(_ops.download_file_as(self, path, local_path, user, timeout, digest))

    def _fetch(self, op: _ops.Fetch) -> FileInfo:
        """A get: its content, and a raw body after its content line, into op.out."""
        timeout = op.timeout
        with self._lock:
            id = self._next_id
            self._next_id += 1
            call = _files.ContentCall(id, op.out, op.hashing)
            try:
                deadline = None if timeout is None else time.monotonic() + timeout
                r = self._exchange(_wire.encode({"token": self._token, **op.msg, "id": id}), call, timeout)
                if isinstance(r, dict) and isinstance(r.get("body"), int):
                    self._read_body(int(r["body"]), call, deadline)
                    if call.trailer_due():  # sent (or relayd's error) follows the bytes
                        r = self._exchange(b"", call, None if deadline is None else max(0.0, deadline - time.monotonic()))
            except ProtocolError:
                _wire.warn_ignored(call, "get")
                raise
            except BaseException:
                self.close()
                raise
        _wire.warn_ignored(call, "get")
        assert isinstance(r, dict)
        return call.info(r)

    # -- machinery --

    def _call(self, req: _wire.Request[_wire.T], on_output: Optional[OnOutput] = None,
              on_started: Optional[OnStarted] = None, pump: Optional[_StdinPump] = None) -> _wire.T:
        with self._lock:
            id = self._next_id
            self._next_id += 1
            line = _wire.encode({"token": self._token, **req.msg, "id": id})
            call = _wire.Call(id, req.want, on_output, on_started)
            try:
                if pump is not None:
                    pump.call = call
                    self._pump = pump
                try:
                    r = self._exchange(line, call, req.wait, req.raw)
                finally:
                    self._pump = None
                if pump is not None:
                    self._finish_line(pump)
            except ProtocolError:
                _wire.warn_ignored(call, str(req.msg.get("kind")))
                raise  # the connection stays open unless relayd closes it (handled in _exchange)
            except BaseException:
                # Interrupted (KeyboardInterrupt, a callback that raised) or lost:
                # the reply may still come, so the connection can serve nothing
                # more. Closing it makes relayd settle what still runs.
                self.close()
                raise
        _wire.warn_ignored(call, str(req.msg.get("kind")))
        return req.of(r)

    def _exchange(self, line: bytes, call: _wire.Call, wait: Optional[float], raw: bool = False) -> _wire.Reply:
        deadline = None if wait is None else time.monotonic() + wait
        sent_error: Optional[OSError] = None
        try:
            self._send(line)
        except OSError as e:
            # relayd may have answered and closed first (busy, unauthenticated):
            # read what it said before reporting the connection lost.
            sent_error = e
        while True:
            try:
                msg = _wire.decode(self._readline(deadline))
                _wire.check_token(msg, self._token)
            except ConnectionLostError as e:
                if sent_error is not None:
                    raise ConnectionLostError(f"relayd connection lost while sending: {sent_error}") from e
                raise
            except UnexpectedReplyError:
                self.close()
                raise
            if _wire.aside(msg):
                continue
            mid = msg.get("id")
            if mid is not None and mid != call.id:
                self.close()
                raise UnexpectedReplyError(f"relayd sent a {msg['kind']} for request {mid!r} while request {call.id} waited")
            try:
                r = call.take(msg, raw)
            except ProtocolError as e:
                if _wire.closes(e) or sent_error is not None:
                    self.close()
                raise
            except UnexpectedReplyError:
                self.close()
                raise
            if r is not None:
                return r

    def _finish_line(self, pump: "_StdinPump") -> None:
        """Sends the rest of a stdin line cut short by the executed reply, so
        that the next request starts a line of its own; relayd reads on once
        the execution ended (it drops such input)."""
        rest = pump.rest()
        if rest:
            try:
                self._send(rest)
            except OSError as e:
                self.close()
                raise ConnectionLostError(f"relayd connection lost while ending a stdin message: {e}") from e

    def _answered(self) -> bool:
        """Whether relayd has written something to read (a put's refusal)."""
        sock = self._sock
        return bool(self._buf) or (sock is not None and bool(select.select([sock], [], [], 0)[0]))

    def _send(self, line: bytes) -> None:
        sock = self._sock
        if sock is None:
            raise ConnectionLostError("this relayd connection is closed")
        with self._wlock:
            sock.settimeout(self.reply_timeout)
            sock.sendall(line)

    def _until(self, deadline: Optional[float], late: str) -> Tuple[socket.socket, Optional[float]]:
        """The socket and the seconds left before deadline (None: no
        limit): ConnectionLostError when the connection is closed; past the
        deadline the connection is closed and ReplyTimeoutError says late."""
        sock = self._sock
        if sock is None:
            raise ConnectionLostError("this relayd connection is closed")
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            self.close()
            raise ReplyTimeoutError(late)
        return sock, remaining

    def _recv(self, sock: socket.socket, n: int, remaining: Optional[float], failed: str,
              partial: int = 0) -> Optional[bytes]:
        """Up to n bytes (b"": relayd closed the connection), or None when
        remaining seconds passed first; when the socket fails, the
        connection is closed and ConnectionLostError says failed."""
        sock.settimeout(remaining)
        try:
            return sock.recv(n)
        except socket.timeout:
            return None
        except OSError as e:
            self.close()
            raise ConnectionLostError(f"{failed}: {e}", partial) from e

    def _readline(self, deadline: Optional[float]) -> bytes:
        while True:
            i = self._buf.find(b"\n")
            if i >= 0:
                line = bytes(self._buf[: i + 1])
                del self._buf[: i + 1]
                if line.strip():
                    return line
                continue
            if len(self._buf) > _wire.MAX_REPLY_LINE:
                self.close()
                raise UnexpectedReplyError(f"relayd sent a line longer than {_wire.MAX_REPLY_LINE} bytes")
            sock, remaining = self._until(
                deadline, "no reply from relayd in time; the connection is closed, so relayd settles what ran")
            pump = self._pump
            if pump is not None and pump.wants_write():
                # Send stdin only while relayd reads it, and read replies meanwhile.
                try:
                    readable, writable, _ = select.select([sock], [sock], [], remaining)
                    if writable and not readable:
                        sock.settimeout(0)
                        pump.write(sock)
                        continue
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as e:
                    self.close()
                    raise ConnectionLostError(f"relayd connection lost while sending stdin: {e}", len(self._buf)) from e
                if not readable:
                    continue  # the deadline check above reports it
            chunk = self._recv(sock, 1 << 16, remaining, "relayd connection failed", len(self._buf))
            if chunk is None:
                continue  # the deadline check above reports it
            if not chunk:
                partial = len(self._buf)
                self.close()
                if partial:
                    raise ConnectionLostError(f"relayd closed the connection in the middle of a reply ({partial} bytes of an unfinished line)", partial)
                raise ConnectionLostError("relayd closed the connection before it replied")
            self._buf += chunk


class Session(_ops.SessionCore[Client]):
    """An open shell session (Client.session). Its commands run one at a
    time; run() returns the same Executed as execute(), with ``session``,
    ``cwd`` (the shell's directory afterwards) and ``session_ended``."""

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if not self.client.closed:
            try:
                self.close()
            except ProtocolError:
                pass  # already closed (the shell exited)

    def run(self, script: str, *, timeout_ms: Optional[int] = None, input: Union[str, bytes, None] = None,
            max_output_bytes: Optional[int] = None, timeout: Optional[float] = None,
            stream: Optional[bool] = None, stdin: Optional[StdinSource] = None, stdin_open: bool = False,
            on_output: Optional[OnOutput] = None, on_started: Optional[OnStarted] = None) -> Executed:
        """Run ``script`` in the shell as if typed at its prompt (several
        lines, heredocs, cd, export, source, functions). ``exit_code`` is
        the command's own (2 for a syntax error); stdout and stderr come
        apart. ``timeout_ms`` interrupts it (Ctrl-C, then its processes
        are settled; the shell and earlier background jobs live on).
        ``input`` is its stdin (with a pty: bash, and no NUL).
        ``stream``, ``stdin``, ``stdin_open``, ``on_output`` and
        ``on_started`` are as for execute(); with a pty, output chunks
        have stream ``"pty"`` and ``stdin`` is keystrokes (its end types
        nothing)."""
        req = _wire.run_request(self.client, self.name, script, timeout_ms, input, max_output_bytes, stream, timeout)
        pump = _stdin_pump("run", req.msg, stdin, stdin_open, self.client._token)
        return self._ran(self.client._call(req, on_output, on_started, pump=pump))

    def write(self, keys: Union[str, bytes]) -> None:
        """Type ``keys`` into a pty session's terminal (``"\\x03"`` is
        Ctrl-C). relayd answers only a refusal, raised by the next call."""
        msg = _wire.run_message(self.name, "", None, keys, None)
        line = _wire.encode({"token": self.client._token, "kind": "stdin", "session": self.name,
                             "data": msg["input"], **({"encoding": "base64"} if "inputEncoding" in msg else {})})
        self.client._send(line)

    def read(self, from_: int = 0, *, wait_ms: Optional[int] = None, idle_ms: Optional[int] = None,
             timeout: Optional[float] = None) -> Dict[str, Any]:
        """What a pty session's terminal printed from offset ``from_`` on:
        relayd's terminal reply (``data``, ``next`` to read from next,
        ``lost`` when the ring no longer held the start, ``ended``). It
        waits up to ``wait_ms`` for something new, and until nothing new
        came for ``idle_ms``."""
        msg: Dict[str, Any] = {"kind": "read", "session": self.name, "from": from_}
        if wait_ms is not None:
            msg["waitMs"] = wait_ms
        if idle_ms is not None:
            msg["idleMs"] = idle_ms
        wait = timeout if timeout is not None else self.client.reply_timeout + 120.0
        return self.client._call(_wire.Request(msg, "terminal", wait, _wire.RAW))

    def resize(self, rows: int, cols: int) -> None:
        """Resize a pty session's terminal."""
        if not (1 <= rows <= 1000 and 1 <= cols <= 1000):
            raise ValueError("resize: rows and cols must be from 1 to 1000")
        self.client._send(_wire.encode({"token": self.client._token, "kind": "resize", "session": self.name,
                                        "rows": rows, "cols": cols}))

    def close(self, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Settle the whole session and return relayd's closed reply
        (``settlement``, and ``usage``: what the whole session used)."""
        return self.client._call(_wire.close_request(self.client, self.name, timeout))


def _stdin_pump(what: str, msg: Dict[str, Any], stdin: Optional[StdinSource], stdin_open: bool,
                token: str) -> Optional["_StdinPump"]:
    """Marks msg as taking stdin when stdin or stdin_open asks for it, and
    returns the pump that sends a stdin= source between reads (else None)."""
    if not _ops.stdin_fields(what, msg, stdin, stdin_open):
        return None
    assert stdin is not None
    return _StdinPump(token, _wire.stdin_pieces(stdin))


class _StdinPump:
    """An execute's stdin= on its way: stdin lines made one at a time once
    relayd named the execution (started), the last with eof, and how much
    of the current line went out. Client._readline sends them between
    reads, when the socket takes more."""

    def __init__(self, token: str, pieces: Iterator[bytes]) -> None:
        self._token = token
        self._pieces = pieces
        self.call: Optional[_wire.Call] = None
        self._line = memoryview(b"")
        self._done = False  # the eof line is made
        self._queued: List[bytes] = []  # resize lines waiting for the current line's end

    def queue(self, line: bytes) -> bool:
        """Takes a whole line to send once the current one is out; False
        when no line is half out (the caller sends it at once)."""
        if not self._line:
            return False
        self._queued.append(line)
        return True

    def wants_write(self) -> bool:
        if self._line:
            return True
        if self._queued:
            self._line = memoryview(self._queued.pop(0))
            return True
        if self._done or self.call is None or not self.call.execution:
            return False
        b = next(self._pieces, None)
        if b is None:
            self._done = True
        # A source that raises ends the call with its exception; the connection closes (relayd settles).
        self._line = memoryview(_wire.stdin_message(self._token, self.call.execution, b or b"", b is None))
        return True

    def write(self, sock: socket.socket) -> None:
        n = sock.send(self._line)
        self._line = self._line[n:]

    def rest(self) -> bytes:
        """What is left of a line begun, if any."""
        return bytes(self._line)


class _Hello:
    """A peer in its handshake: what it sent of its first line so far."""

    __slots__ = ("buf", "began", "expires", "long")

    def __init__(self, began: float, expires: float) -> None:
        self.buf = bytearray()
        self.began = began
        self.expires = expires
        self.long = False  # holds a long-hello slot


class _Held:
    """A relayd whose handshake is done, waiting for its trial's accept."""

    __slots__ = ("token", "sock", "ready", "rest", "expires")

    def __init__(self, token: str, sock: socket.socket, ready: Dict[str, Any], rest: bytes, expires: float) -> None:
        self.token = token
        self.sock = sock
        self.ready = ready
        self.rest = rest
        self.expires = expires


class Listener:
    """Accepts relayds that dial out (``relayd --connect HOST:PORT``) and
    hands each to the trial whose token it carries: accept(token) returns a
    Client once a relayd whose first ``ready`` carries that token has
    connected. Several threads may call accept at once. Made by serve().

    A peer that sends no ready with a token within ``handshake_timeout`` is
    closed. Its first line may be as long as a reply (a ready carries the
    relayd's --instruction-file), but its first 64 KiB only are read
    freely: to send more it needs one of 4 long-hello slots, and when all
    are taken it is closed at once. relayds of other trials wait, handshake
    done, for their own accept, each for at most ``hold_timeout`` seconds.
    At most ``max_pending`` peers, in their handshake or waiting, are kept
    at once; more wait in the kernel's backlog, and while they wait a peer
    silent for 1 s in its handshake is closed to make room (a relayd sends
    its ready as soon as it is connected), so that peers that send nothing
    cannot keep relayds out.

    The listener works only inside accept: while no thread calls it,
    arriving relayds wait in the kernel's backlog, and timeouts are
    applied at the next accept. Many trials: accept as you launch (a
    thread per trial), since a relayd dials only for its
    --connect-timeout (30 s by default) and then exits 2; or give relayd a
    --connect-timeout above the time the launches take."""

    def __init__(
        self,
        address: Address = ("127.0.0.1", 0),
        *,
        handshake_timeout: float = 10.0,
        max_pending: int = 1024,
        hold_timeout: float = _wire.DEFAULT_HOLD_TIMEOUT,
        teardown_budget: float = _wire.DEFAULT_TEARDOWN_BUDGET,
    ) -> None:
        self._sock = socket.create_server(_wire.parse_address(address), backlog=_wire.LISTEN_BACKLOG)
        self._sock.setblocking(False)
        self.handshake_timeout = handshake_timeout
        self.max_pending = max_pending
        self.hold_timeout = hold_timeout
        self.teardown_budget = teardown_budget
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._sock, selectors.EVENT_READ)
        self._hello: Dict[socket.socket, _Hello] = {}
        self._long_hellos = 0  # peers in _hello holding a long-hello slot
        self._ready: List[_Held] = []
        self._lock = threading.Lock()
        self._closed = False
        self._accepting = True  # the listening socket is in the selector

    @property
    def address(self) -> Tuple[str, int]:
        """(host, port) the listener is bound to: give it to relayd as --connect HOST:PORT."""
        host, port = self._sock.getsockname()[:2]
        return host, port

    def __enter__(self) -> "Listener":
        return self

    def __exit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening and close every connection not handed out yet,
        peers in their handshake included."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for s in list(self._hello):
                s.close()
            for h in self._ready:
                h.sock.close()
            self._hello.clear()
            self._long_hellos = 0
            self._ready.clear()
            self._sel.close()
            self._sock.close()

    def accept(self, token: str, *, timeout: Optional[float] = None) -> Client:
        """Wait (up to ``timeout`` seconds; None: no limit) for the relayd of
        the trial with this token; ReplyTimeoutError when none came."""
        deadline = None if timeout is None else time.monotonic() + timeout
        want = token.encode()
        while True:
            with self._lock:
                if self._closed:
                    raise ConnectionLostError("the listener is closed")
                self._expire(time.monotonic())
                for i, h in enumerate(self._ready):
                    if hmac.compare_digest(h.token.encode(), want):
                        del self._ready[i]
                        h.sock.setblocking(True)
                        c = Client("", token, teardown_budget=self.teardown_budget, _sock=h.sock, _buffer=h.rest)
                        c.first_ready = Ready._parse(h.ready)
                        return c
                if deadline is not None and time.monotonic() >= deadline:
                    raise ReplyTimeoutError(f"no relayd with this trial's token dialed {self.address[0]}:{self.address[1]} in time")
                self._pump(0.05)

    def _pump(self, wait: float) -> None:
        self._expire(time.monotonic())
        full = len(self._hello) + len(self._ready) >= self.max_pending
        if full == self._accepting:  # full: leave the rest in the backlog
            if full:
                self._sel.unregister(self._sock)
            else:
                self._sel.register(self._sock, selectors.EVENT_READ)
            self._accepting = not full
        for key, _ in self._sel.select(wait):
            obj = key.fileobj
            if obj is self._sock:
                self._take()
            elif isinstance(obj, socket.socket):
                self._read_hello(obj)

    def _expire(self, now: float) -> None:
        """Closes peers past their handshake_timeout and relayds held past
        their hold_timeout: each pump looks, so while any accept waits, a
        held relayd is closed within 50 ms of its time, whether or not
        another peer arrives."""
        crowded = not self._accepting
        for sock, hello in list(self._hello.items()):
            if now >= hello.expires or crowded and now - hello.began >= _wire.CROWDED_HELLO:
                self._drop(sock)
        if any(now >= h.expires for h in self._ready):
            for h in self._ready:
                if now >= h.expires:
                    h.sock.close()
            self._ready = [h for h in self._ready if now < h.expires]

    def _take(self) -> None:
        try:
            conn, _ = self._sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return  # out of descriptors, or the peer gave up: the next one may do
        conn.setblocking(False)
        now = time.monotonic()
        self._hello[conn] = _Hello(now, now + self.handshake_timeout)
        self._sel.register(conn, selectors.EVENT_READ)

    def _read_hello(self, sock: socket.socket) -> None:
        hello = self._hello[sock]
        buf = hello.buf
        # Until its ready a peer is nobody: past MAX_HELLO bytes it reads on
        # only with a long-hello slot (taken below, once it gets there).
        size = 1 << 20 if hello.long else min(1 << 16, _wire.MAX_HELLO - len(buf))
        try:
            chunk = sock.recv(size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(sock)
            return
        start = len(buf)
        buf += chunk
        i = buf.find(b"\n", start)  # only the new bytes: a long line comes in many pieces
        if i < 0:
            if len(buf) > _wire.MAX_REPLY_LINE:
                self._drop(sock)
            elif len(buf) >= _wire.MAX_HELLO and not hello.long:
                if self._long_hellos >= _wire.MAX_LONG_HELLOS:
                    self._drop(sock)  # too many long first lines at once
                else:
                    hello.long = True
                    self._long_hellos += 1
            return
        if i > _wire.MAX_REPLY_LINE:
            self._drop(sock)
            return
        h = _wire.hello(bytes(buf[: i + 1]))
        if h is None:
            self._drop(sock)
            return
        token, msg = h
        self._end_hello(sock)
        self._ready.append(_Held(token, sock, msg, bytes(buf[i + 1 :]), time.monotonic() + self.hold_timeout))

    def _end_hello(self, sock: socket.socket) -> None:
        """Ends sock's handshake: its long-hello slot, if it held one, is given back."""
        self._sel.unregister(sock)
        if self._hello.pop(sock).long:
            self._long_hellos -= 1

    def _drop(self, sock: socket.socket) -> None:
        self._end_hello(sock)
        sock.close()


def serve(
    address: Address = ("127.0.0.1", 0),
    *,
    handshake_timeout: float = 10.0,
    max_pending: int = 1024,
    hold_timeout: float = _wire.DEFAULT_HOLD_TIMEOUT,
    teardown_budget: float = _wire.DEFAULT_TEARDOWN_BUDGET,
) -> Listener:
    """Listen for dial-out relayds on ``address`` (default: a free port on
    the loopback). Use the Listener as a context manager."""
    return Listener(address, handshake_timeout=handshake_timeout, max_pending=max_pending, hold_timeout=hold_timeout,
                    teardown_budget=teardown_budget)
