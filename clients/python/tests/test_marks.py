"""The filesystem half of the boundary (protocol 4.9) through the client,
sync and async, against a real relayd: mark, changes with the right
``what``, restore of all and of one path, ``files`` at the trial boundary
(``tampered``, restored), recycle; and the Harbor adapter protecting the
verifier's directories (temporary directories standing in for /tests and
/logs/verifier, driven through the stand-in Harbor as in test_harbor.py).

The trees are the test's own temporary directories, changed by subjects
relayd runs (the agent), or by the test itself where only the kernel's
view matters (a modification time set back)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Any, Dict
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))

import relayd_client.harbor as rh  # noqa: E402
from relayd_client import (Changes, Client, FileEntry, Marked, NotFoundError, ProtocolError,  # noqa: E402
                           Recycled, Restored)
from relayd_fixture import CLIENTS, NoLeaks, Relayd, RelaydTest, alive, read_pid, relayd_binary  # noqa: E402


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def hex_of(digest: str) -> str:
    """The hex of an entry's sha256, with or without an algorithm prefix."""
    return digest.split(":")[-1]


def make_tree(root: str) -> None:
    os.makedirs(os.path.join(root, "sub"))
    for rel, data in (("a.txt", b"alpha\n"), ("b.txt", b"beta\n"), ("sub/c.txt", b"gamma\n"), ("same.txt", b"same\n")):
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
    os.chmod(os.path.join(root, "sub/c.txt"), 0o644)
    os.symlink("a.txt", os.path.join(root, "link"))


def by_path(entries: Any) -> Dict[str, FileEntry]:
    return {e.path: e for e in entries}


class TreeTest(RelaydTest):
    def setUp(self) -> None:
        super().setUp()
        self.d = self.relayd()
        self.tree = tempfile.mkdtemp(prefix="relayd-marks-")
        self.addCleanup(shutil.rmtree, self.tree, True)
        make_tree(self.tree)

    def p(self, rel: str) -> str:
        return os.path.join(self.tree, rel)

    def agent(self, c: Client, script: str) -> None:
        r = c.execute("sh", ["-c", script], cwd=self.tree, capture_stderr=True)
        self.assertEqual(r.exit_code, 0, r.stderr)


class MarksTest(TreeTest):
    def test_changes_list_each_kind_with_what(self) -> None:
        with Client(self.d.addr, self.d.token) as c:
            self.assertIn("marks", c.ready().extensions)
            m = c.mark("start", [self.tree], keep=[self.tree])
            self.assertIsInstance(m, Marked)
            self.assertEqual(m.mark, "start")
            self.assertEqual(m.entries, 7)  # the root, sub, four files, the link
            self.assertEqual(m.bytes, len(b"alpha\nbeta\ngamma\nsame\n"))
            self.assertGreater(m.kept_bytes, 0)
            self.assertEqual(c.changes("start").added, ())

            self.agent(c, "printf ALPHA > a.txt; rm b.txt; chmod 600 sub/c.txt; echo new > new.txt; "
                          "ln -sfn sub/c.txt link; printf 'same\\n' > same.txt")
            ch = c.changes("start")
            self.assertIsInstance(ch, Changes)
            self.assertEqual(ch.mark, "start")
            self.assertEqual([e.path for e in ch.added], [self.p("new.txt")])
            self.assertEqual([e.path for e in ch.deleted], [self.p("b.txt")])
            mod = by_path(ch.modified)
            self.assertEqual(sorted(mod), sorted([self.p("a.txt"), self.p("sub/c.txt"), self.p("link")]),
                             "a file rewritten with the same bytes is not a change; a directory is not modified "
                             "by what is added to it")
            a = mod[self.p("a.txt")]
            self.assertEqual((a.type, a.what, a.size), ("file", ("content",), 5))
            self.assertEqual(hex_of(a.sha256 or ""), sha(b"ALPHA"))
            assert a.was is not None
            self.assertEqual((a.was.path, a.was.size, hex_of(a.was.sha256 or "")), (a.path, 6, sha(b"alpha\n")))
            cc = mod[self.p("sub/c.txt")]
            self.assertEqual((cc.what, cc.mode), (("mode",), 0o600))
            assert cc.was is not None
            self.assertEqual(cc.was.mode, 0o644)
            link = mod[self.p("link")]
            self.assertEqual((link.type, link.what, link.target), ("symlink", ("target",), "sub/c.txt"))
            assert link.was is not None
            self.assertEqual(link.was.target, "a.txt")
            new = ch.added[0]
            self.assertEqual((new.type, new.size, new.uid, new.gid, hex_of(new.sha256 or "")),
                             ("file", 4, os.getuid(), os.getgid(), sha(b"new\n")))
            self.assertEqual(ch.deleted[0].was, None)
            self.assertEqual(hex_of(ch.deleted[0].sha256 or ""), sha(b"beta\n"))
            self.assertEqual(ch.omitted, 0)
            self.assertGreaterEqual(ch.entries, 6)
            self.assertEqual(len(ch), 5)

            # Narrowed to one subtree.
            self.assertEqual([e.path for e in c.changes("start", [self.p("sub")]).modified], [self.p("sub/c.txt")])

    def test_mtime_set_back_is_still_caught(self) -> None:
        with Client(self.d.addr, self.d.token) as c:
            c.mark("m", [self.tree])
            st = os.stat(self.p("a.txt"))
            with open(self.p("a.txt"), "r+b") as f:
                f.write(b"ALPHA\n")  # the same size
            os.utime(self.p("a.txt"), ns=(st.st_atime_ns, st.st_mtime_ns))
            self.assertEqual(os.stat(self.p("a.txt")).st_mtime_ns, st.st_mtime_ns)
            ch = c.changes("m")
            self.assertEqual([(e.path, e.what) for e in ch.modified], [(self.p("a.txt"), ("content",))])

    def test_restore_one_path_then_all(self) -> None:
        with Client(self.d.addr, self.d.token) as c:
            c.mark("m", [self.tree], keep=[self.tree])
            self.agent(c, "echo changed > a.txt; echo changed > sub/c.txt; rm b.txt; mkdir planted; "
                          "echo x > planted/conftest.py; rm link; mkdir link")
            r = c.restore("m", [self.p("a.txt")])
            self.assertIsInstance(r, Restored)
            self.assertEqual((r.mark, r.written, r.not_restored, r.complete), ("m", 1, (), True))
            self.assertEqual(Path(self.p("a.txt")).read_bytes(), b"alpha\n")
            self.assertEqual(Path(self.p("sub/c.txt")).read_bytes(), b"changed\n", "restore of one path touched another")
            ch = c.changes("m")
            self.assertNotIn(self.p("a.txt"), by_path(ch.modified))
            self.assertIn(self.p("sub/c.txt"), by_path(ch.modified))

            r = c.restore("m")
            self.assertGreaterEqual(r.removed, 2)  # planted/conftest.py, planted (and the directory at link)
            self.assertGreaterEqual(r.written, 2)  # sub/c.txt, b.txt (and link)
            self.assertTrue(r.complete)
            for rel, data in (("a.txt", b"alpha\n"), ("b.txt", b"beta\n"), ("sub/c.txt", b"gamma\n")):
                self.assertEqual(Path(self.p(rel)).read_bytes(), data, rel)
            self.assertFalse(os.path.exists(self.p("planted")))
            self.assertEqual(os.readlink(self.p("link")), "a.txt")
            self.assertFalse(c.changes("m"), "changes right after a restore")

            # A path outside the mark's keep is refused, naming it.
            with self.assertRaises(ProtocolError) as cm:
                c.restore("m", ["/etc"])
            self.assertIn("/etc", str(cm.exception))

    def test_names_that_are_not_utf8(self) -> None:
        with Client(self.d.addr, self.d.token) as c:
            c.mark("m", [self.tree])
            name = os.path.join(os.fsencode(self.tree), b"caf\xe9\nnewline")
            with open(name, "wb") as f:
                f.write(b"x")
            (e,) = c.changes("m").added
            self.assertEqual(e.path_bytes, name)
            self.assertEqual(os.fsencode(e.path), name)  # a str path as os.listdir gives one
            self.assertEqual(os.stat(e.path).st_size, 1)

    def test_unmark(self) -> None:
        with Client(self.d.addr, self.d.token) as c:
            c.mark("m", [self.tree])
            with self.assertRaises(ProtocolError):
                c.mark("m", [self.tree])  # it exists
            c.unmark("m")
            with self.assertRaises(NotFoundError):
                c.changes("m")
            c.mark("m", [self.tree])  # the name is free again

    def test_marks_outlive_the_connection(self) -> None:
        with Client(self.d.addr, self.d.token) as c:
            c.mark("m", [self.tree])
        os.remove(self.p("a.txt"))
        with Client(self.d.addr, self.d.token) as c:
            self.assertEqual([e.path for e in c.changes("m").deleted], [self.p("a.txt")])

    def test_files_at_the_boundary_tampered_and_restored(self) -> None:
        tests, logs = self.p("tests"), self.p("logs")
        os.mkdir(tests)
        os.mkdir(logs)
        Path(tests, "test.sh").write_text("exit 1\n")
        with Client(self.d.addr, self.d.token) as c:
            c.mark("m", [self.tree], keep=[tests, logs])
            # The agent plants a conftest.py, edits the tests, writes the reward, and does its work.
            self.agent(c, "echo 'def pytest_runtest_call(): pass' > tests/conftest.py; echo 'exit 0' > tests/test.sh; "
                          "echo 1.0 > logs/reward.txt; echo work > a.txt")
            v = c.boundary(survivors="settle", files={"mark": "m", "protect": [tests, logs], "restore": True})
            self.assertTrue(v.quiescent)
            got = {(e.change, e.path) for e in v.tampered}
            self.assertEqual(got, {("added", os.path.join(tests, "conftest.py")), ("modified", os.path.join(tests, "test.sh")),
                                   ("added", os.path.join(logs, "reward.txt"))},
                             "tampered lists what changed under protect, not elsewhere")
            assert v.files is not None
            self.assertEqual((v.files.mark, v.files.omitted, v.files.error), ("m", 0, None))
            assert v.files.restored is not None
            self.assertTrue(v.files.restored.complete)
            self.assertEqual(sorted(os.listdir(tests)), ["test.sh"])
            self.assertEqual(Path(tests, "test.sh").read_text(), "exit 1\n")
            self.assertEqual(os.listdir(logs), [])
            self.assertEqual(Path(self.p("a.txt")).read_text(), "work\n", "the agent's work is not the verifier's")
            self.assertEqual([e.path for e in c.changes("m").modified], [self.p("a.txt")])

            # Without restore: listed, left as it is.
            Path(logs, "reward.txt").write_text("1.0\n")
            v = c.verify(all=True, files={"mark": "m", "protect": [logs], "restore": False})
            self.assertEqual([(e.change, e.path) for e in v.tampered], [("added", os.path.join(logs, "reward.txt"))])
            assert v.files is not None
            self.assertIsNone(v.files.restored)
            self.assertTrue(os.path.exists(os.path.join(logs, "reward.txt")))

            with self.assertRaises(ValueError):
                c.verify(files={"mark": "m", "protect": [logs], "restore": True})  # files is the trial boundary's

    def test_recycle(self) -> None:
        pid_file = self.p("left.pid")
        with Client(self.d.addr, self.d.token) as c:
            c.mark("m", [self.tree], keep=[self.tree], exclude=[pid_file])
            self.agent(c, f"sleep 300 >/dev/null 2>&1 & echo $! > {pid_file}; echo agent > a.txt; echo x > added.txt")
            left = read_pid(pid_file)
            r = c.recycle("m")
            self.assertIsInstance(r, Recycled)
            self.assertTrue(r.boundary.quiescent)
            self.assertIn(left, r.boundary.settled or ())
            self.assertGreaterEqual(r.restored.removed, 1)
            self.assertGreaterEqual(r.restored.written, 1)
            self.assertTrue(r.pristine)
            self.assertFalse(alive(left))
            self.assertEqual(Path(self.p("a.txt")).read_bytes(), b"alpha\n")
            self.assertFalse(os.path.exists(self.p("added.txt")))
            self.assertFalse(c.changes("m"))


class BothClientsMarksTest(RelaydTest):
    def test_mark_changes_restore_boundary_recycle(self) -> None:
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                d = self.relayd()
                tree = tempfile.mkdtemp(prefix="relayd-marks-")
                self.addCleanup(shutil.rmtree, tree, True)
                make_tree(tree)
                self.one_client(connect(d), tree)
                self.assertEqual(d.stop(), 0)

    def one_client(self, client: Any, tree: str) -> None:
        def p(rel: str) -> str:
            return os.path.join(tree, rel)

        tests = p("tests")
        os.mkdir(tests)
        Path(tests, "test.sh").write_text("exit 1\n")
        pid_file = p("left.pid")
        with client as c:
            m = c.mark("a", [tree], keep=[tree], exclude=[pid_file])
            self.assertEqual((m.mark, m.entries), ("a", 9))
            r = c.execute("sh", ["-c", f"echo X > a.txt; rm b.txt; echo n > n.txt; echo 0 > tests/test.sh; "
                                       f"sleep 300 >/dev/null 2>&1 & echo $! > {pid_file}"], cwd=tree)
            self.assertEqual(r.exit_code, 0)
            left = read_pid(pid_file)
            ch = c.changes("a")
            self.assertEqual(([e.path for e in ch.added], [e.path for e in ch.deleted]),
                             ([p("n.txt")], [p("b.txt")]))
            self.assertEqual({e.path: e.what for e in ch.modified},
                             {p("a.txt"): ("content",), p("tests/test.sh"): ("content",)})
            self.assertEqual(c.changes("a", [tests]).modified[0].path, p("tests/test.sh"))

            v = c.boundary(files={"mark": "a", "protect": [tests], "restore": True})
            self.assertEqual([(e.change, e.path) for e in v.tampered], [("modified", p("tests/test.sh"))])
            self.assertTrue(alive(left), "a boundary without settle leaves survivors")
            self.assertEqual(Path(tests, "test.sh").read_text(), "exit 1\n")

            rs = c.restore("a", [p("a.txt")])
            self.assertEqual(rs.written, 1)
            self.assertEqual(Path(p("a.txt")).read_text(), "alpha\n")

            rc = c.recycle("a")
            self.assertIsInstance(rc, Recycled)
            self.assertIn(left, rc.boundary.settled or ())
            self.assertTrue(rc.pristine)
            self.assertFalse(alive(left))
            self.assertFalse(c.changes("a"))
            self.assertEqual(Path(p("b.txt")).read_text(), "beta\n")
            c.unmark("a")
            with self.assertRaises(ProtocolError):
                c.restore("a")


# --- the Harbor adapter (the stand-in Harbor of tests/stand_ins, as test_harbor.py drives it)

class HarborMarksTest(NoLeaks, unittest.TestCase):
    """The adapter marks the task's directories once the environment has
    started and, at the boundary before the tests, lists what the agent
    changed in the verifier's directories and puts them back."""

    def setUp(self) -> None:
        self._leak_setup()
        self.addCleanup(self._leak_check)
        self.d = Relayd()
        self.addCleanup(self.d.close)
        self.local = tempfile.mkdtemp(prefix="relayd-harbor-marks-local-")
        self.addCleanup(shutil.rmtree, self.local, True)
        self.remote = tempfile.mkdtemp(prefix="relayd-harbor-marks-")
        self.addCleanup(shutil.rmtree, self.remote, True)
        self.tests_dir, self.verifier_dir, self.app = (os.path.join(self.remote, d) for d in ("tests", "verifier", "app"))
        for d in (self.verifier_dir, self.app):
            os.mkdir(d)
        Path(self.app, "main.py").write_text("print('todo')\n")

    def env(self, **kwargs: Any) -> Any:
        from harbor.environments.factory import EnvironmentFactory
        from harbor.models.task.config import EnvironmentConfig

        kwargs.setdefault("task_env_config", EnvironmentConfig(workdir=self.app))
        return EnvironmentFactory.create_environment_from_import_path(
            "relayd_client.harbor:RelaydDockerEnvironment", environment_dir=Path(self.local), environment_name="task",
            session_id="task__1", trial_paths=None, logger=None,
            relayd_bridge=[relayd_binary(), "bridge", "--socket", self.d.socket], relayd_token=self.d.token,
            relayd_protect=f"{self.tests_dir},{self.verifier_dir}", **kwargs)

    def test_verifier_dirs_protected_before_the_tests(self) -> None:
        from harbor.verifier.verifier import Verifier

        shared = Path(self.local, "tests")
        shared.mkdir()
        (shared / "test.sh").write_text(f"#!/bin/sh\ntest -e {self.verifier_dir}/reward.txt && echo planted; "
                                        f"ls {self.tests_dir}; exit 0\n")

        async def go() -> None:
            e = self.env()
            await e.start(force_build=False)
            try:
                # The agent: its work, a reward written ahead, a conftest.py planted where the tests go.
                r = await e.exec(f"echo done > main.py; echo 1.0 > {self.verifier_dir}/reward.txt; "
                                 f"mkdir -p {self.tests_dir} && echo 'x' > {self.tests_dir}/conftest.py")
                self.assertEqual(r.return_code, 0, r.stdout)
                ch = await e.relayd_changes()
                self.assertIn(os.path.join(self.app, "main.py"), [x.path for x in ch.modified])
                with mock.patch.object(rh, "TESTS_DIR", self.tests_dir):
                    out = await Verifier(e, [shared], tests_dir=self.tests_dir, verifier_dir=self.verifier_dir).verify()
                self.assertEqual(out.return_code, 0)
                seen = Path(self.verifier_dir, "test-stdout.txt").read_text()
                self.assertEqual(seen, "test.sh\n", "the verifier ran on the agent's files")
                self.assertEqual({(t.change, t.path) for t in e.relayd_tampered},
                                 {("added", os.path.join(self.verifier_dir, "reward.txt")),
                                  ("added", self.tests_dir), ("added", os.path.join(self.tests_dir, "conftest.py"))})
                self.assertEqual(e.relayd_last_boundary.tampered, e.relayd_tampered)
                self.assertEqual(Path(self.app, "main.py").read_text(), "done\n", "the agent's work stays")
            finally:
                await e.stop(delete=True)
            with Client(self.d.addr, self.d.token) as c:  # stop freed the mark
                with self.assertRaises(ProtocolError):
                    c.changes(e._relayd_mark)
        asyncio.run(go())

    def test_protected_without_a_boundary(self) -> None:
        """With no boundary before the tests (relayd_boundary_before_tests
        false, or one drawn by end_agent_phase already), the verifier's
        directories are still put back before its tests, and once only."""
        async def go() -> None:
            for kwargs in ({"relayd_boundary_before_tests": "false"}, {}):
                e = self.env(**kwargs)
                await e.start(force_build=False)
                try:
                    await e.exec(f"echo 1.0 > {self.verifier_dir}/reward.txt")
                    if not kwargs:
                        await e.end_agent_phase()
                    with mock.patch.object(rh, "TESTS_DIR", self.tests_dir):
                        await e.upload_dir(self.local, self.tests_dir)
                        self.assertEqual([(t.change, t.path) for t in e.relayd_tampered],
                                         [("added", os.path.join(self.verifier_dir, "reward.txt"))], kwargs)
                        self.assertEqual(os.listdir(self.verifier_dir), [])
                        Path(self.verifier_dir, "mine").write_text("")  # the verifier's own, between two uploads
                        await e.upload_dir(self.local, self.tests_dir)  # a second test directory: nothing due
                        self.assertEqual(os.listdir(self.verifier_dir), ["mine"])
                    os.remove(os.path.join(self.verifier_dir, "mine"))
                finally:
                    await e.stop(delete=True)
        asyncio.run(go())

    def test_nothing_tampered_nothing_listed(self) -> None:
        async def go() -> None:
            e = self.env()
            await e.start(force_build=False)
            try:
                await e.exec("echo done > main.py")
                with mock.patch.object(rh, "TESTS_DIR", self.tests_dir):
                    await e.upload_dir(self.local, self.tests_dir)
                self.assertEqual(e.relayd_tampered, ())
                self.assertTrue(os.path.isdir(self.tests_dir))
            finally:
                await e.stop(delete=True)
        asyncio.run(go())


# --- the inspect adapter (the stand-in inspect_ai of tests/stand_ins, as test_inspect.py drives it)

class InspectMarksTest(NoLeaks, unittest.IsolatedAsyncioTestCase):
    """A scorer asks the sandbox which files the agent changed."""

    def setUp(self) -> None:
        self._leak_setup()
        self.addCleanup(self._leak_check)
        self.d = Relayd()
        self.addCleanup(self.d.close)
        self.tree = tempfile.mkdtemp(prefix="relayd-inspect-marks-")
        self.addCleanup(shutil.rmtree, self.tree, True)
        make_tree(self.tree)

    async def test_scorer_asks_for_changes(self) -> None:
        import inspect_ai.util as iu

        from relayd_client import inspect_sandbox as ri

        config = {"command": [relayd_binary(), "bridge", "--socket", self.d.socket], "token": self.d.token,
                  "cwd": self.tree}
        envs = await iu.REGISTRY["relayd"].sample_init("t", dict(config, mark=[self.tree]), {})
        plain = await iu.REGISTRY["relayd"].sample_init("t", config, {})
        try:
            sandbox = envs["default"]
            r = await sandbox.exec(["sh", "-c", "echo solved > a.txt; rm b.txt; echo n > n.txt"])
            self.assertTrue(r.success, r.stderr)
            ch = await sandbox.changes()
            self.assertEqual(([e.path for e in ch.added], [e.path for e in ch.modified], [e.path for e in ch.deleted]),
                             ([os.path.join(self.tree, "n.txt")], [os.path.join(self.tree, "a.txt")],
                              [os.path.join(self.tree, "b.txt")]))
            self.assertEqual([e.path for e in (await sandbox.changes("sub")).all()], [])  # relative to the cwd
            with self.assertRaises(ValueError):
                await plain["default"].changes()  # its config marks nothing
            name = sandbox._mark_name
        finally:
            await ri.RelaydSandboxEnvironment.sample_cleanup("t", config, envs, False)
            await ri.RelaydSandboxEnvironment.sample_cleanup("t", config, plain, False)
        with Client(self.d.addr, self.d.token) as c:  # the sample's end freed its mark
            with self.assertRaises(ProtocolError):
                c.changes(name)


# --- the README's example

def readme_marks() -> Any:
    """The code block of clients/python/README.md's "## Marks" section and the block it prints."""
    import re

    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.find("\n## Marks")
    assert start >= 0, 'clients/python/README.md has no "## Marks" section'
    text = text[start + 1:]
    end = text.find("\n## ", 3)
    text = text[:end] if end >= 0 else text
    blocks = [re.sub(r"(?m)^    ", "", b.group(0)).strip("\n")
              for b in re.finditer(r"(?m)(?:^    .*\n|^\n(?=    ))+", text)]
    code = next(b for b in blocks if "from relayd_client import" in b)
    return code + "\n", blocks[blocks.index(code) + 1].splitlines()


class ReadmeMarksTest(RelaydTest):
    def test_readme_marks(self) -> None:
        import subprocess

        from relayd_fixture import subject_pythonpath

        code, want = readme_marks()
        self.assertLess(len(code.splitlines()) + len(want), 25, "the README's marks example must stay short")
        d = self.relayd()
        with tempfile.TemporaryDirectory() as cwd:
            os.mkdir(os.path.join(cwd, ".run"))
            Path(cwd, ".run", "token").write_text(d.token + "\n")
            script = os.path.join(cwd, "marks.py")
            Path(script).write_text(code.replace('"127.0.0.1:7700"', repr(d.addr)))
            env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYD_")}
            env["PYTHONPATH"] = subject_pythonpath()
            p = subprocess.run([sys.executable, "-X", "dev", "-W", "error", script], cwd=cwd, env=env,
                               capture_output=True, text=True, timeout=60)
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        self.assertEqual(p.stdout.splitlines(), want)


if __name__ == "__main__":
    unittest.main()
