"""Directories and symbolic links (protocol 4.6, "Trees"): upload_dir and
download_dir with links="keep" keep a virtual environment's links as they
are, whatever their target, as docker cp does (issue 41); without it a
link that leads out is refused; and the local side never writes through
a link, one of the archive's or one already in the local directory."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
import tempfile
import unittest
from typing import List, Tuple

from relayd_client import AsyncClient, Client, DirectoryError
from relayd_client import _dirs
from relayd_fixture import RelaydTest

LINKS = {
    "venv/bin/python3": "/usr/bin/python3",
    "venv/bin/python": "python3",
    "venv/lib64": "lib",
    "venv/out": "../../outside",
}


def venv(root: str) -> str:
    src = os.path.join(root, "src")
    os.makedirs(os.path.join(src, "venv", "bin"))
    os.makedirs(os.path.join(src, "venv", "lib", "site"))
    with open(os.path.join(src, "venv", "lib", "site", "m.py"), "w") as f:
        f.write("x = 1\n")
    for name, to in LINKS.items():
        os.symlink(to, os.path.join(src, name))
    return src


class DirLinksTest(RelaydTest):
    def same_links(self, where: str) -> None:
        for name, to in LINKS.items():
            self.assertEqual(os.readlink(os.path.join(where, name)), to, name)
        with open(os.path.join(where, "venv", "lib64", "site", "m.py")) as f:
            self.assertEqual(f.read(), "x = 1\n")

    def test_keep_round_trip(self) -> None:
        d = self.relayd()
        src = venv(d.dir)
        with Client(d.addr, d.token) as c:
            c.upload_dir(src, "up", links="keep")
            self.same_links(os.path.join(d.workspace, "up"))
            back = os.path.join(d.dir, "back")
            c.download_dir("up", back, links="keep")
            self.same_links(back)
            # Without it, relayd refuses the links that lead out, and so
            # does the local side.
            with self.assertRaisesRegex(DirectoryError, "venv/bin/python3"):
                c.upload_dir(src, "strict")
            with self.assertRaises(DirectoryError):
                c.download_dir("up", os.path.join(d.dir, "strict"))
            with self.assertRaises(ValueError):
                c.upload_dir(src, "x", links="follow")
            with self.assertRaises(ValueError):
                c.download_dir("up", os.path.join(d.dir, "y"), links="follow")

        async def run() -> None:
            async with AsyncClient(d.addr, d.token) as a:
                await a.upload_dir(src, "aup", links="keep")
                self.same_links(os.path.join(d.workspace, "aup"))
                back = os.path.join(d.dir, "aback")
                await a.download_dir("aup", back, links="keep")
                self.same_links(back)
                with self.assertRaises(ValueError):
                    await a.download_dir("aup", back, links="all")

        asyncio.run(run())
        self.assertEqual(d.stop(), 0)

    def test_never_through_a_link_here(self) -> None:
        # A link already in the local directory, to outside or to a
        # directory of its own: nothing is written through it.
        d = self.relayd()
        src = venv(d.dir)
        with Client(d.addr, d.token) as c:
            c.upload_dir(src, "up", links="keep")
            for links in ("keep", None):
                parent = tempfile.mkdtemp(dir=d.dir)
                outside = os.path.join(parent, "outside")
                os.mkdir(outside)
                back = os.path.join(parent, "back")
                os.mkdir(back)
                os.symlink(outside, os.path.join(back, "venv"))
                with self.assertRaises(DirectoryError):
                    c.download_dir("up", back, links=links)
                self.assertEqual(os.listdir(outside), [])
                os.unlink(os.path.join(back, "venv"))
                os.mkdir(os.path.join(back, "real"))
                os.symlink("real", os.path.join(back, "venv"))
                with self.assertRaises(DirectoryError):
                    c.download_dir("up", back, links=links)
                self.assertEqual(os.listdir(os.path.join(back, "real")), [])
        self.assertEqual(d.stop(), 0)


def archive(members: List[Tuple[str, str, str]]) -> io.BytesIO:
    """A tar of (name, kind, link or data): kind "d", "f", "l" (symbolic) or "h" (hard)."""
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w") as t:
        for name, kind, x in members:
            m = tarfile.TarInfo(name)
            if kind == "d":
                m.type, m.mode = tarfile.DIRTYPE, 0o755
                t.addfile(m)
            elif kind == "f":
                m.size, m.mode = len(x), 0o644
                t.addfile(m, io.BytesIO(x.encode()))
            else:
                m.type, m.linkname = (tarfile.SYMTYPE if kind == "l" else tarfile.LNKTYPE), x
                t.addfile(m)
    b.seek(0)
    return b


class ExtractTest(unittest.TestCase):
    """The local side on archives a test makes: what relayd would never pack."""

    def test_member_through_an_earlier_link(self) -> None:
        for keep in (True, False):
            for link, member in (("l", "l/f"), ("d/l", "d/l/sub/f")):
                with tempfile.TemporaryDirectory() as parent:
                    dest = os.path.join(parent, "x")
                    os.makedirs(os.path.join(dest, "real"))
                    target = parent if keep else ("real" if link == "l" else "../real")
                    f = archive([("d", "d", ""), (link, "l", target), (member, "f", "x")])
                    with self.assertRaisesRegex(DirectoryError, member):
                        _dirs._unpack(f, dest, keep)
                    self.assertEqual(os.listdir(os.path.join(dest, "real")), [])
                    self.assertEqual(os.listdir(parent), ["x"])

    def test_chain_and_hard_link_to_a_link(self) -> None:
        with tempfile.TemporaryDirectory() as parent:
            dest = os.path.join(parent, "x")
            os.mkdir(dest)
            f = archive([("d", "d", ""), ("d/l", "l", ".."), ("d/l2", "l", "l/..")])
            with self.assertRaisesRegex(DirectoryError, "d/l2"):
                _dirs._unpack(f, dest)
            self.assertFalse(os.path.lexists(os.path.join(dest, "d", "l2")))
        with tempfile.TemporaryDirectory() as parent:
            dest = os.path.join(parent, "x")
            os.mkdir(dest)
            f = archive([("a", "d", ""), ("a/b", "d", ""), ("a/b/r", "f", "x"), ("a/b/r", "l", ".."), ("hr", "h", "a/b/r")])
            with self.assertRaisesRegex(DirectoryError, "hr"):
                _dirs._unpack(f, dest)
            self.assertFalse(os.path.lexists(os.path.join(dest, "hr")))

    def test_keep_keeps_links_out(self) -> None:
        with tempfile.TemporaryDirectory() as parent:
            dest = os.path.join(parent, "x")
            os.mkdir(dest)
            f = archive([("bin", "d", ""), ("bin/python3", "l", "/usr/bin/python3"), ("out", "l", "../.."), ("bin/f", "f", "y")])
            _dirs._unpack(f, dest, True)
            self.assertEqual(os.readlink(os.path.join(dest, "bin", "python3")), "/usr/bin/python3")
            self.assertEqual(os.readlink(os.path.join(dest, "out")), "../..")
            with open(os.path.join(dest, "bin", "f")) as g:
                self.assertEqual(g.read(), "y")


if __name__ == "__main__":
    unittest.main()
