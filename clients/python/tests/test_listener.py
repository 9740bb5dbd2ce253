"""Dial-out relayds (relayd --connect) accepted by serve() and
AsyncListener, each handed to the trial whose token it carries."""

from __future__ import annotations

import asyncio
import socket
import threading
import unittest

from relayd_client import AsyncListener, ReplyTimeoutError, serve
from relayd_fixture import NoLeaks, Relayd, RelaydTest, new_token


class ListenerTest(RelaydTest):
    def test_serve_matches_trials_by_token(self) -> None:
        with serve() as lst:
            host, port = lst.address
            a = self.relayd(connect=f"{host}:{port}")
            b = self.relayd(connect=f"{host}:{port}")
            # b's trial first, whichever relayd dialed first.
            for d in (b, a):
                with lst.accept(d.token, timeout=20) as c:
                    assert c.first_ready is not None
                    self.assertEqual(c.first_ready.cwd, d.workspace)
                    x = c.execute("sh", ["-c", "echo $PWD"])
                    self.assertEqual(x.stdout, d.workspace + "\n")
                    self.assertTrue(c.verify().quiescent)
                # Dial-out: the session ends after verify, status 0.
                self.assertEqual(d.wait(15), 0)

    def test_accept_from_several_threads(self) -> None:
        with serve() as lst:
            host, port = lst.address
            ds = [self.relayd(connect=f"{host}:{port}") for _ in range(3)]
            got: "dict[str, str]" = {}

            def trial(token: str) -> None:
                with lst.accept(token, timeout=20) as c:
                    got[token] = c.execute("echo", [token]).stdout.strip()
                    c.verify()

            threads = [threading.Thread(target=trial, args=(d.token,)) for d in ds]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            self.assertEqual(got, {d.token: d.token for d in ds})
            for d in ds:
                self.assertEqual(d.wait(15), 0)

    def test_silent_peer_dropped_and_accept_times_out(self) -> None:
        with serve(handshake_timeout=0.3) as lst:
            with socket.create_connection(lst.address, timeout=5) as silent:
                with self.assertRaises(ReplyTimeoutError):
                    lst.accept(new_token(), timeout=1)
                self.assertEqual(silent.recv(1), b"", "the listener kept a peer that sent no ready")


class AsyncListenerTest(NoLeaks, unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self._leak_setup()
        self.addCleanup(self._leak_check)

    async def test_accept_by_token(self) -> None:
        async with AsyncListener() as lst:
            host, port = lst.address
            ds = [Relayd(connect=f"{host}:{port}") for _ in range(2)]
            for d in ds:
                self.addCleanup(d.close)

            async def trial(d: Relayd) -> str:
                async with await lst.accept(d.token, timeout=20) as c:
                    assert c.first_ready is not None
                    x = await c.execute("echo", [c.first_ready.cwd])
                    self.assertTrue((await c.verify()).quiescent)
                    return x.stdout.strip()

            outs = await asyncio.gather(*(trial(d) for d in reversed(ds)))
            self.assertEqual(outs, [d.workspace for d in reversed(ds)])
            for d in ds:
                self.assertEqual(d.wait(15), 0)
            with self.assertRaises(ReplyTimeoutError):
                await lst.accept(new_token(), timeout=0.2)
