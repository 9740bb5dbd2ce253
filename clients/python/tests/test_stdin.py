"""Protocol 4.6 against the real relayd: input (text and bytes) and user."""

from __future__ import annotations

import hashlib
import os
import unittest

from relayd_client import AsyncClient, BadRequestError, Client
from relayd_fixture import RelaydTest


class StdinUserTest(RelaydTest):
    def test_input(self) -> None:
        d = self.relayd()
        data = bytes(range(256)) * 64
        with Client(d.addr, d.token) as c:
            self.assertEqual(c.execute("cat", input="text\n").stdout, "text\n")
            x = c.execute("sha256sum", input=data)
            self.assertEqual(x.stdout, hashlib.sha256(data).hexdigest() + "  -\n")
            self.assertEqual(c.execute("readlink", ["/proc/self/fd/0"]).stdout, "/dev/null\n")

    @unittest.skipUnless(os.geteuid() == 0, "switching users needs relayd to run as root")
    def test_user(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            x = c.execute("sh", ["-c", "echo $(id -u) $HOME"], user="nobody", cwd="/")
            self.assertEqual(x.stdout, "65534 /nonexistent\n")
            with self.assertRaises(BadRequestError):
                c.execute("true", user="no-such-user-relayd")


class AsyncStdinTest(RelaydTest):
    def test_input_async(self) -> None:
        import asyncio

        d = self.relayd()

        async def go() -> str:
            async with AsyncClient(d.addr, d.token) as c:
                return (await c.execute("cat", input=b"\xff\x00bytes")).stdout

        self.assertEqual(asyncio.run(go()), "\ufffd\x00bytes")


if __name__ == "__main__":
    unittest.main()
