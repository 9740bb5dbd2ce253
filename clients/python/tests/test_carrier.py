"""The result carrier: write_result in a subject run by the real relayd
(carrier mode), discard mode, and the frame's own checks."""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import sys
import unittest
from unittest import mock

from relayd_client import Client, ResultCarrierError, result_frame, write_result
from relayd_fixture import RelaydTest, subject_pythonpath

AGENT = "from relayd_client import write_result; {before}write_result({payload!r})"


class CarrierTest(RelaydTest):
    def run_agent(self, c: Client, payload: object, before: str = "", **kw: object):
        rt = secrets.token_hex(16)
        return c.execute(sys.executable, ["-c", AGENT.format(before=before, payload=payload)],
                         environment={"PYTHONPATH": subject_pythonpath()}, result_token=rt, **kw)

    def test_write_result_in_a_subject(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            x = self.run_agent(c, {"kind": "settled", "status": "completed"})
            self.assertEqual((x.exit_code, x.diagnostic.category), (0, "none"))
            self.assertEqual(x.stdout, '{"kind":"settled","status":"completed"}')
            # Other output beside the frame: the payload still comes back.
            x = self.run_agent(c, "résumé ✓", before="print('thinking...', flush=True); ")
            self.assertEqual((x.stdout, x.diagnostic.category), ("résumé ✓", "unstructured-output"))
            self.assertEqual(x.diagnostic.bytes, len(b"thinking...\n"))
            self.assertEqual(x.diagnostic.sha256, hashlib.sha256(b"thinking...\n").hexdigest())
            # No frame at all.
            x = c.execute("echo", ["no result"], result_token=secrets.token_hex(16))
            self.assertEqual((x.stdout, x.diagnostic.category, x.diagnostic.bytes), ("", "result-frame-missing", 10))
            # Discard mode.
            x = self.run_agent(c, "ignored", capture_stdout=False)
            self.assertEqual((x.stdout, x.diagnostic.category), ("", "none"))

    def test_no_token_in_the_subject(self) -> None:
        d = self.relayd()
        with Client(d.addr, d.token) as c:
            x = c.execute(sys.executable, ["-c", "from relayd_client import write_result; write_result('x')"],
                          environment={"PYTHONPATH": subject_pythonpath()})
            self.assertEqual(x.exit_code, 1)
            self.assertEqual(x.stdout, "")


class FrameTest(unittest.TestCase):
    TOKEN = "0123456789abcdef0123456789abcdef"

    def test_frame(self) -> None:
        line = result_frame(b"ok", self.TOKEN)
        self.assertEqual(line, f"MAKA-EVAL-RESULT-V1 {self.TOKEN} 2 {hashlib.sha256(b'ok').hexdigest()} b2s\n")
        out = io.StringIO()
        with mock.patch.dict(os.environ, {"MAKA_EVAL_RESULT_TOKEN": self.TOKEN}):
            write_result({"a": 1}, out=out)
        self.assertEqual(out.getvalue().split(" ")[2], str(len(b'{"a":1}')))

    def test_refusals(self) -> None:
        with self.assertRaisesRegex(ResultCarrierError, "32 lower-case hex"):
            result_frame("x", self.TOKEN.upper())
        with self.assertRaisesRegex(ResultCarrierError, "at most 2048"):
            result_frame("x" * 2049, self.TOKEN)
        result_frame("x" * 2048, self.TOKEN)
        with self.assertRaisesRegex(ResultCarrierError, "not UTF-8"):
            result_frame(b"\xff", self.TOKEN)
        out = io.StringIO()
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaisesRegex(ResultCarrierError, "MAKA_EVAL_RESULT_TOKEN is not set"):
                write_result("x", out=out)
        self.assertEqual(out.getvalue(), "")
