"""Protocol 4.6 against the real relayd: input (text and bytes) and user."""

from __future__ import annotations

import hashlib
import io
import os
import unittest

from relayd_client import AsyncClient, BadRequestError, Client
from relayd_fixture import CLIENTS, RelaydTest


class StdinUserTest(RelaydTest):
    def test_input(self) -> None:
        data = bytes(range(256)) * 64
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                d = self.relayd()
                with connect(d) as c:
                    self.assertEqual(c.execute("cat", input="text\n").stdout, "text\n")
                    x = c.execute("sha256sum", input=data)
                    self.assertEqual(x.stdout, hashlib.sha256(data).hexdigest() + "  -\n")
                    self.assertEqual(c.execute("cat", input=b"\xff\x00bytes").stdout, "\ufffd\x00bytes")
                    self.assertEqual(c.execute("readlink", ["/proc/self/fd/0"]).stdout, "/dev/null\n")

    @unittest.skipUnless(os.geteuid() == 0, "switching users needs relayd to run as root")
    def test_user(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            x = c.execute("sh", ["-c", "echo $(id -u) $HOME"], user="nobody", cwd="/")
            self.assertEqual(x.stdout, "65534 /nonexistent\n")
            with self.assertRaises(BadRequestError):
                c.execute("true", user="no-such-user-relayd")


class StreamedStdinTest(RelaydTest):
    """stdin= streams a source as stdin messages (protocol 4.6)."""

    def test_large_input_intact(self) -> None:
        d = self.relayd()
        chunk = hashlib.sha256(b"seed").digest() * 4096  # 128 KiB, not a multiple of the client's chunk
        n = 512  # 64 MiB
        want = hashlib.sha256(chunk * n).hexdigest()
        with Client(d.addr, d.token) as c:
            x = c.execute("sha256sum", stdin=(chunk for _ in range(n)), timeout=120)
            self.assertEqual(x.stdout, want + "  -\n")
            # A file object, after input, and the connection serves on.
            x = c.execute("cat", input="first:", stdin=io.BytesIO(b"\x00then\xff"))
            self.assertEqual(x.stdout, "first:\x00then\ufffd")
            self.assertEqual(c.execute("cat", stdin=io.BytesIO(b"")).stdout, "")
            self.assertEqual(c.ready().extensions.count("stdin"), 1)

    def test_subject_that_never_reads(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            x = c.execute("sleep", ["2"], stdin=io.BytesIO(b"z" * (8 << 20)), timeout_ms=1000, timeout=30)
            self.assertEqual((x.termination, x.exit_code), ("framework_timeout", 124))
            self.assertEqual(c.execute("echo", ["after"]).stdout, "after\n")

    def test_subject_that_reads_part(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            x = c.execute("head", ["-c", "10"], stdin=io.BytesIO(b"0123456789" * (1 << 20)), timeout=60)
            self.assertEqual((x.termination, x.exit_code, x.stdout), ("exited", 0, "0123456789"))
            self.assertEqual(c.execute("echo", ["after"]).stdout, "after\n")

    def test_source_errors(self) -> None:
        d = self.relayd()

        def failing():  # type: ignore[no-untyped-def]
            yield b"some"
            raise ValueError("source broke")

        with Client(d.addr, d.token) as c:
            with self.assertRaises(TypeError):
                c.execute("cat", stdin=b"bytes go as input=")  # type: ignore[arg-type]
            self.assertFalse(c.closed)
            with self.assertRaisesRegex(ValueError, "source broke"):
                c.execute("cat", stdin=failing(), timeout=30)
            self.assertTrue(c.closed)  # relayd settles the execution


class AsyncStdinTest(RelaydTest):
    def test_stdin_async(self) -> None:
        import asyncio

        d = self.relayd()
        chunk = hashlib.sha256(b"seed").digest() * 4096  # 128 KiB
        n = 256  # 32 MiB

        async def source():  # type: ignore[no-untyped-def]
            for _ in range(n):
                yield chunk

        async def go() -> None:
            async with AsyncClient(d.addr, d.token) as c:
                x = await c.execute("sha256sum", stdin=source(), timeout=120)
                self.assertEqual(x.stdout, hashlib.sha256(chunk * n).hexdigest() + "  -\n")
                # A file object (read in a thread), after input.
                x = await c.execute("cat", input="first:", stdin=io.BytesIO(b"\x00then"))
                self.assertEqual(x.stdout, "first:\x00then")
                # A subject that never reads ends at its deadline; one that reads part, normally.
                x = await c.execute("sleep", ["2"], stdin=io.BytesIO(b"z" * (8 << 20)), timeout_ms=1000, timeout=30)
                self.assertEqual((x.termination, x.exit_code), ("framework_timeout", 124))
                x = await c.execute("head", ["-c", "10"], stdin=[b"0123456789" * (1 << 20)], timeout=60)
                self.assertEqual((x.termination, x.stdout), ("exited", "0123456789"))
                self.assertEqual((await c.execute("echo", ["after"])).stdout, "after\n")

        asyncio.run(go())


if __name__ == "__main__":
    unittest.main()
