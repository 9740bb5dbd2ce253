"""A body get's digest after its bytes (protocol 4.6, "Bulk bodies") against
the real relayd, sync and async: the sent line's sha256 is checked, a file
that changed while relayd sent it raises FailedError with the connection
serving on, digest="none" computes none on either side, and
download_file_as leaves no part of a file behind; and, against a fake
relayd, a sent line whose sha256 is not the bytes' fails the get."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import os
import socket
import tempfile
import threading
import unittest
from typing import IO, Any, Iterator, List
from unittest import mock

from relayd_client import AsyncClient, Client, FailedError, UnexpectedReplyError, _files
from relayd_fixture import RelaydTest

BUF = 256 << 10  # relayd's body buffer
SIZES = [0, 1, BUF, BUF + 1, 8 << 20]


def data_of(n: int) -> bytes:
    return (bytes(range(256)) * (n // 256 + 1))[:n]


class Appender:
    """A file object that appends to path on relayd's side at its first
    write: relayd is then inside the body (a file larger than the sockets
    hold), so the file changes while it is sent."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.n = 0

    def write(self, b: bytes) -> int:
        if self.n == 0:
            with open(self.path, "ab") as f:
                f.write(b"more")
        self.n += len(b)
        return len(b)


BIG = 64 << 20


class DigestTest(RelaydTest):
    def test_sent_checked_both_ways(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            for digest in (None, "sha256", "none"):
                for n in SIZES:
                    data = data_of(n)
                    want = hashlib.sha256(data).hexdigest() if digest != "none" else ""
                    info = c.upload_file(f"f{n}", data, digest=digest)
                    self.assertEqual((info.bytes, info.sha256), (n, want))
                    with open(os.path.join(d.workspace, f"f{n}"), "rb") as f:
                        self.assertEqual(f.read(), data)
                    got = c.download_file(f"f{n}", digest=digest)
                    self.assertEqual(got, data)
                    path = os.path.join(d.dir, "local")
                    info = c.download_file_as(f"f{n}", path, digest=digest)
                    self.assertEqual((info.bytes, info.sha256), (n, want), "sent carries the sha256 of the bytes sent")
                    with open(path, "rb") as f:
                        self.assertEqual(f.read(), data)
            with self.assertRaises(ValueError):
                c.download_file("f1", digest="md5")
            self.assertEqual(c.execute("true").exit_code, 0)

        async def run() -> None:
            async with AsyncClient(d.addr, d.token) as a:
                for digest in (None, "none"):
                    for n in SIZES:
                        data = data_of(n)
                        want = hashlib.sha256(data).hexdigest() if digest != "none" else ""
                        info = await a.upload_file(f"a{n}", data, digest=digest)
                        self.assertEqual((info.bytes, info.sha256), (n, want))
                        self.assertEqual(await a.download_file(f"a{n}", digest=digest), data)
                        path = os.path.join(d.dir, "alocal")
                        info = await a.download_file_as(f"a{n}", path, digest=digest)
                        self.assertEqual((info.bytes, info.sha256), (n, want))
                        with open(path, "rb") as f:
                            self.assertEqual(f.read(), data)
                self.assertEqual((await a.execute("true")).exit_code, 0)

        asyncio.run(run())
        self.assertEqual(d.stop(), 0)

    def test_changed_while_sent(self) -> None:
        d = self.relayd()
        remote = os.path.join(d.workspace, "changing")
        for digest in (None, "none"):
            with open(remote, "wb") as f:
                f.write(data_of(BIG))
            with Client(d.addr, d.token) as c:
                out = Appender(remote)
                with self.assertRaisesRegex(FailedError, "changed"):
                    c.download_file_to("changing", out, digest=digest)  # type: ignore[arg-type]
                self.assertEqual(out.n, BIG, "the body is read whole: the stream stays in step")
                self.assertEqual(c.execute("true").exit_code, 0, "the next request is answered")

        async def run() -> None:
            with open(remote, "wb") as f:
                f.write(data_of(BIG))
            async with AsyncClient(d.addr, d.token) as a:
                out = Appender(remote)
                with self.assertRaisesRegex(FailedError, "changed"):
                    await a.download_file_to("changing", out)  # type: ignore[arg-type]
                self.assertEqual((await a.execute("true")).exit_code, 0)

        asyncio.run(run())
        self.assertEqual(d.stop(), 0)

    def test_download_file_as_leaves_nothing(self) -> None:
        # A get that fails (the file changed while it was sent) leaves the
        # local file as it was, and no temporary file beside it.
        d = self.relayd()
        remote = os.path.join(d.workspace, "changing")
        local_dir = os.path.join(d.dir, "local")
        os.mkdir(local_dir)
        local = os.path.join(local_dir, "f")
        with open(local, "wb") as f:
            f.write(b"old")
        with open(remote, "wb") as f:
            f.write(data_of(BIG))
        real = _files.local_replacement

        @contextlib.contextmanager
        def appending(path: str) -> Iterator[IO[bytes]]:
            # The real temporary file, whose first write appends to the
            # remote file: relayd is then inside the body.
            with real(path) as f:
                first = [True]
                write = f.write

                def hooked(b: Any) -> int:
                    if first:
                        first.clear()
                        with open(remote, "ab") as r:
                            r.write(b"more")
                    return write(b)
                f.write = hooked  # type: ignore[method-assign]
                yield f

        with Client(d.addr, d.token) as c:
            with mock.patch.object(_files, "local_replacement", appending):
                with self.assertRaises(FailedError):
                    c.download_file_as("changing", local)
            self.assertEqual(sorted(os.listdir(local_dir)), ["f"])
            with open(local, "rb") as f:
                self.assertEqual(f.read(), b"old")
            self.assertEqual(c.execute("true").exit_code, 0)
        self.assertEqual(d.stop(), 0)


class LyingRelayd:
    """A loopback relayd that lists "body" and answers every get with a
    raw body of ``body`` followed by a sent line whose sha256 is not the
    bytes': what a relayd, or a path between, that changed either looks
    like. Any number of connections, one thread each."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.wrong = hashlib.sha256(b"not " + body).hexdigest()
        self._srv = socket.create_server(("127.0.0.1", 0))
        self._srv.settimeout(0.2)
        self.addr = "127.0.0.1:%d" % self._srv.getsockname()[1]
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        t = threading.Thread(target=self._accept)
        t.start()
        self._threads.append(t)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._srv.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,))
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as r:
            conn.settimeout(10)
            for line in r:
                m = json.loads(line)
                i = m.get("id")
                if m.get("kind") == "ready":
                    out = {"kind": "ready", "id": i, "protocol": 1, "cwd": "/", "scope": "process-group", "extensions": ["body"]}
                    conn.sendall(json.dumps(out).encode() + b"\n")
                elif m.get("kind") == "get":
                    n = len(self.body)
                    conn.sendall(json.dumps({"kind": "content", "id": i, "bytes": n, "body": n}).encode() + b"\n" + self.body +
                                 json.dumps({"kind": "sent", "id": i, "sha256": self.wrong}).encode() + b"\n")
                else:
                    err = {"kind": "error", "id": i, "error": {"category": "unknown-kind", "message": "fake"}}
                    conn.sendall(json.dumps(err).encode() + b"\n")

    def __enter__(self) -> "LyingRelayd":
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._srv.close()
        for t in self._threads:
            t.join(15)


class SentMismatchTest(unittest.TestCase):
    """A sent line whose sha256 is not that of the bytes received fails the
    get with UnexpectedReplyError naming sha256, sync and async, whatever
    the get's destination, and download_file_as leaves the local file as
    it was."""

    def test_sent_mismatch(self) -> None:
        body = data_of(BUF + 1)
        d = tempfile.TemporaryDirectory(prefix="relayd-sent-")
        self.addCleanup(d.cleanup)
        tmp = d.name
        local = os.path.join(tmp, "f")
        with open(local, "wb") as f:
            f.write(b"old")
        with LyingRelayd(body) as fake:
            with Client(fake.addr, "t") as c:
                with self.assertRaisesRegex(UnexpectedReplyError, "sha256"):
                    c.download_file("x")
                with self.assertRaisesRegex(UnexpectedReplyError, "sha256"):
                    c.download_file_to("x", io.BytesIO())
                with self.assertRaisesRegex(UnexpectedReplyError, "sha256"):
                    c.download_file_as("x", local)

            async def run() -> None:
                async with AsyncClient(fake.addr, "t") as a:
                    with self.assertRaisesRegex(UnexpectedReplyError, "sha256"):
                        await a.download_file("x")
                    with self.assertRaisesRegex(UnexpectedReplyError, "sha256"):
                        await a.download_file_as("x", local)

            asyncio.run(run())
        self.assertEqual(sorted(os.listdir(tmp)), ["f"])
        with open(local, "rb") as f:
            self.assertEqual(f.read(), b"old")


if __name__ == "__main__":
    unittest.main()
