"""Client (blocking) against the real relayd: replies, a framework timeout,
survivors, client-side timeouts, and every error category of protocol 4.4.
Tests that loop over CLIENTS run for Client and AsyncClient alike."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time

import relayd_client
from relayd_client import (
    BadJSONError,
    BadRequestError,
    BusyError,
    Client,
    ConnectionLostError,
    LineTooLongError,
    NotFoundError,
    ProtocolError,
    RelaydError,
    ReplyTimeoutError,
    ShuttingDownError,
    UnauthenticatedError,
    UnknownKindError,
)
from relayd_client import _wire
from relayd_fixture import CLIENTS, RelaydTest, alive, read_pid, relayd_binary, wait_for


class ClientTest(RelaydTest):
    def test_ready_execute_verify(self) -> None:
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                d = self.relayd()
                with connect(d) as c:
                    r = c.ready()
                    self.assertEqual((r.protocol, r.cwd, r.instruction), (1, d.workspace, ""))
                    self.assertIn(r.scope, ("cgroup", "process-group"))
                    x = c.execute("sh", ["-c", "echo hello; exit 7"])
                    self.assertEqual((x.exit_code, x.termination, x.settlement, x.stdout), (7, "exited", "none", "hello\n"))
                    self.assertEqual(x.diagnostic.category, "none")
                    self.assertEqual(x.survivors, ())
                    self.assertTrue(x.execution.startswith("x-"))
                    self.assertEqual(x.mechanism, r.scope)
                    self.assertIsNotNone(x.duration)
                    self.assertFalse(x.timed_out)
                    self.assertTrue(x.environment_trusted)
                    # A list is command and args; environment and cwd reach the subject.
                    x = c.execute(["sh", "-c", 'echo "$GREETING" "$(pwd)"'], environment={"GREETING": "hi"}, cwd="/")
                    self.assertEqual(x.stdout, "hi /\n")
                    x = c.execute("no-such-program-here")
                    self.assertEqual((x.exit_code, x.termination), (127, "exited"))
                    x = c.execute("sleep", ["30"], timeout_ms=200)
                    self.assertEqual((x.exit_code, x.termination, x.settlement), (124, "framework_timeout", "settled"))
                    v = c.verify()
                    self.assertEqual((v.quiescent, v.survivors), (True, ()))
                    self.assertNotIn(d.token, repr(c))
                self.assertEqual(d.stop(), 0)

    def test_framework_timeout_settles(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            x = c.execute("sleep", ["30"], timeout_ms=300)
            self.assertEqual((x.termination, x.exit_code, x.settlement), ("framework_timeout", 124, "settled"))
            self.assertTrue(x.timed_out)
            self.assertGreaterEqual(x.duration_ms or 0, 300)
        self.assertEqual(d.stop(), 0)

    def test_execute_wait_allows_for_settlement(self) -> None:
        # A subject that ignores SIGTERM is settled only at the end of the
        # grace (1.5 s): the reply comes well after timeoutMs (200 ms), and
        # the client's default wait (timeoutMs + teardown budget + slack)
        # takes it.
        d = self.relayd("--term-grace", "1500ms", "--teardown-timeout", "4s")
        with Client(d.addr, d.token, teardown_budget=4) as c:
            began = time.monotonic()
            x = c.execute("sh", ["-c", "trap '' TERM; while :; do sleep 0.1; done"], timeout_ms=200)
            self.assertGreaterEqual(time.monotonic() - began, 1.5)
            self.assertEqual((x.termination, x.settlement), ("framework_timeout", "settled"))
        self.assertEqual(_wire.execute_wait(200, 4, None), 0.2 + 4 + _wire.SETTLE_SLACK)
        self.assertIsNone(_wire.execute_wait(None, 4, None))
        self.assertEqual(_wire.execute_wait(200, 4, 1.5), 1.5)
        self.assertEqual(d.stop(), 0)

    def test_survivors(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            # The subject waits until its service has become sleep (exec), so that
            # survivors show sleep's argv, not the forked shell's.
            x = c.execute("sh", ["-c", 'sleep 60 </dev/null >/dev/null 2>&1 & p=$!; '
                                       'until [ "$(cat /proc/$p/comm)" = sleep ]; do :; done; echo $p'])
            svc = int(x.stdout)
            self.assertEqual((x.exit_code, x.termination, x.settlement), (0, "exited", "none"))
            self.assertIn(svc, [s.pid for s in x.survivors])
            self.assertTrue(alive(svc), "relayd stopped the service an exited subject left")
            v = c.verify()
            self.assertTrue(v.quiescent)
            self.assertEqual([(s.pid, s.argv) for s in v.survivors], [(svc, ("sleep", "60"))])
            self.assertTrue(alive(svc), "verify stopped a survivor")

    def test_client_timeout_closes_and_relayd_settles(self) -> None:
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                d = self.relayd()
                with connect(d) as c:
                    pidfile = os.path.join(d.dir, "sleep.pid")
                    with self.assertRaises(ReplyTimeoutError):
                        c.execute("sh", ["-c", f"echo $$ > {pidfile}; exec sleep 30"], timeout=1.0)
                    self.assertTrue(c.closed)
                    pid = read_pid(pidfile)
                    wait_for("relayd to settle the subject of the closed connection", lambda: not alive(pid))
                    with self.assertRaises(ConnectionLostError):
                        c.ready()
                self.assertIn("peer closed", d.logs())
                self.assertEqual(d.stop(), 0)

    def test_over_command(self) -> None:
        # relayd bridge itself is the command, as docker exec -i C relayd
        # bridge would run it in a container.
        d = self.relayd()
        pidfile = os.path.join(d.dir, "sleep.pid")
        with Client.over_command([relayd_binary(), "bridge", "--socket", d.socket], d.token) as c:
            assert c.first_ready is not None
            self.assertIn("bridge", c.first_ready.extensions)
            x = c.execute("sh", ["-c", "echo over a command; exit 6"])
            self.assertEqual((x.exit_code, x.stdout), (6, "over a command\n"))
            killer = threading.Thread(target=lambda: (read_pid(pidfile), c.close()))
            killer.start()
            try:
                with self.assertRaises(ConnectionLostError):
                    c.execute("sh", ["-c", f"echo $$ > {pidfile}; exec sleep 30"], timeout=20)
            finally:
                killer.join()
        pid = read_pid(pidfile)
        wait_for("relayd to settle the subject once the command's stdin ended", lambda: not alive(pid))
        with self.assertRaises(ConnectionLostError):
            Client.over_command([relayd_binary(), "bridge", "--socket", os.path.join(d.dir, "none.sock")], d.token)

    def test_relayd_killed_mid_execution(self) -> None:
        d = self.relayd()
        pidfile = os.path.join(d.dir, "sleep.pid")

        def kill_relayd() -> None:
            read_pid(pidfile)
            d.proc.send_signal(signal.SIGKILL)  # the relayd this test started

        killer = threading.Thread(target=kill_relayd)
        with Client(d.addr, d.token) as c:
            killer.start()
            try:
                with self.assertRaises(ConnectionLostError) as cm:
                    c.execute("sh", ["-c", f"echo $$ > {pidfile}; exec sleep 30"], timeout=20)
            finally:
                killer.join()
            self.assertEqual(cm.exception.partial, 0)
            self.assertTrue(c.closed)
        d.proc.wait(10)
        # The shim outlives relayd and settles the subject it left (rule 6.10);
        # it may already be gone, so killing it by pid here would race.
        pid = read_pid(pidfile)
        wait_for("the shim to settle the subject the killed relayd left", lambda: not alive(pid), 15.0)


class ErrorCategoryTest(RelaydTest):
    """One test per category of protocol 4.4, each raised by a real relayd
    (not-found too: test_not_found)."""

    def test_unauthenticated_closes(self) -> None:
        d = self.relayd()
        with Client(d.addr, "not-" + d.token) as c:
            with self.assertRaises(UnauthenticatedError) as cm:
                c.ready()
            self.assertEqual(cm.exception.category, "unauthenticated")
            self.assertNotIn(d.token, str(cm.exception))
            self.assertTrue(c.closed)

    def test_bad_request_keeps_the_connection(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            with self.assertRaises(BadRequestError) as cm:
                c.execute("true", environment={"K": "1"}, credentials={"K": "2"})
            self.assertIn("credentials", cm.exception.message)
            self.assertIsInstance(cm.exception.id, int)
            with self.assertRaises(BadRequestError):
                c.execute("true", result_token="not-hex")
            self.assertEqual(c.execute("true").exit_code, 0)

    def test_bad_json(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            with self.assertRaises(BadJSONError) as cm:
                c._exchange(b'{"kind":\n', _wire.Call(0, "ready"), 10)  # no client method sends broken JSON
            self.assertIsNone(cm.exception.id)
            self.assertEqual(c.ready().protocol, 1)

    def test_unknown_kind(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            with self.assertRaises(UnknownKindError):
                c.request({"kind": "launch"})
            self.assertEqual(c.ready().protocol, 1)

    def test_line_too_long_closes(self) -> None:
        d = self.relayd("--max-line-bytes", "1KiB")
        with Client(d.addr, d.token) as c:
            with self.assertRaises(LineTooLongError):
                c.execute("echo", ["x" * 4096])
            self.assertTrue(c.closed)

    def test_busy_over_max_connections(self) -> None:
        d = self.relayd("--max-connections", "1")
        with Client(d.addr, d.token) as first:
            first.ready()
            with Client(d.addr, d.token) as second:
                with self.assertRaises(BusyError) as cm:
                    second.ready()
                self.assertIn("--max-connections", cm.exception.message)
            self.assertEqual(first.execute("true").exit_code, 0)

    def test_shutting_down(self) -> None:
        d = self.relayd("--term-grace", "2s", "--teardown-timeout", "5s")
        pidfile = os.path.join(d.dir, "busy.pid")
        with Client(d.addr, d.token) as running, Client(d.addr, d.token) as other:
            other.ready()
            result = {}

            def run() -> None:
                result["x"] = running.execute("sh", ["-c", f"trap '' TERM; echo $$ > {pidfile}; while :; do sleep 0.1; done"])

            t = threading.Thread(target=run)
            t.start()
            try:
                read_pid(pidfile)
                d.proc.send_signal(signal.SIGTERM)  # shutdown settles the TERM-ignoring subject over 2 s
                deadline = time.monotonic() + 2
                err = None
                while err is None and time.monotonic() < deadline:
                    try:
                        other.execute("true")
                    except ShuttingDownError as e:
                        err = e
                self.assertIsNotNone(err, "relayd kept starting executions after SIGTERM")
            finally:
                t.join(15)
            self.assertEqual((result["x"].termination, result["x"].settlement), ("framework_timeout", "settled"))
        self.assertEqual(d.proc.wait(15), 0)

    def test_not_found(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            with self.assertRaises(NotFoundError) as cm:
                c.request({"kind": "attach", "execution": "x-999"})
            self.assertEqual((cm.exception.category, cm.exception.id), ("not-found", 1))
            self.assertTrue(c.ready())  # the connection goes on

    def test_unknown_category_and_hierarchy(self) -> None:
        e = relayd_client.errors.error_for("brand-new", "m", 3)
        self.assertIs(type(e), ProtocolError)
        self.assertEqual(e.category, "brand-new")
        for cat, cls in relayd_client.errors.CATEGORIES.items():
            self.assertTrue(issubclass(cls, ProtocolError) and issubclass(cls, RelaydError))
            self.assertEqual(cls.category, cat)
        self.assertEqual(len(relayd_client.errors.CATEGORIES), 9)  # 4.4 with "failed" (4.6, a body get)


class FakeRelayd:
    """A loopback server that reads one line and answers with the given
    bytes, then closes: for what the real relayd cannot be made to do."""

    def __init__(self, replies: "list[bytes]") -> None:
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self._srv.getsockname()[1]
        self.token = "t"  # what CLIENTS' connect(self) takes
        self._replies = replies
        self.received: "dict[str, object]" = {}
        self._thread = threading.Thread(target=self._serve)
        self._thread.start()

    def _serve(self) -> None:
        self._srv.settimeout(10)
        try:
            conn, _ = self._srv.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            buf = b""
            while b"\n" not in buf:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                buf += chunk
            self.received = json.loads(buf.split(b"\n")[0])
            for r in self._replies:
                conn.sendall(r)

    def __enter__(self) -> "FakeRelayd":
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(15)
        self._srv.close()


class ExtensionTest(RelaydTest):
    """Protocol 4.5 on the client's side, against a fake relayd: what is sent,
    and the callbacks, whatever a relayd does (test_extensions runs them
    against the real one)."""

    def test_stream_and_stderr(self) -> None:
        replies = [
            b'{"token":"t","kind":"started","id":1,"execution":"x-1"}\n',
            b'{"token":"t","kind":"output","id":1,"execution":"x-1","stream":"stdout","data":"step 1\\n"}\n',
            b'{"token":"t","kind":"output","id":1,"execution":"x-1","stream":"stderr","data":"warn\\n","dropped":5}\n',
            b'{"token":"t","kind":"executed","id":1,"termination":"exited","exitCode":0,"stdout":"step 1\\n",'
            b'"stderr":"warn\\n","stderrTruncated":false,"diagnostic":{"category":"none"},"execution":"x-1",'
            b'"settlement":"settled","survivors":[],"scope":{"mechanism":"cgroup"},"durationMs":5}\n',
        ]
        with FakeRelayd(replies) as f:
            with Client(f.addr, "t") as c:
                started: "list[str]" = []
                chunks: "list[relayd_client.Output]" = []
                x = c.execute("agent", capture_stderr=True, stream=True, on_exit="settle", detach_ms=5000,
                              on_started=started.append, on_output=chunks.append, timeout=10)
        self.assertEqual({k: f.received.get(k) for k in ("captureStderr", "stream", "onExit", "detachMs")},
                         {"captureStderr": True, "stream": True, "onExit": "settle", "detachMs": 5000})
        self.assertEqual(started, ["x-1"])
        self.assertEqual([(o.stream, o.data, o.dropped) for o in chunks], [("stdout", "step 1\n", 0), ("stderr", "warn\n", 5)])
        self.assertEqual((x.stderr, x.stderr_truncated, x.settlement, x.duration), ("warn\n", False, "settled", 0.005))

    def test_a_raising_callback_closes(self) -> None:
        replies = [b'{"token":"t","kind":"output","id":1,"execution":"x-1","stream":"stdout","data":"x"}\n']

        def boom(o: relayd_client.Output) -> None:
            raise RuntimeError("callback failed")

        with FakeRelayd(replies) as f:
            with Client(f.addr, "t") as c:
                with self.assertRaisesRegex(RuntimeError, "callback failed"):
                    c.execute("agent", stream=True, on_output=boom, timeout=10)
                self.assertTrue(c.closed)

    def test_extensions_not_sent_unless_asked(self) -> None:
        reply = (b'{"kind":"executed","id":1,"termination":"exited","exitCode":0,"stdout":"",'
                 b'"diagnostic":{"category":"none"},"execution":"x-1","settlement":"none","survivors":[]}\n')
        with FakeRelayd([reply]) as f:
            with Client(f.addr, "t") as c:
                x = c.execute("true", timeout=10)
        self.assertEqual(sorted(f.received), ["args", "command", "id", "kind", "token"])
        self.assertIsNone(x.stderr)


class VanishTest(RelaydTest):
    def test_closed_mid_reply(self) -> None:
        half = b'{"token":"t","kind":"executed","id":1,"termination":"exi'
        for name, connect in CLIENTS:
            with self.subTest(client=name), FakeRelayd([half]) as f:
                with connect(f) as c:
                    with self.assertRaises(ConnectionLostError) as cm:
                        c.execute("true", timeout=10)
                    self.assertEqual(cm.exception.partial, len(half))
                    self.assertIn("middle of a reply", str(cm.exception))
                    if name == "Client":
                        self.assertTrue(c.closed)  # AsyncClient.closed says whether close() was called

    def test_reply_with_another_token(self) -> None:
        with FakeRelayd([b'{"token":"other","kind":"ready","id":1}\n']) as f:
            with Client(f.addr, "t") as c:
                with self.assertRaises(relayd_client.UnexpectedReplyError):
                    c.ready()
                self.assertTrue(c.closed)
