"""AsyncClient against the real relayd: verify ending a running execution,
busy on one connection, over a command. What both clients do alike
runs from one table (CLIENTS in relayd_fixture), in test_client and others."""

from __future__ import annotations

import asyncio
import os
import unittest

from relayd_client import AsyncClient, BusyError, ConnectionLostError
from relayd_fixture import NoLeaks, Relayd, alive, read_pid, relayd_binary


class AsyncClientTest(NoLeaks, unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self._leak_setup()
        self.addCleanup(self._leak_check)
        self.d = Relayd()
        self.addCleanup(self.d.close)

    async def wait_pid(self, path: str) -> int:
        for _ in range(1000):
            if os.path.exists(path) and os.path.getsize(path) > 0:
                return read_pid(path)
            await asyncio.sleep(0.01)
        raise AssertionError(f"{path} never written")

    async def test_verify_ends_a_running_execution(self) -> None:
        pidfile = os.path.join(self.d.dir, "agent.pid")
        async with AsyncClient(self.d.addr, self.d.token) as c:
            started: "list[str]" = []
            agent = asyncio.ensure_future(c.execute("sh", ["-c", f"echo $$ > {pidfile}; exec sleep 30"], on_started=started.append))
            pid = await self.wait_pid(pidfile)
            v = await c.verify()
            x = await agent
            self.assertEqual((x.termination, x.exit_code, x.settlement), ("framework_timeout", 124, "settled"))
            self.assertTrue(v.quiescent)
            self.assertFalse(alive(pid))

    async def test_busy_on_one_connection(self) -> None:
        pidfile = os.path.join(self.d.dir, "first.pid")
        async with AsyncClient(self.d.addr, self.d.token) as c:
            first = asyncio.ensure_future(c.execute("sh", ["-c", f"echo $$ > {pidfile}; exec sleep 30"], timeout_ms=5000))
            await self.wait_pid(pidfile)
            with self.assertRaises(BusyError) as cm:
                await c.execute("true")
            self.assertIn("still running on this connection", cm.exception.message)
            await c.verify()
            self.assertEqual((await first).termination, "framework_timeout")


class AsyncOverCommandTest(NoLeaks, unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self._leak_setup()
        self.addCleanup(self._leak_check)
        self.d = Relayd()
        self.addCleanup(self.d.close)

    async def test_over_command(self) -> None:
        # relayd bridge itself is the command, as docker exec -i C relayd bridge would run it.
        d = self.d
        pidfile = os.path.join(d.dir, "sleep.pid")
        c = await AsyncClient.over_command([relayd_binary(), "bridge", "--socket", d.socket], d.token)
        try:
            assert c.first_ready is not None
            self.assertIn("bridge", c.first_ready.extensions)
            x = await c.execute("sh", ["-c", "echo over a command; exit 6"])
            self.assertEqual((x.exit_code, x.stdout), (6, "over a command\n"))
            run = asyncio.ensure_future(c.execute("sh", ["-c", f"echo $$ > {pidfile}; exec sleep 30"], timeout=20))
            pid = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, read_pid, pidfile), 15)
        finally:
            await c.close()  # ends the command's stdin: relayd settles what runs
        with self.assertRaises(ConnectionLostError):
            await run
        for _ in range(1000):
            if not alive(pid):
                break
            await asyncio.sleep(0.01)
        self.assertFalse(alive(pid))
        with self.assertRaises(ConnectionLostError):
            await AsyncClient.over_command([relayd_binary(), "bridge", "--socket", os.path.join(d.dir, "none.sock")], d.token)
