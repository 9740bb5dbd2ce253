"""What an execution used, why it ended, and limits (protocol 4.8),
against the real relayd, for both clients (CLIENTS)."""

from __future__ import annotations

import os
import unittest

from relayd_client import BadRequestError, Client, Usage
from relayd_fixture import CLIENTS, RelaydTest, wait_for


class UsageTest(RelaydTest):
    def test_usage_limits_and_cause(self) -> None:
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                d = self.relayd()
                with connect(d) as c:
                    r = c.execute("sh", ["-c", "i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done; ulimit -n"],
                                  limits={"nofile": 64})
                    self.assertEqual((r.exit_code, r.stdout), (0, "64\n"))
                    assert r.usage is not None
                    self.assertIsInstance(r.usage, Usage)
                    self.assertEqual(r.usage.processes, 1)
                    self.assertGreater(r.usage.cpu_seconds, 0.01)
                    self.assertGreater(r.usage.max_rss_bytes, 0)
                    self.assertEqual(r.limits, {"nofile": 64})
                    self.assertIsNone(r.cause)

                    r = c.execute("sh", ["-c", "while :; do :; done"], limits={"cpuSeconds": 1}, timeout_ms=30000)
                    self.assertEqual((r.exit_code, r.cause, r.limit), (128 + 24, "limit", "cpuSeconds"))

                    with self.assertRaises(BadRequestError) as cm:
                        c.execute("true", limits={"bogus": 1})
                    self.assertIn("bogus", str(cm.exception))

    def test_survivors_usage(self) -> None:
        d = self.relayd()
        gate = os.path.join(d.dir, "gate")
        self.addCleanup(lambda: open(gate, "w").close())
        with Client(d.addr, d.token) as c:
            r = c.execute("sh", ["-c", f"(while [ ! -e '{gate}' ]; do sleep 0.02; done) >/dev/null 2>&1 &"])
            self.assertTrue(r.survivors)
            open(gate, "w").close()

            def complete() -> bool:
                return any(u.execution == r.execution and u.complete for u in c.status().survivors_usage)

            wait_for("the survivor's usage, complete", complete)
            v = c.boundary()
            done = [u for u in v.survivors_usage if u.execution == r.execution]
            self.assertEqual(len(done), 1)
            self.assertTrue(done[0].complete)
            self.assertGreaterEqual(done[0].usage.processes, 2)


if __name__ == "__main__":
    unittest.main()
