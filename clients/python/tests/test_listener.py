"""Dial-out relayds (relayd --connect) accepted by serve() and
AsyncListener, each handed to the trial whose token it carries."""

from __future__ import annotations

import asyncio
import json
import os
import select
import shutil
import socket
import tempfile
import threading
import time
import unittest
from typing import List

from relayd_client import AsyncListener, ConnectionLostError, Listener, ReplyTimeoutError, serve
from relayd_fixture import NoLeaks, Relayd, RelaydTest, new_token, wait_for

# A first line past the 64 KiB a peer may send freely: it needs a long-hello slot.
LONG = b"a" * (64 * 1024 + 1000)


def instruction_file(test: unittest.TestCase, size: int) -> "tuple[str, str]":
    """A text file of about size bytes for --instruction-file, removed when
    the test ends, and its text."""
    d = tempfile.mkdtemp(prefix="relayd-pytest-")
    test.addCleanup(shutil.rmtree, d, True)
    text = "".join(f"line {i}: the trial's instruction, long enough to pass 1 MiB\n" for i in range(size // 56))
    path = os.path.join(d, "instruction")
    with open(path, "w") as f:
        f.write(text)
    return path, text


def long_ready(token: str) -> "tuple[bytes, str]":
    """A ready longer than 64 KiB, as a relayd with a long --instruction-file sends it."""
    instruction = "i" * (70 * 1024)
    return json.dumps({"token": token, "kind": "ready", "protocol": 1, "instruction": instruction}).encode() + b"\n", instruction


def closed_by_listener_any(socks: List[socket.socket], wait: float) -> List[socket.socket]:
    """Those of socks the listener has closed, waiting up to wait seconds
    for the first; the rest are looked at once it is seen."""
    deadline = time.monotonic() + wait
    while True:
        readable, _, _ = select.select(socks, [], [], max(0.0, deadline - time.monotonic()))
        closed = [s for s in readable if closed_by_listener(s, 0.1)]
        if closed or time.monotonic() >= deadline:
            return closed


def closed_by_listener(sock: socket.socket, wait: float) -> bool:
    """Whether the listener closed sock within wait seconds (EOF, or a reset
    since it closed with our bytes unread)."""
    sock.settimeout(wait)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


class Driver:
    """Runs a sync Listener's work (its accept) in a thread while the test
    plays peers: accept for a token nobody has, again and again, until stop."""

    def __init__(self, lst: Listener) -> None:
        self.lst = lst
        self.done = threading.Event()
        self.errors: List[BaseException] = []
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        token = new_token()
        while not self.done.is_set():
            try:
                self.lst.accept(token, timeout=0.2)
            except ReplyTimeoutError:
                continue
            except ConnectionLostError:
                return  # the listener was closed
            except BaseException as e:
                self.errors.append(e)
                return

    def stop(self) -> None:
        self.done.set()
        self.thread.join(30)


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

    def test_relayd_past_max_pending_waits_for_room(self) -> None:
        # Every pending slot is held by a peer that sends nothing: the relayd
        # that comes next is not refused; it waits in the backlog until
        # silent ones, crowded, give their slots up after 1 s. Those silent
        # for 1 s when the listener looks are closed, one at least: how many
        # depends on how far apart the listener took the four (a loaded
        # machine spreads them), and once the relayd is in, none is crowded.
        with serve(max_pending=4, handshake_timeout=60) as lst:
            silent = [socket.create_connection(lst.address, timeout=5) for _ in range(4)]
            for p in silent:
                self.addCleanup(p.close)
            d = self.relayd(connect="%s:%d" % lst.address)
            with lst.accept(d.token, timeout=20) as c:
                self.assertTrue(c.verify().quiescent)
            self.assertEqual(d.wait(15), 0)
            self.assertTrue(closed_by_listener_any(silent, 5), "silent peers kept their slots while a relayd waited")

    def test_silent_peer_dropped_and_accept_times_out(self) -> None:
        with serve(handshake_timeout=0.3) as lst:
            with socket.create_connection(lst.address, timeout=5) as silent:
                with self.assertRaises(ReplyTimeoutError):
                    lst.accept(new_token(), timeout=1)
                self.assertEqual(silent.recv(1), b"", "the listener kept a peer that sent no ready")

    def test_long_instruction(self) -> None:
        # A ready carrying a 2 MiB --instruction-file: past the 64 KiB read
        # freely, within a long-hello slot.
        with serve() as lst:
            host, port = lst.address
            path, text = instruction_file(self, 2 << 20)
            d = self.relayd("--instruction-file", path, connect=f"{host}:{port}")
            with lst.accept(d.token, timeout=20) as c:
                assert c.first_ready is not None
                self.assertEqual(c.first_ready.instruction, text)
                self.assertTrue(c.verify().quiescent)
            self.assertEqual(d.wait(15), 0)

    def test_long_hellos_limited(self) -> None:
        with serve(handshake_timeout=60) as lst:
            driver = Driver(lst)
            self.addCleanup(driver.stop)
            peers = [socket.create_connection(lst.address, timeout=5) for _ in range(5)]
            for p in peers:
                self.addCleanup(p.close)
                p.sendall(LONG)
            # Four take the slots; the fifth (whichever the listener read
            # last) is closed at once, not at its handshake timeout.
            closed: List[socket.socket] = []

            def one_closed() -> bool:
                closed.extend(p for p in peers if closed_by_listener(p, 0.05))
                return bool(closed)

            wait_for("a peer past 64 KiB to be closed", one_closed, 10)
            self.assertEqual(len(closed), 1, "got %d peers closed; want 1 (4 long-hello slots)" % len(closed))
            held = [p for p in peers if p not in closed]

            # A relayd with a short ready needs no slot.
            d = self.relayd(connect="%s:%d" % lst.address)
            with lst.accept(d.token, timeout=20) as c:
                self.assertTrue(c.verify().quiescent)
            self.assertEqual(d.wait(15), 0)

            for p in held:
                p.close()
            wait_for("the four slots to be given back", lambda: lst._long_hellos == 0, 10)
            token = new_token()
            line, instruction = long_ready(token)
            with socket.create_connection(lst.address, timeout=5) as p:
                p.sendall(line)
                with lst.accept(token, timeout=20) as c:
                    assert c.first_ready is not None
                    self.assertEqual(c.first_ready.instruction, instruction)
            driver.stop()
            self.assertEqual(driver.errors, [])

    def test_held_relayd_closed_after_hold_timeout(self) -> None:
        with serve(hold_timeout=0.4) as lst:
            got: List[BaseException] = []

            def other_trial() -> None:
                try:
                    lst.accept(new_token(), timeout=30)
                except BaseException as e:
                    got.append(e)

            t = threading.Thread(target=other_trial)
            t.start()
            with socket.create_connection(lst.address, timeout=5) as late:
                late.sendall(b'{"token":"tok-late","kind":"ready","protocol":1}\n')
                # Nobody else arrives: the accept waiting for another token
                # is what closes it.
                self.assertTrue(closed_by_listener(late, 10), "the listener held a relayd past hold_timeout")
            with self.assertRaises(ReplyTimeoutError):
                lst.accept("tok-late", timeout=0.5)
            lst.close()
            t.join(30)
            self.assertEqual([type(e) for e in got], [ConnectionLostError])

    def test_close_closes_handshakes(self) -> None:
        lst = serve(handshake_timeout=60)
        with socket.create_connection(lst.address, timeout=5) as p:
            p.sendall(b'{"token":')

            def taken() -> bool:
                try:
                    lst.accept(new_token(), timeout=0.1)
                except ReplyTimeoutError:
                    pass
                return len(lst._hello) == 1

            wait_for("the listener to take the peer", taken, 10)
            lst.close()
            self.assertTrue(closed_by_listener(p, 10), "close left a peer in its handshake open")


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


    async def test_relayd_past_max_pending_waits_for_room(self) -> None:
        async with AsyncListener(max_pending=4, handshake_timeout=60) as lst:
            # As in ListenerTest: one silent peer at least gives its slot up.
            silent = [socket.create_connection(lst.address, timeout=5) for _ in range(4)]
            for p in silent:
                self.addCleanup(p.close)
            for _ in range(500):  # the four take the slots first (within 10 s)
                if len(lst._reading) == 4:
                    break
                await asyncio.sleep(0.02)
            self.assertEqual(len(lst._reading), 4, "the listener took the four silent peers")
            d = Relayd(connect="%s:%d" % lst.address)
            self.addCleanup(d.close)
            async with await lst.accept(d.token, timeout=20) as c:
                self.assertTrue((await c.verify()).quiescent)
            self.assertEqual(d.wait(15), 0)
            # In a thread: the listener's closes run on this loop.
            closed = await asyncio.to_thread(closed_by_listener_any, silent, 5)
            self.assertTrue(closed, "silent peers kept their slots while a relayd waited")

    async def test_long_instruction(self) -> None:
        path, text = instruction_file(self, 2 << 20)
        async with AsyncListener() as lst:
            d = Relayd("--instruction-file", path, connect="%s:%d" % lst.address)
            self.addCleanup(d.close)
            async with await lst.accept(d.token, timeout=20) as c:
                assert c.first_ready is not None
                self.assertEqual(c.first_ready.instruction, text)
                self.assertTrue((await c.verify()).quiescent)
            self.assertEqual(d.wait(15), 0)

    async def test_long_hellos_limited(self) -> None:
        async with AsyncListener(handshake_timeout=60) as lst:
            peers = [await asyncio.open_connection(*lst.address) for _ in range(5)]
            for _, w in peers:
                self.addAsyncCleanup(close_writer, w)
                w.write(LONG)
                await w.drain()
            # Four take the slots; the fifth (whichever the listener read
            # last) is closed at once, not at its handshake timeout.
            reads = {asyncio.ensure_future(eof(r)): w for r, w in peers}
            done, pending = await asyncio.wait(reads, timeout=10, return_when=asyncio.FIRST_COMPLETED)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            self.assertEqual(len(done), 1, "got %d peers closed; want 1 (4 long-hello slots)" % len(done))
            self.assertTrue(all(t.result() for t in done))

            # A relayd with a short ready needs no slot.
            d = Relayd(connect="%s:%d" % lst.address)
            self.addCleanup(d.close)
            async with await lst.accept(d.token, timeout=20) as c:
                self.assertTrue((await c.verify()).quiescent)
            self.assertEqual(d.wait(15), 0)

            for t in pending:
                await close_writer(reads[t])
            for _ in range(1000):
                if lst._long_hellos == 0:
                    break
                await asyncio.sleep(0.01)
            self.assertEqual(lst._long_hellos, 0, "the four slots were not given back")
            token = new_token()
            line, instruction = long_ready(token)
            _, w = await asyncio.open_connection(*lst.address)
            self.addAsyncCleanup(close_writer, w)
            w.write(line)
            async with await lst.accept(token, timeout=20) as c:
                assert c.first_ready is not None
                self.assertEqual(c.first_ready.instruction, instruction)

    async def test_held_relayd_closed_after_hold_timeout(self) -> None:
        async with AsyncListener(hold_timeout=0.4) as lst:
            r, w = await asyncio.open_connection(*lst.address)
            self.addAsyncCleanup(close_writer, w)
            w.write(b'{"token":"tok-late","kind":"ready","protocol":1}\n')
            # Nobody else arrives and nobody calls accept.
            try:
                closed = await asyncio.wait_for(eof(r), 10)
            except asyncio.TimeoutError:
                closed = False
            self.assertTrue(closed, "the listener held a relayd past hold_timeout")
            with self.assertRaises(ReplyTimeoutError):
                await lst.accept("tok-late", timeout=0.5)

    async def test_close_closes_handshakes(self) -> None:
        lst = await AsyncListener(handshake_timeout=60).start()
        r, w = await asyncio.open_connection(*lst.address)
        self.addAsyncCleanup(close_writer, w)
        w.write(b'{"token":')
        for _ in range(1000):
            if lst._handshakes:
                break
            await asyncio.sleep(0.01)
        await asyncio.wait_for(lst.close(), 10)
        try:
            closed = await asyncio.wait_for(eof(r), 10)
        except asyncio.TimeoutError:
            closed = False
        self.assertTrue(closed, "close left a peer in its handshake open")


async def eof(r: asyncio.StreamReader) -> bool:
    """Waits until the listener closes the connection (EOF, or a reset)."""
    try:
        return await r.read(1) == b""
    except ConnectionResetError:
        return True


async def close_writer(w: asyncio.StreamWriter) -> None:
    w.close()
    try:
        await w.wait_closed()
    except OSError:
        pass
