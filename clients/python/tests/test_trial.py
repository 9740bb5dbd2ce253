"""Protocol 4.6, the trial boundary: verify(all=True) ends what runs on
other connections, lists what every execution left, and with
survivors="settle" settles it except keep; Client and AsyncClient."""

from __future__ import annotations

import os
import tempfile
import unittest

from relayd_client import AsyncClient, Client
from relayd_fixture import NoLeaks, Relayd, RelaydTest, alive, read_pid, wait_for

LEAVE = "sh -c 'echo $$ > {0}.kept; exec sleep 300' >/dev/null 2>&1 & sh -c 'echo $$ > {0}.other; exec sleep 300' >/dev/null 2>&1 &"


class TrialTest(RelaydTest):
    def test_boundary_settles_all_but_keep(self) -> None:
        d = self.relayd()
        base = os.path.join(tempfile.mkdtemp(), "p")
        with Client(d.addr, d.token) as c:
            self.assertIn("trial", c.ready().extensions)
            x = c.execute("sh", ["-c", LEAVE.format(base)])
        kept, other = read_pid(base + ".kept"), read_pid(base + ".other")
        with Client(d.addr, d.token) as c:
            with self.assertRaises(ValueError):
                c.verify(keep=[kept])
            v = c.verify(all=True)
            self.assertEqual((v.boundary, v.settled), (1, None))
            self.assertEqual({s.pid: s.execution for s in v.survivors}, {kept: x.execution, other: x.execution})
            v = c.verify(all=True, survivors="settle", keep=[kept])
            self.assertEqual((v.boundary, v.quiescent, v.settled), (2, True, (other,)))
            self.assertFalse(alive(other))
            self.assertTrue(alive(kept))
            v = c.verify(all=True, survivors="settle")
            self.assertEqual(v.settled, (kept,))
        self.assertEqual(d.stop(), 0)


class AsyncTrialTest(NoLeaks, unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self._leak_setup()
        self.addCleanup(self._leak_check)
        self.d = Relayd()
        self.addCleanup(self.d.close)

    async def test_boundary(self) -> None:
        base = os.path.join(tempfile.mkdtemp(), "p")
        async with AsyncClient(self.d.addr, self.d.token) as c:
            await c.execute("sh", ["-c", LEAVE.format(base)])
        kept, other = read_pid(base + ".kept"), read_pid(base + ".other")
        async with AsyncClient(self.d.addr, self.d.token) as c:
            v = await c.verify(all=True, survivors="settle", keep=[kept])
            self.assertEqual((v.boundary, v.quiescent, v.settled), (1, True, (other,)))
            wait_for("the settled process's end", lambda: not alive(other))
            self.assertTrue(alive(kept))
            v = await c.verify(all=True, survivors="settle")
            self.assertEqual(v.settled, (kept,))
        self.assertEqual(self.d.stop(), 0)
