"""Protocol 4.7, shell sessions, against the real relayd: state kept from
one command to the next, the command's own status, a deadline, another
connection, close (Client and AsyncClient, from one table: CLIENTS)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import unittest
from typing import List

from relayd_client import AsyncClient, BusyError, Client, NotFoundError, Output
from relayd_fixture import CLIENTS, RelaydTest, alive, read_pid


class SessionTest(RelaydTest):
    def test_session(self) -> None:
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                d = self.relayd("--max-sessions", "1")
                with connect(d) as c:
                    self.assertIn("session", c.ready().extensions)
                    with c.session(cwd=d.dir) as sh:
                        self.assertTrue(sh.name.startswith("s-"), sh)
                        r = sh.run("mkdir -p repo && cd repo && export X=1 && f() { echo \"f $X\"; }")
                        self.assertEqual((r.exit_code, r.cwd, r.session), (0, os.path.join(d.dir, "repo"), sh.name), r)
                        self.assertEqual(sh.cwd, os.path.join(d.dir, "repo"))
                        r = sh.run("f; echo err >&2; cat; (exit 4)", input="in\n")
                        self.assertEqual((r.exit_code, r.stdout, r.stderr), (4, "f 1\nin\n", "err\n"), r)
                        self.assertEqual(sh.run("echo 'unterminated").exit_code, 2)
                        sh.run("sleep 1000 & echo $! > ../bg.pid")
                        r = sh.run("sleep 1000", timeout_ms=300)
                        self.assertTrue(r.timed_out, r)
                        self.assertEqual((r.exit_code, r.settlement), (124, "settled"), r)
                        bg = read_pid(os.path.join(d.dir, "bg.pid"))
                        self.assertTrue(alive(bg), "an earlier command's background job outlives a later one's deadline")
                        with self.assertRaises(BusyError):
                            c.session()
                        with connect(d) as other:
                            self.assertEqual(other.attach_session(sh.name).run("pwd").stdout, os.path.join(d.dir, "repo") + "\n")
                        r = sh.run("exit 3")
                        self.assertEqual((r.exit_code, r.session_ended), (3, True), r)
                    with self.assertRaises(NotFoundError):
                        sh.run("true")
                    with c.session(environment={"GREETING": "hi"}) as sh:
                        sh.run("cd /tmp; g() { echo \"$GREETING $1\"; }")
                        r = sh.run("g there; pwd")
                        self.assertEqual((r.exit_code, r.stdout), (0, "hi there\n/tmp\n"), r)
                        r = sh.run("sleep 100", timeout_ms=200)
                        self.assertEqual((r.termination, r.exit_code), ("framework_timeout", 124), r)
                        self.assertEqual(sh.run("echo ok").stdout, "ok\n")
                        closed = sh.close()
                        self.assertEqual((closed["kind"], closed["settlement"]), ("closed", "settled"), closed)

    def test_no_reply_holds_the_token(self) -> None:
        # relayd's replies carry the token (protocol 3); what the client hands
        # back must not, so that printing a reply never prints the secret:
        # close()'s and read()'s dicts, and every dataclass's raw.
        d = self.relayd()

        def clean(what: str, reply: object) -> None:
            for shown in (repr(reply), str(reply), repr(getattr(reply, "raw", None))):
                self.assertNotIn(d.token, shown, f"{what} holds the token")

        with Client(d.addr, d.token) as c:
            clean("ready", c.ready())
            clean("execute", c.execute("true"))
            sh = c.session(pty=(24, 80))
            clean("session read", sh.read(0, wait_ms=200))
            clean("session run", sh.run("true"))
            clean("status", c.status())
            clean("session close", sh.close())
            clean("boundary", c.boundary())
            clean("verify", c.verify())

        async def aio() -> None:
            async with AsyncClient(d.addr, d.token) as a:
                clean("async ready", await a.ready())
                sh = await a.session()
                clean("async run", await sh.run("true"))
                clean("async close", await sh.close())
        asyncio.run(aio())

    def test_pty_session(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c, c.session(pty=(24, 80)) as sh:
            seen, at = "", 0

            def until(want: str) -> None:
                nonlocal seen, at
                for _ in range(50):
                    if want in seen:
                        return
                    t = sh.read(at, wait_ms=500)
                    seen += t["data"]
                    at = t["next"]
                self.fail(f"the terminal did not show {want!r}: {seen!r}")

            sh.write("python3 -q\r")
            until(">>> ")
            sh.write("print(6 * 7)\r")
            until("42")
            sh.write("exit()\r")
            until("bash-")
            sh.resize(30, 90)
            r = sh.run("stty size")
            self.assertEqual(r.exit_code, 0, r)
            self.assertIn("30 90", r.stdout)

    def test_session_stream_stdin(self) -> None:
        """A session's command streams its output (every chunk before the
        reply) and reads stdin, bytes of every value and NULs included."""
        data = bytes(i * 7 % 256 for i in range(1 << 20)) + b"\0\0end"
        want = hashlib.sha256(data).hexdigest() + "  -\n"
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                d = self.relayd()
                with connect(d) as c, c.session(shell="sh") as sh:
                    chunks: List[Output] = []
                    names: List[str] = []
                    r = sh.run("sha256sum; echo e >&2", stream=True, stdin=io.BytesIO(data),
                               on_output=chunks.append, on_started=names.append)
                    self.assertEqual((r.exit_code, r.stdout, r.stderr, names), (0, want, "e\n", [r.execution]), r)
                    self.assertEqual("".join(o.data for o in chunks if o.stream == "stdout"), want)
                    r = sh.run("cat", input=b"a\0b")
                    self.assertEqual(r.stdout, "a\0b", r)
                    chunks.clear()
                    r = sh.run("cat; echo .", stream=True, stdin=[b"one ", b"two"], on_output=chunks.append)
                    self.assertEqual((r.exit_code, r.stdout), (0, "one two.\n"), r)
                    self.assertEqual("".join(o.data for o in chunks), "one two.\n")


if __name__ == "__main__":
    unittest.main()
