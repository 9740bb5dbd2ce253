"""Protocol 4.6, "Unknown fields are named": a reply that names fields
relayd ignored makes the client warn (IgnoredFieldsWarning, pointing at the
caller's line), in Client and AsyncClient, and keeps the names."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import unittest
import warnings
from typing import Any, Dict

from relayd_client import AsyncClient, BadRequestError, Client, IgnoredFieldsWarning
from relayd_fixture import NoLeaks, Relayd, RelaydTest


class IgnoredTest(RelaydTest):
    def test_warns_once_per_reply_at_the_callers_line(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            self.assertIn("ignored", c.ready().extensions)
            with self.assertWarns(IgnoredFieldsWarning) as cm:
                r = c.request({"kind": "execute", "command": "true", "timeout_ms": 500})
            self.assertEqual((r["kind"], r["exitCode"], r["ignored"]), ("executed", 0, ["timeout_ms"]))
            self.assertIn("'timeout_ms'", str(cm.warning))
            self.assertEqual(cm.filename, __file__)
            with self.assertWarns(IgnoredFieldsWarning) as cm:
                with self.assertRaises(BadRequestError) as err:
                    c.request({"kind": "execute", "comand": "true"})
            self.assertEqual(err.exception.ignored, ("comand",))
            self.assertEqual(cm.filename, __file__)
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                x = c.execute("true")
                v = c.verify()
            self.assertEqual((seen, x.ignored, v.ignored), ([], (), ()))
            with self.assertWarns(IgnoredFieldsWarning) as cm:
                r = c.request({"kind": "verify", "every": True, "kept": [1]})
            self.assertEqual(r["ignored"], ["every", "kept"])
            self.assertEqual(cm.filename, __file__)


class PutIgnoring:
    """A loopback relayd stand-in for one connection: a ready without
    extensions, then a stored reply to the put that names a field it
    ignored (relayd would ignore one it did not know)."""

    def __init__(self) -> None:
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self._srv.getsockname()[1]
        self._thread = threading.Thread(target=self._serve)
        self._thread.start()

    def _serve(self) -> None:
        self._srv.settimeout(10)
        try:
            conn, _ = self._srv.accept()
        except OSError:
            return
        with conn, conn.makefile("rb") as lines:
            conn.settimeout(10)
            for line in lines:
                msg: Dict[str, Any] = json.loads(line)
                if msg["kind"] == "ready":
                    reply = {"kind": "ready", "id": msg["id"], "protocol": 1}
                elif msg["kind"] == "put" and not msg.get("more"):
                    reply = {"kind": "stored", "id": msg["id"], "path": "/w/f", "bytes": 1,
                             "sha256": hashlib.sha256(b"x").hexdigest(), "ignored": ["zz"]}
                else:
                    continue
                conn.sendall(json.dumps(reply).encode() + b"\n")

    def __enter__(self) -> "PutIgnoring":
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(15)
        self._srv.close()


class PutIgnoredTest(NoLeaks, unittest.TestCase):
    """A put's answer naming ignored fields warns at the caller's line
    too, though upload_file runs as a plan of the clients' core (_ops)."""

    def setUp(self) -> None:
        self._leak_setup()
        self.addCleanup(self._leak_check)

    def test_client(self) -> None:
        with PutIgnoring() as f, Client(f.addr, "t") as c:
            with self.assertWarns(IgnoredFieldsWarning) as cm:
                info = c.upload_file("f", b"x")
            self.assertEqual((info.bytes, cm.filename), (1, __file__))

    def test_async_client(self) -> None:
        import asyncio

        async def go() -> None:
            async with AsyncClient(f.addr, "t") as c:
                with self.assertWarns(IgnoredFieldsWarning) as cm:
                    info = await c.upload_file("f", b"x")
                self.assertEqual((info.bytes, cm.filename), (1, __file__))

        with PutIgnoring() as f:
            asyncio.run(go())


class AsyncIgnoredTest(NoLeaks, unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self._leak_setup()
        self.addCleanup(self._leak_check)
        self.d = Relayd()
        self.addCleanup(self.d.close)

    async def test_warns(self) -> None:
        async with AsyncClient(self.d.addr, self.d.token) as c:
            self.assertIn("ignored", (await c.ready()).extensions)
            with self.assertWarns(IgnoredFieldsWarning) as cm:
                r = await c.request({"kind": "execute", "command": "true", "timeout_ms": 500})
            self.assertEqual(r["ignored"], ["timeout_ms"])
            self.assertEqual(cm.filename, __file__)
            with self.assertWarns(IgnoredFieldsWarning):
                with self.assertRaises(BadRequestError) as err:
                    await c.request({"kind": "execute", "comand": "true"})
            self.assertEqual(err.exception.ignored, ("comand",))
            x = await c.execute("true")
            self.assertEqual(x.ignored, ())
        self.assertEqual(self.d.stop(), 0)


if __name__ == "__main__":
    unittest.main()
