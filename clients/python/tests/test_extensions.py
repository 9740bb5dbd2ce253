"""Protocol 4.5 against the real relayd: captureStderr, stream (order and
dropped), onExit, detach and attach (for both clients: CLIENTS), not-found."""

from __future__ import annotations

import os
import threading
import time
import unittest
from typing import Any, Callable, List, Tuple

from relayd_client import Client, Executed, NotFoundError, Output
from relayd_fixture import CLIENTS, RelaydTest, alive, read_pid, wait_for


class Gone(Exception):
    """Raised by a callback to drop a connection, as a controller that dies would."""


def attach_retrying(c: Any, name: str, **kw: object) -> Executed:
    """attach, retried while relayd has not yet seen the old connection's loss."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return c.attach(name, **kw)  # type: ignore[arg-type]
        except NotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class ExtensionsTest(RelaydTest):
    def test_capture_stderr(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            x = c.execute("sh", ["-c", "echo out; echo err >&2; exit 3"], capture_stderr=True)
            self.assertEqual((x.exit_code, x.stdout, x.stderr, x.stderr_truncated), (3, "out\n", "err\n", False))
            x = c.execute("sh", ["-c", "echo err >&2"])
            self.assertIsNone(x.stderr)

    def test_output_limits(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            script = ["-c", "printf 0123456789; printf ERR-56789 >&2"]
            x = c.execute("sh", script, capture_stderr=True, max_output_bytes=4, output_keep="tail")
            self.assertEqual((x.stdout, x.stdout_truncated, x.stderr, x.stderr_truncated), ("6789", True, "6789", True))
            x = c.execute("sh", script, capture_stderr=True, max_output_bytes=4)
            self.assertEqual((x.stdout, x.stderr), ("0123", "ERR-"))

    def test_stream_order(self) -> None:
        d = self.relayd()
        events: List[Tuple[str, str]] = []
        with Client(d.addr, d.token) as c:
            x = c.execute("sh", ["-c", "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three"],
                          stream=True, capture_stderr=True,
                          on_started=lambda name: events.append(("started", name)),
                          on_output=lambda o: events.append((o.stream, o.data)))
        self.assertEqual(events[0], ("started", x.execution))
        self.assertEqual([s for s, _ in events[1:]], ["stdout", "stderr", "stdout"])
        self.assertEqual("".join(data for s, data in events if s == "stdout"), x.stdout)
        self.assertEqual((x.stdout, x.stderr), ("one\nthree\n", "two\n"))

    def test_stream_dropped(self) -> None:
        # A callback that holds the reader while the subject writes more than
        # the socket buffers and relayd's 256 KiB: relayd drops, and counts.
        d = self.relayd()
        n = 32 << 20
        done = os.path.join(d.dir, "done")
        chunks: List[Output] = []

        def on_output(o: Output) -> None:
            if not chunks:
                wait_for("the subject to finish writing", lambda: os.path.exists(done), 20)
            chunks.append(o)

        with Client(d.addr, d.token) as c:
            x = c.execute("sh", ["-c", f"yes abcdefg | head -c {n}; touch {done}"], capture_stdout=False,
                          stream=True, on_output=on_output)
        self.assertEqual(x.exit_code, 0)
        out = [o for o in chunks if o.stream == "stdout"]
        delivered = sum(len(o.data) for o in out)
        dropped = sum(o.dropped for o in out)
        self.assertGreater(dropped, 0)
        self.assertEqual(delivered + dropped, n)

    def test_on_exit(self) -> None:
        d = self.relayd()
        for on_exit, status, settled in (("settle", 0, True), ("settle-on-failure", 3, True),
                                         ("settle-on-failure", 0, False), ("leave", 0, False)):
            with self.subTest(on_exit=on_exit, status=status):
                pidfile = os.path.join(d.dir, f"{on_exit}-{status}.pid")
                with Client(d.addr, d.token) as c:
                    x = c.execute("sh", ["-c", f"sleep 30 >/dev/null 2>&1 & echo $! > {pidfile}; exit {status}"],
                                  on_exit=on_exit)
                pid = read_pid(pidfile)
                self.assertEqual((x.termination, x.exit_code), ("exited", status))
                if settled:
                    self.assertEqual((x.settlement, len(x.survivors), alive(pid)), ("settled", 0, False))
                else:
                    self.assertEqual((x.settlement, [s.pid for s in x.survivors], alive(pid)), ("none", [pid], True))

    def test_detach_and_attach(self) -> None:
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                self.detach_and_attach(name, connect)

    def detach_and_attach(self, client: str, connect: Callable[..., Any]) -> None:
        d = self.relayd()
        gate = os.path.join(d.dir, "gate")
        names: List[str] = []

        def gone(name: str) -> None:
            names.append(name)
            raise Gone()

        with connect(d) as c:
            with self.assertRaises(Gone):
                c.execute("sh", ["-c", f"echo before; while [ ! -e {gate} ]; do sleep 0.05; done; echo after; exit 5"],
                          stream=True, detach_ms=20000, on_started=gone)
            if client == "Client":
                self.assertTrue(c.closed)
        # Open the gate a moment after the attach is sent: the output after it is streamed.
        opener = threading.Timer(0.5, lambda: open(gate, "w").close())
        self.addCleanup(opener.cancel)
        streamed: List[Output] = []
        with connect(d) as c2:
            opener.start()
            x = attach_retrying(c2, names[0], on_output=streamed.append)
            self.assertEqual((x.execution, x.termination, x.exit_code, x.stdout), (names[0], "exited", 5, "before\nafter\n"))
            self.assertTrue("".join(o.data for o in streamed if o.stream == "stdout").endswith("after\n"))
            with self.assertRaises(NotFoundError):
                c2.attach(names[0])  # taken once

    def test_attach_after_the_end(self) -> None:
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                d = self.relayd()
                names: List[str] = []

                def gone(name: str) -> None:
                    names.append(name)
                    raise Gone()

                with connect(d) as c:
                    with self.assertRaises(Gone):
                        c.execute("sh", ["-c", "sleep 0.3; echo finished"], detach_ms=20000, on_started=gone)
                time.sleep(0.6)  # it ends while nobody is attached
                with connect(d) as c2:
                    x = attach_retrying(c2, names[0])
                    self.assertEqual((x.termination, x.stdout), ("exited", "finished\n"))
                    with self.assertRaises(NotFoundError):
                        c2.attach("x-999")
                self.assertEqual(d.stop(), 0)

    def test_not_found(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            with self.assertRaises(NotFoundError) as cm:
                c.attach("x-999")
            self.assertEqual(cm.exception.category, "not-found")
            self.assertTrue(cm.exception.message)
            self.assertEqual(c.execute("echo", ["ok"]).stdout, "ok\n")  # the connection goes on


if __name__ == "__main__":
    unittest.main()
