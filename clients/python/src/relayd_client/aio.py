"""The asyncio client: AsyncClient for one connection to relayd, and
AsyncListener for relayds that dial out.

Unlike Client, an AsyncClient takes requests concurrently: a verify sent
while an execute waits ends that execution (relayd answers executed, then
verified), and each awaiting call gets its own reply, matched by id."""

from __future__ import annotations

import asyncio
import hmac
import socket
from types import TracebackType
from typing import IO, Any, AsyncIterator, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple, Type, Union

from . import _dirs, _files, _ops, _wire
from ._files import FileInfo
from ._wire import Address, AsyncStdinSource, BoundaryFilesSpec, KeepEntry, OnOutput, OnStarted, Paths
from .errors import ConnectionLostError, ProtocolError, RelaydError, ReplyTimeoutError, UnexpectedReplyError
from .results import Changes, Executed, Marked, Ready, Recycled, Restored, Status, Verified

__all__ = ["AsyncClient", "AsyncListener"]


class AsyncClient:
    """A connection to relayd for asyncio code.

    ``async with AsyncClient(address, token) as c:`` connects and closes;
    the arguments are Client's. The client never half-closes its side."""

    def __init__(
        self,
        address: Address,
        token: str,
        *,
        connect_timeout: float = 10.0,
        teardown_budget: float = _wire.DEFAULT_TEARDOWN_BUDGET,
        reply_timeout: float = _wire.DEFAULT_REPLY_TIMEOUT,
    ) -> None:
        self._address = address
        self._token = token
        self.connect_timeout = connect_timeout
        self.teardown_budget = teardown_budget
        self.reply_timeout = reply_timeout
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._task: Optional["asyncio.Task[None]"] = None
        self._pending: Dict[int, Tuple[_wire.Call, "asyncio.Future[_wire.Reply]", bool]] = {}
        self._next_id = 1
        self._lost: Optional[RelaydError] = None
        #: The ready relayd sent first, for a relayd that dialed out (AsyncListener.accept).
        self.first_ready: Optional[Ready] = None
        self._proc: Optional[asyncio.subprocess.Process] = None  # over_command's command

    @classmethod
    async def over_command(
        cls,
        argv: Sequence[str],
        token: str,
        *,
        teardown_budget: float = _wire.DEFAULT_TEARDOWN_BUDGET,
        reply_timeout: float = _wire.DEFAULT_REPLY_TIMEOUT,
        ready_timeout: float = 30.0,
        stderr: Union[None, int, IO[bytes]] = None,
    ) -> "AsyncClient":
        """As Client.over_command: ``c = await AsyncClient.over_command(argv,
        token)`` runs the command (e.g. ``docker exec -i C relayd bridge``)
        with one end of a socket pair as its stdin and stdout and does the
        handshake (``first_ready``). close() ends the command's stdin, so
        relayd settles what runs, and waits for the command, killing it
        after 5 s."""
        ours, theirs = socket.socketpair()
        try:
            proc = await asyncio.create_subprocess_exec(*argv, stdin=theirs.fileno(), stdout=theirs.fileno(), stderr=stderr)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # the command has its own: its end is then our EOF
        c = cls("", token, teardown_budget=teardown_budget, reply_timeout=reply_timeout)
        c._proc = proc
        try:
            try:
                reader, writer = await asyncio.open_connection(sock=ours, limit=_wire.MAX_REPLY_LINE)
            except BaseException:
                ours.close()
                raise
            c._attach(reader, writer)
            c.first_ready = await c.ready(timeout=ready_timeout)
        except BaseException:
            await c.close()
            raise
        return c

    def __repr__(self) -> str:
        return f"<relayd_client.AsyncClient {'open' if self._writer else 'closed'}>"

    async def connect(self) -> "AsyncClient":
        """Open the connection (async with does it)."""
        host, port = _wire.parse_address(self._address)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, limit=_wire.MAX_REPLY_LINE), self.connect_timeout)
        except asyncio.TimeoutError:
            raise ReplyTimeoutError(f"no connection to relayd at {host}:{port} within {self.connect_timeout}s") from None
        self._attach(reader, writer)
        return self

    def _attach(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            _wire.keepalive(sock)
        self._reader, self._writer = reader, writer
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    async def __aenter__(self) -> "AsyncClient":
        if self._writer is None:
            await self.connect()
        return self

    async def __aexit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._writer is None

    async def close(self) -> None:
        """Close the connection. While an execution runs, relayd settles it (transport loss)."""
        writer, self._writer = self._writer, None
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._fail_all(ConnectionLostError("this relayd connection is closed"))
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except asyncio.TimeoutError:
                proc.kill()  # our own child, not yet reaped
                await proc.wait()

    async def ready(self, *, timeout: Optional[float] = None) -> Ready:
        return await self._call(_wire.ready_request(self, timeout))

    async def execute(
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
        stdin: Optional[AsyncStdinSource] = None,
        user: Optional[str] = None,
        max_output_bytes: Optional[int] = None,
        output_keep: Optional[str] = None,
        pty: Optional[Tuple[int, int]] = None,
        limits: Optional[Mapping[str, int]] = None,
        timeout: Optional[float] = None,
        on_output: Optional[OnOutput] = None,
        on_started: Optional[OnStarted] = None,
    ) -> Executed:
        """As Client.execute. Cancelling the awaiting task closes the
        connection (relayd then settles the execution). ``stdin`` may also
        be an async iterable of bytes; a file object is read in a thread.
        A task of its own sends it, paced by relayd, while the replies are
        read; it stops when the executed reply comes. A source that raises
        closes the connection, and execute raises its exception."""
        msg = _wire.execute_message(
            command, args, environment=environment, credentials=credentials, result_token=result_token,
            capture_stdout=capture_stdout, cwd=cwd, timeout_ms=timeout_ms, capture_stderr=capture_stderr,
            stream=stream, on_exit=on_exit, detach_ms=detach_ms, input=input, user=user,
            max_output_bytes=max_output_bytes, output_keep=output_keep, pty=pty, limits=limits,
        )
        return await self._execute(_wire.execute_request(self, msg, timeout_ms, timeout), stdin, on_output, on_started)

    async def _execute(self, req: _wire.Request[Executed], stdin: Optional[AsyncStdinSource],
                       on_output: Optional[OnOutput], on_started: Optional[OnStarted]) -> Executed:
        """Sends an execute (a session's too) and waits for its executed
        reply, with a task that sends stdin meanwhile."""
        if not _ops.stdin_fields("execute", req.msg, stdin):
            return await self._call(req, on_output, on_started)
        assert stdin is not None
        named: "asyncio.Future[str]" = asyncio.get_running_loop().create_future()

        def started(x: str) -> None:
            if not named.done():
                named.set_result(x)
            if on_started is not None:
                on_started(x)

        pump = asyncio.get_running_loop().create_task(self._pump_stdin(stdin, named))
        try:
            r = await self._call(req, on_output, started)
        except BaseException:
            err = await _end(pump)
            if err is not None:
                raise err
            raise
        await _end(pump)
        return r

    async def _pump_stdin(self, source: AsyncStdinSource, named: "asyncio.Future[str]") -> None:
        """Sends source as stdin messages for the execution named, then eof.
        drain waits while relayd does not read (the subject's input is held)."""
        execution = await named
        writer = self._writer
        try:
            async for b in _stdin_pieces(source):
                if self._writer is not writer or writer is None:
                    return
                async with self._wlock():
                    writer.write(_wire.stdin_message(self._token, execution, b, False))
                    await writer.drain()
                await asyncio.sleep(0)  # drain need not yield: let the reader take the replies
            if self._writer is writer and writer is not None:
                async with self._wlock():
                    writer.write(_wire.stdin_message(self._token, execution, b"", True))
                    await writer.drain()
        except OSError:
            pass  # the connection ended: the reader reports why
        except Exception:
            await self.close()
            raise

    async def resize(self, execution: str, rows: int, cols: int) -> None:
        """As Client.resize, from any task of this loop: the line goes out
        whole, between other lines. A refusal is a RuntimeWarning."""
        line = _wire.resize_message(self._token, execution, rows, cols)
        writer = self._writer
        if writer is None:
            raise ConnectionLostError("this relayd connection is closed")
        try:
            writer.write(line)
            await writer.drain()
        except OSError as e:
            raise ConnectionLostError(f"relayd connection lost while sending a resize: {e}") from e

    async def attach(self, execution: str, *, timeout: Optional[float] = None,
                     on_output: Optional[OnOutput] = None) -> Executed:
        """As Client.attach."""
        return await self._call(_wire.attach_request(execution, timeout), on_output)

    async def verify(self, *, all: bool = False, survivors: Optional[str] = None, keep: Sequence[KeepEntry] = (),
                     files: Optional[BoundaryFilesSpec] = None, timeout: Optional[float] = None) -> Verified:
        """As Client.verify: this connection's boundary (protocol 4.3);
        ``all=True`` is boundary(). ``keep`` holds survivors, or
        ``(pid, start)`` pairs, never bare pids."""
        return await self._call(_wire.verify_request(self, all, survivors, keep, files, timeout))

    async def boundary(self, *, survivors: Optional[str] = None, keep: Sequence[KeepEntry] = (),
                       files: Optional[BoundaryFilesSpec] = None, timeout: Optional[float] = None) -> Verified:
        """As Client.boundary: the trial boundary (protocol 4.6), with
        ``files`` its filesystem half (4.9)."""
        # not through verify(): a warning points at the caller's line
        return await self._call(_wire.verify_request(self, True, survivors, keep, files, timeout))

    async def status(self, *, timeout: Optional[float] = None) -> Status:
        """As Client.status: look without touching (protocol 4.6)."""
        return await self._call(_wire.status_request(self, timeout))

    # -- the filesystem half of the boundary (protocol 4.9) --

    async def mark(self, name: str, paths: Paths, exclude: Optional[Paths] = None, keep: Optional[Paths] = None, *,
                   timeout: Optional[float] = None) -> Marked:
        """As Client.mark: record the entries under ``paths``, keep the content under ``keep``."""
        return await self._call(_wire.mark_request(self, name, paths, exclude, keep, timeout))

    async def changes(self, mark: str, paths: Optional[Paths] = None, *, timeout: Optional[float] = None) -> Changes:
        """As Client.changes: what differs from ``mark``, touching nothing."""
        return await self._call(_wire.changes_request(self, mark, paths, timeout))

    async def restore(self, mark: str, paths: Optional[Paths] = None, *, timeout: Optional[float] = None) -> Restored:
        """As Client.restore: ``paths`` (default: every kept subtree) put back as marked."""
        return await self._call(_wire.restore_request(self, mark, paths, timeout))

    async def unmark(self, name: str, *, timeout: Optional[float] = None) -> None:
        """As Client.unmark: free the mark ``name``."""
        await self._call(_wire.unmark_request(self, name, timeout))

    async def recycle(self, mark: str, *, timeout: Optional[float] = None) -> Recycled:
        """As Client.recycle: the boundary settling every survivor, then a
        restore of every kept subtree of ``mark``."""
        return await self._drive(_ops.recycle(self, mark, timeout))

    async def session(self, *, shell: Optional[str] = None, user: Optional[str] = None, cwd: Optional[str] = None,
                      environment: Optional[Mapping[str, str]] = None, credentials: Optional[Mapping[str, str]] = None,
                      limits: Optional[Mapping[str, int]] = None, timeout: Optional[float] = None) -> "AsyncSession":
        """Client.session(), awaited: ``async with await c.session() as sh:``."""
        r = await self._call(_wire.open_request(self, shell, user, cwd, environment, credentials, limits, None, timeout))
        return AsyncSession(self, *_wire.opened(r))

    def attach_session(self, name: str) -> "AsyncSession":
        """The open session ``name``, used through this connection."""
        return AsyncSession(self, name, "", "")

    async def request(self, message: Mapping[str, Any], *, timeout: Optional[float] = None) -> Dict[str, Any]:
        return await self._call(_wire.any_request(message, timeout))

    _upload_lock: Optional[asyncio.Lock] = None  # one put at a time (_do)

    async def upload_file(self, path: str, data: _files.Source, *, mode: Optional[int] = None, user: Optional[str] = None,
                          parents: bool = False, timeout: Optional[float] = None, digest: Optional[str] = None) -> FileInfo:
        """As Client.upload_file. Uploads on one AsyncClient wait for each
        other; cancelling one closes the connection (relayd drops its
        temporary file)."""
        return await self._drive(_ops.upload_file(self, path, data, mode, user, parents, timeout, digest))

    _extensions: Optional[FrozenSet[str]] = None  # relayd's, asked once (_ops.serves)
    _write_lock: Optional[asyncio.Lock] = None  # held while a raw body goes out: no line may come between

    def _wlock(self) -> asyncio.Lock:
        if self._write_lock is None:
            self._write_lock = asyncio.Lock()
        return self._write_lock

    def _ulock(self) -> asyncio.Lock:
        if self._upload_lock is None:
            self._upload_lock = asyncio.Lock()
        return self._upload_lock

    def _put_call(self) -> Tuple[asyncio.StreamWriter, _wire.Call, "asyncio.Future[_wire.Reply]"]:
        """A put's start: the writer (ConnectionLostError when the
        connection is closed) and its call, registered with the future of
        its reply."""
        writer = self._writer
        if self._lost is not None or writer is None:
            raise ConnectionLostError("this relayd connection is closed")
        id = self._next_id
        self._next_id += 1
        call = _wire.Call(id, "stored")
        fut: "asyncio.Future[_wire.Reply]" = asyncio.get_running_loop().create_future()
        self._pending[id] = (call, fut, True)
        return writer, call, fut

    async def _put_body(self, op: _ops.PutBody) -> Any:
        """As Client._put_body: the put's line, then its raw body, with
        no other line between them."""
        writer, call, fut = self._put_call()
        id = call.id
        try:
            async with self._wlock():
                try:
                    writer.write(_wire.encode({"token": self._token, **op.msg, "id": id}))
                    for b in op.pieces:
                        writer.write(b)
                        await writer.drain()
                except OSError:
                    pass  # relayd may have answered and closed first: the reader reports what it said
            r = await asyncio.wait_for(asyncio.shield(fut), op.wait)
        except asyncio.TimeoutError:
            await self.close()
            raise ReplyTimeoutError("no reply from relayd in time; the connection is closed, so relayd settles what ran") from None
        except ProtocolError:
            _wire.warn_ignored(call, "put")
            raise
        except BaseException:
            await self.close()  # a body cut short: relayd drops its temporary file
            raise
        finally:
            self._pending.pop(id, None)
            if not fut.done():
                fut.cancel()
        _wire.warn_ignored(call, "put")
        return r

    async def _put_lines(self, op: _ops.PutLines) -> Any:
        """As Client._put_lines."""
        # Registered before the first chunk goes out, so that a refusal
        # (the only reply before the last chunk) stops the sending.
        writer, call, early = self._put_call()
        id = call.id
        line: Optional[bytes] = None
        try:
            for m in op.msgs:
                if line is not None:
                    if early.done():
                        break
                    async with self._wlock():
                        writer.write(line)
                        await writer.drain()
                    await asyncio.sleep(0)  # drain need not yield: let the reader see a refusal
                line = _wire.encode({"token": self._token, **m, "id": id})
        except OSError:
            pass  # relayd may have answered and closed first: the reader reports what it said
        except BaseException:
            await self.close()  # a transfer cut short
            raise
        finally:
            self._pending.pop(id, None)
        try:
            if early.done():
                exc = early.exception()
                assert exc is not None  # only a refusal comes before the last chunk
                raise exc
            assert line is not None
            r = await self._exchange(line, call, op.wait, raw=True)
        except ProtocolError:
            _wire.warn_ignored(call, "put")
            raise
        _wire.warn_ignored(call, "put")
        return r

    async def upload_dir(self, local_dir: str, remote_dir: str, *, user: Optional[str] = None,
                         timeout: Optional[float] = None, links: Optional[str] = None) -> None:
        """As Client.upload_dir: a tar file (made in a thread) over put,
        unpacked on relayd's side by relayd itself when it serves "tree",
        else by ``tar``; ``links="keep"`` keeps every symbolic link."""
        await self._drive(_ops.tree(self, _dirs.upload_dir(local_dir, remote_dir, user=user, timeout=timeout, links=links)))

    async def download_dir(self, remote_dir: str, local_dir: str, *, user: Optional[str] = None,
                           timeout: Optional[float] = None, links: Optional[str] = None) -> None:
        """As Client.download_dir: a tar file over get, unpacked here in a
        thread; ``links="keep"`` keeps every symbolic link, and nothing is
        written through one."""
        await self._drive(_ops.tree(self, _dirs.download_dir(remote_dir, local_dir, user=user, timeout=timeout, links=links)))

    async def _drive(self, plan: _ops.Plan[_wire.T]) -> _wire.T:
        """Runs a plan of the core (_ops) with this client's I/O; its
        blocking local steps (tar) in a thread."""
        d: _ops.Driver[_ops.Op, _wire.T] = _ops.Driver(plan)
        while (op := d.next()) is not None:
            with d.doing():
                d.value = await self._do(op)
        return d.result

    async def _do(self, op: _ops.Op) -> Any:
        """What one request of a plan asks, done."""
        if isinstance(op, _ops.Ask):
            return await self._call(op.req)
        if isinstance(op, (_ops.PutLines, _ops.PutBody)):
            async with self._ulock():  # one put at a time: relayd has one transfer per connection
                return await (self._put_lines(op) if isinstance(op, _ops.PutLines) else self._put_body(op))
        if isinstance(op, _ops.Fetch):
            return await self._fetch(op)
        return await asyncio.get_running_loop().run_in_executor(None, op.fn, *op.args)

    async def download_file(self, path: str, *, user: Optional[str] = None, timeout: Optional[float] = None,
                            digest: Optional[str] = None) -> bytes:
        """As Client.download_file."""
        return await self._drive(_ops.download_file(self, path, user, timeout, digest))

    async def download_file_to(self, path: str, out: IO[bytes], *, user: Optional[str] = None,
                               timeout: Optional[float] = None, digest: Optional[str] = None) -> FileInfo:
        """As Client.download_file_to: ``out`` is written by the reader as
        the bytes arrive."""
        return await self._drive(_ops.download(self, path, out, user, timeout, digest=digest))

    async def download_file_as(self, path: str, local_path: str, *, user: Optional[str] = None,
                               timeout: Optional[float] = None, digest: Optional[str] = None) -> FileInfo:
        """As Client.download_file_as: renamed into place only once the
        transfer checked out; a failed one leaves what was there."""
        return await self._drive(_ops.download_file_as(self, path, local_path, user, timeout, digest))

    async def _fetch(self, op: _ops.Fetch) -> FileInfo:
        """As Client._fetch: the reader takes a raw body (_read_loop)."""
        id = self._next_id
        self._next_id += 1
        call = _files.ContentCall(id, op.out, op.hashing, reader_first=True)
        try:
            r = await self._exchange(_wire.encode({"token": self._token, **op.msg, "id": id}), call, op.timeout)
        except ProtocolError:
            _wire.warn_ignored(call, "get")
            raise
        _wire.warn_ignored(call, "get")
        assert isinstance(r, dict)
        return call.info(r)

    # -- machinery --

    async def _call(self, req: _wire.Request[_wire.T], on_output: Optional[OnOutput] = None,
                    on_started: Optional[OnStarted] = None) -> _wire.T:
        id = self._next_id
        self._next_id += 1
        call = _wire.Call(id, req.want, on_output, on_started)
        try:
            r = await self._exchange(_wire.encode({"token": self._token, **req.msg, "id": id}), call, req.wait, req.raw)
        except ProtocolError:
            _wire.warn_ignored(call, str(req.msg.get("kind")))
            raise
        _wire.warn_ignored(call, str(req.msg.get("kind")))
        return req.of(r)

    async def _exchange(self, line: bytes, call: _wire.Call, wait: Optional[float], raw: bool = False) -> _wire.Reply:
        if self._lost is not None:
            raise ConnectionLostError(f"this relayd connection ended: {self._lost}") from self._lost
        writer = self._writer
        if writer is None:
            raise ConnectionLostError("this relayd connection is closed")
        fut: "asyncio.Future[_wire.Reply]" = asyncio.get_running_loop().create_future()
        self._pending[call.id] = (call, fut, raw)
        try:
            try:
                async with self._wlock():
                    writer.write(line)
                    await writer.drain()
            except OSError:
                pass  # relayd may have answered and closed first: the reader reports what it said
            return await asyncio.wait_for(asyncio.shield(fut), wait)
        except asyncio.TimeoutError:
            await self.close()
            raise ReplyTimeoutError("no reply from relayd in time; the connection is closed, so relayd settles what ran") from None
        except asyncio.CancelledError:
            await self.close()
            raise
        finally:
            self._pending.pop(call.id, None)
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # retrieved, so that asyncio does not log it

    async def _read_body(self, reader: asyncio.StreamReader, msg: Dict[str, Any]) -> None:
        """Hands the raw body that follows a content line to its get
        (dropped when nobody waits for it any more)."""
        mid = msg.get("id")
        entry = self._pending.get(mid) if isinstance(mid, int) else None
        call = entry[0] if entry is not None and isinstance(entry[0], _files.ContentCall) else None
        left = int(msg["body"])
        while left:
            try:
                b = await reader.read(min(left, 1 << 18))
            except OSError as e:
                raise ConnectionLostError(f"relayd connection failed inside a file's body: {e}") from e
            if not b:
                raise ConnectionLostError(f"relayd closed the connection {left} bytes before the end of a file's body")
            if call is not None:
                call.body(b)
            left -= len(b)

    async def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        try:
            while True:
                try:
                    line = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as e:
                    if e.partial:
                        raise ConnectionLostError(
                            f"relayd closed the connection in the middle of a reply ({len(e.partial)} bytes of an unfinished line)",
                            len(e.partial)) from None
                    raise ConnectionLostError("relayd closed the connection before it replied") from None
                except asyncio.LimitOverrunError:
                    raise UnexpectedReplyError(f"relayd sent a line longer than {_wire.MAX_REPLY_LINE} bytes") from None
                except OSError as e:
                    raise ConnectionLostError(f"relayd connection failed: {e}") from e
                if not line.strip():
                    continue
                msg = _wire.decode(line)
                _wire.check_token(msg, self._token)
                if msg["kind"] == "content" and isinstance(msg.get("body"), int):
                    await self._read_body(reader, msg)
                self._dispatch(msg)
        except RelaydError as e:
            self._lost = e
            self._fail_all(e)
            if self._writer is not None:
                self._writer.close()  # close() still awaits wait_closed

    def _dispatch(self, msg: Dict[str, Any]) -> None:
        if _wire.aside(msg):
            return
        mid = msg.get("id")
        if mid is None:
            err = _wire.error_from(msg)
            if _wire.closes(err):
                raise err
            self._fail_all(err)
            return
        entry = self._pending.get(mid) if isinstance(mid, int) else None
        if entry is None:
            return  # the reply to a request whose caller gave up
        call, fut, raw = entry
        if fut.done():
            return
        try:
            r = call.take(msg, raw)
        except ProtocolError as e:
            fut.set_exception(e)
            if _wire.closes(e):
                raise
            return
        except UnexpectedReplyError as e:
            fut.set_exception(e)
            raise
        except Exception as e:
            # An on_output or on_started callback raised: its call gets the
            # exception, and the connection closes (relayd settles what runs,
            # or detaches it), as Client does.
            fut.set_exception(e)
            raise ConnectionLostError(f"a callback raised {type(e).__name__}; the connection is closed") from e
        if r is not None:
            fut.set_result(r)

    def _fail_all(self, err: BaseException) -> None:
        for _, fut, _ in self._pending.values():
            if not fut.done():
                fut.set_exception(err)


class AsyncSession(_ops.SessionCore[AsyncClient]):
    """Session (client.py) for AsyncClient."""

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if not self.client.closed:
            try:
                await self.close()
            except ProtocolError:
                pass

    async def run(self, script: str, *, timeout_ms: Optional[int] = None, input: Union[str, bytes, None] = None,
                  max_output_bytes: Optional[int] = None, timeout: Optional[float] = None,
                  stream: Optional[bool] = None, stdin: Optional[AsyncStdinSource] = None,
                  on_output: Optional[OnOutput] = None, on_started: Optional[OnStarted] = None) -> Executed:
        """Session.run(), awaited; ``stdin`` as AsyncClient.execute's."""
        req = _wire.run_request(self.client, self.name, script, timeout_ms, input, max_output_bytes, stream, timeout)
        return self._ran(await self.client._execute(req, stdin, on_output, on_started))

    async def close(self, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Session.close(), awaited."""
        r = await self.client._call(_wire.close_request(self.client, self.name, timeout))
        return r


async def _stdin_pieces(source: AsyncStdinSource) -> AsyncIterator[bytes]:
    read = getattr(source, "read", None)
    if read is not None:
        loop = asyncio.get_running_loop()
        while True:
            b = await loop.run_in_executor(None, read, _wire.STDIN_CHUNK)
            if not b:
                return
            yield bytes(b)
    elif hasattr(source, "__aiter__"):
        async for b in source:
            for piece in _wire.split_piece(b):
                yield piece
    else:
        for b in source:
            for piece in _wire.split_piece(b):
                yield piece


async def _end(task: "asyncio.Task[None]") -> Optional[BaseException]:
    """Stops a stdin pump and returns the exception it ended with, if any."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and getattr(current, "cancelling", lambda: 0)():
            raise  # we are cancelled ourselves
    except Exception as e:
        return e
    return None


class _LongHelloRefused(Exception):
    """A peer passed MAX_HELLO bytes of its first line while every long-hello slot was taken."""


class AsyncListener:
    """Accepts relayds that dial out and hands each to the trial whose token
    it carries, like Listener: ``async with AsyncListener() as lst:``, then
    ``c = await lst.accept(token)`` in each trial's task. The limits are
    Listener's: ``handshake_timeout``, 64 KiB of a first line read freely
    and 4 long-hello slots for more, ``hold_timeout`` for a relayd whose
    trial has not called accept yet (a timer closes it, whether or not
    anything else happens), ``max_pending``. Past ``max_pending`` a peer
    waits, its reading paused, and while any waits a handshake silent for
    1 s is closed to make room; at most 4 * ``max_pending`` peers wait, more
    are closed at once."""

    def __init__(
        self,
        address: Address = ("127.0.0.1", 0),
        *,
        handshake_timeout: float = 10.0,
        max_pending: int = 1024,
        hold_timeout: float = _wire.DEFAULT_HOLD_TIMEOUT,
        teardown_budget: float = _wire.DEFAULT_TEARDOWN_BUDGET,
    ) -> None:
        self._address = _wire.parse_address(address)
        self.handshake_timeout = handshake_timeout
        self.max_pending = max_pending
        self.hold_timeout = hold_timeout
        self.teardown_budget = teardown_budget
        self._server: Optional[asyncio.Server] = None
        # Relayds waiting for their accept: token, client, the timer that closes it.
        self._ready: List[Tuple[str, AsyncClient, asyncio.TimerHandle]] = []
        self._changed = asyncio.Event()
        self._handshakes: Set["asyncio.Task[None]"] = set()
        self._reading: Dict["asyncio.Task[None]", float] = {}  # handshakes holding a pending slot, and since when
        self._evicted: Set["asyncio.Task[None]"] = set()  # of those, closed to make room
        self._queued = 0  # handshakes waiting for a slot
        self._long_hellos = 0  # handshakes holding a long-hello slot
        self._closing: Set["asyncio.Task[None]"] = set()  # held relayds being closed at their hold_timeout

    @property
    def address(self) -> Tuple[str, int]:
        assert self._server is not None, "start the AsyncListener first (async with)"
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    async def start(self) -> "AsyncListener":
        # The streams' limit is MAX_HELLO until a peer's ready is read (see _read_hello).
        self._server = await asyncio.start_server(self._handshake, *self._address, limit=_wire.MAX_HELLO)
        return self

    async def __aenter__(self) -> "AsyncListener":
        return await self.start()

    async def __aexit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop listening and close every connection not handed out yet,
        peers in their handshake included."""
        server, self._server = self._server, None
        if server is not None:
            # Closes the listening socket. Not followed by wait_closed: from
            # Python 3.12 that waits for every connection the server
            # accepted, the clients handed out by accept included.
            server.close()
        for t in list(self._handshakes):
            t.cancel()
        if self._handshakes:
            await asyncio.gather(*self._handshakes, return_exceptions=True)
        ready, self._ready = self._ready, []
        for _, c, timer in ready:
            timer.cancel()
            await c.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def accept(self, token: str, *, timeout: Optional[float] = None) -> AsyncClient:
        """The AsyncClient of the relayd whose ready carries ``token``;
        ReplyTimeoutError when none came within ``timeout`` seconds."""
        want = token.encode()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self._server is None:
                raise ConnectionLostError("the listener is closed")
            for i, (tok, c, timer) in enumerate(self._ready):
                if hmac.compare_digest(tok.encode(), want):
                    del self._ready[i]
                    timer.cancel()
                    return c
            self._changed.clear()
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise ReplyTimeoutError("no relayd with this trial's token dialed in time")
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handshakes.add(task)
        kept = False
        try:
            if not await self._take_slot(task, writer.transport):
                return
            try:
                h = _wire.hello(await asyncio.wait_for(self._read_hello(reader), self.handshake_timeout))
            except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError,
                    _LongHelloRefused):
                return
            except asyncio.CancelledError:
                if task not in self._evicted:
                    raise
                return  # silent while others waited for its slot
            finally:
                self._reading.pop(task, None)
                self._evicted.discard(task)
            if h is None:
                return
            token, msg = h
            c = AsyncClient("", token, teardown_budget=self.teardown_budget)
            c.first_ready = Ready._parse(msg)
            c._attach(reader, writer)
            timer = asyncio.get_running_loop().call_later(self.hold_timeout, self._expire, c)
            self._ready.append((token, c, timer))
            kept = True
            self._changed.set()
        finally:
            self._handshakes.discard(task)
            if not kept:
                writer.close()
                try:
                    await writer.wait_closed()
                except (OSError, asyncio.CancelledError):
                    pass

    async def _take_slot(self, task: "asyncio.Task[None]", transport: asyncio.BaseTransport) -> bool:
        """Waits for a pending slot (False: too many wait already). While it
        waits, its peer's reading is paused, and every 100 ms the
        handshakes silent for CROWDED_HELLO are closed: a relayd sends its
        ready as soon as it is connected."""
        loop = asyncio.get_running_loop()
        if len(self._ready) + len(self._reading) >= self.max_pending:
            if self._queued >= 4 * self.max_pending:
                return False
            self._queued += 1
            assert isinstance(transport, asyncio.ReadTransport)
            transport.pause_reading()
            try:
                while len(self._ready) + len(self._reading) >= self.max_pending:
                    now = loop.time()
                    for t, began in list(self._reading.items()):
                        if now - began >= _wire.CROWDED_HELLO and t not in self._evicted:
                            self._evicted.add(t)
                            t.cancel()
                    await asyncio.sleep(0.1)
            finally:
                self._queued -= 1
            transport.resume_reading()
        self._reading[task] = loop.time()
        return True

    async def _read_hello(self, reader: asyncio.StreamReader) -> bytes:
        """A peer's first line. Until its ready a peer is nobody: its stream
        reads MAX_HELLO bytes (and what the last read brought), and more
        only while it holds a long-hello slot. The limit is StreamReader's
        private _limit, raised in place: asyncio has no public way to
        change it, and a second stream would need the transport's protocol
        swapped. Its reads pause at twice the limit, but readuntil fails
        past it first."""
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            if self._long_hellos >= _wire.MAX_LONG_HELLOS:
                raise _LongHelloRefused() from None
            self._long_hellos += 1
            try:
                setattr(reader, "_limit", _wire.MAX_REPLY_LINE)
                return await reader.readuntil(b"\n")
            finally:
                self._long_hellos -= 1
        setattr(reader, "_limit", _wire.MAX_REPLY_LINE)  # the AsyncClient reads replies from it
        return line

    def _expire(self, c: AsyncClient) -> None:
        """The timer of a relayd held for hold_timeout without its accept: closes it."""
        for i, (_, held, _) in enumerate(self._ready):
            if held is c:
                del self._ready[i]
                t = asyncio.get_running_loop().create_task(c.close())
                self._closing.add(t)
                t.add_done_callback(self._closing.discard)
                return
