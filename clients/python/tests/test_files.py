"""Protocol 4.6 files against the real relayd: upload_file, download_file
and download_file_to, binary-safe, with mode and parents, and the errors;
each test for Client and AsyncClient (CLIENTS)."""

from __future__ import annotations

import hashlib
import io
import os
import unittest

from relayd_client import BadRequestError, DirectoryError, NotFoundError
from relayd_fixture import CLIENTS, RelaydTest

# Every byte value, NULs and newlines included, over several chunks.
DATA = bytes(range(256)) * 4099 + b"\x00tail\n"


class FilesTest(RelaydTest):
    def test_upload_download_round_trip(self) -> None:
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                d = self.relayd()
                with connect(d) as c:
                    info = c.upload_file("sub/dir/blob.bin", DATA, mode=0o640, parents=True)
                    target = os.path.join(d.workspace, "sub/dir/blob.bin")
                    self.assertEqual((info.path, info.bytes), (target, len(DATA)))
                    with open(target, "rb") as f:
                        self.assertEqual(f.read(), DATA)
                    self.assertEqual(os.stat(target).st_mode & 0o777, 0o640)
                    self.assertEqual(c.download_file("sub/dir/blob.bin"), DATA)
                    # From and to file objects, chunk by chunk.
                    c.upload_file(target, io.BytesIO(DATA[:1000]))
                    out = io.BytesIO()
                    got = c.download_file_to(target, out)
                    self.assertEqual((out.getvalue(), got.bytes, got.sha256), (DATA[:1000], 1000, hashlib.sha256(DATA[:1000]).hexdigest()))
                    self.assertEqual(c.download_file(target), DATA[:1000])
                    # An empty file.
                    c.upload_file("empty", b"")
                    self.assertEqual(c.download_file("empty"), b"")
                    # Errors say which, and the connection serves on.
                    with self.assertRaises(NotFoundError):
                        c.upload_file("no/such/dir/f", b"x")
                    with self.assertRaises(NotFoundError):
                        c.download_file("nothing-here")
                    with self.assertRaisesRegex(BadRequestError, "is a directory"):
                        c.download_file("sub")
                    self.assertEqual(c.execute("true").exit_code, 0)
                self.assertEqual(d.stop(), 0)

    def test_bodies(self) -> None:
        # With --max-line-bytes at 4096 a base64 chunk of 256 KiB cannot
        # pass: only raw bodies (protocol 4.6, "Bulk bodies") move these
        # files, from bytes and from a real file.
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                d = self.relayd("--max-line-bytes", "4096")
                big = os.path.join(d.dir, "big.bin")
                with open(big, "wb") as f:
                    f.write(DATA * 3)
                sizes = [0, 1, 256 << 10, (256 << 10) + 1, len(DATA)]
                with connect(d) as c:
                    for n in sizes:
                        info = c.upload_file(f"f{n}", DATA[:n])
                        self.assertEqual((info.bytes, info.sha256), (n, hashlib.sha256(DATA[:n]).hexdigest()))
                        self.assertEqual(c.download_file(f"f{n}"), DATA[:n])
                    with open(big, "rb") as f:
                        c.upload_file("big", f)
                    out = io.BytesIO()
                    self.assertEqual(c.download_file_to("big", out).bytes, 3 * len(DATA))
                    self.assertEqual(out.getvalue(), DATA * 3)
                    self.assertEqual(c.download_file("big"), DATA * 3)
                    with self.assertRaises(NotFoundError):
                        c.upload_file("no/such/dir/f", DATA)  # its body dropped: the stream stays in step
                    self.assertEqual(c.execute("true").exit_code, 0)
                self.assertEqual(d.stop(), 0)

    def test_dirs_without_tar(self) -> None:
        # A relayd that lists "tree" packs and unpacks directories itself:
        # no tar, sh or mkdir on its PATH (protocol 4.6, "Trees").
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                d = self.relayd(env={"PATH": "/nonexistent"})
                src = os.path.join(d.dir, "src")
                os.makedirs(os.path.join(src, "a", "empty"))
                with open(os.path.join(src, "a", "blob.bin"), "wb") as f:
                    f.write(DATA)
                os.symlink("a/blob.bin", os.path.join(src, "link"))
                with connect(d) as c:
                    c.upload_dir(src, "up")
                    with open(os.path.join(d.workspace, "up", "a", "blob.bin"), "rb") as f:
                        self.assertEqual(f.read(), DATA)
                    self.assertEqual(os.readlink(os.path.join(d.workspace, "up", "link")), "a/blob.bin")
                    back = os.path.join(d.dir, "back")
                    c.download_dir("up", back)
                    with open(os.path.join(back, "link"), "rb") as f:
                        self.assertEqual(f.read(), DATA)
                    with open(os.path.join(back, "a", "blob.bin"), "rb") as f:
                        self.assertEqual(f.read(), DATA)
                    self.assertTrue(os.path.isdir(os.path.join(back, "a", "empty")))
                self.assertEqual(d.stop(), 0)

    def test_upload_download_dir(self) -> None:
        # A tree with binary files, an executable, an empty directory and a
        # link inside it goes there and back; files are the user's.
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                d = self.relayd()
                src = os.path.join(d.dir, "src")
                os.makedirs(os.path.join(src, "a", "b"))
                os.makedirs(os.path.join(src, "empty"))
                with open(os.path.join(src, "a", "b", "blob.bin"), "wb") as f:
                    f.write(DATA)
                with open(os.path.join(src, "run.sh"), "w") as f:
                    f.write("#!/bin/sh\necho ran\n")
                os.chmod(os.path.join(src, "run.sh"), 0o755)
                os.symlink("a/b/blob.bin", os.path.join(src, "link"))
                os.chmod(d.dir, 0o755)  # nobody enters the workspace and writes there
                os.chmod(d.workspace, 0o777)
                with connect(d) as c:
                    c.upload_dir(src, "tree/copy", user="nobody")
                    there = os.path.join(d.workspace, "tree", "copy")
                    self.assertEqual(c.execute(os.path.join(there, "run.sh")).stdout, "ran\n")
                    self.assertEqual(os.stat(os.path.join(there, "a", "b", "blob.bin")).st_uid, 65534)
                    back = os.path.join(d.dir, "back")
                    c.download_dir("tree/copy", back)
                    self.assertEqual(sorted(os.listdir(back)), ["a", "empty", "link", "run.sh"])
                    with open(os.path.join(back, "link"), "rb") as f:
                        self.assertEqual(f.read(), DATA)
                    self.assertTrue(os.access(os.path.join(back, "run.sh"), os.X_OK))
                    self.assertTrue(os.path.isdir(os.path.join(back, "empty")))
                    # Nothing of the transfers is left on either side.
                    self.assertEqual(sorted(os.listdir(there)), ["a", "empty", "link", "run.sh"])
                    with self.assertRaises(DirectoryError):
                        c.download_dir("no/such/dir", os.path.join(d.dir, "none"))


class Zeros:
    """A binary file object of n zero bytes that counts what was read."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        k = min(size, self.left)
        self.left -= k
        self.read_bytes += k
        return bytes(k)


class RefusedUploadTest(RelaydTest):
    def test_refused_upload_stops_sending(self) -> None:
        for name, connect in CLIENTS:
            with self.subTest(client=name):
                d = self.relayd("--max-file-bytes", "1MiB")
                with connect(d) as c:
                    src = Zeros(1 << 30)
                    with self.assertRaisesRegex(BadRequestError, "--max-file-bytes"):
                        c.upload_file("big", src)
                    self.assertLess(src.read_bytes, 256 << 20)  # generous: the reply races the sending
                    src = Zeros(1 << 30)
                    with self.assertRaises(NotFoundError):
                        c.upload_file("no/such/dir/big", src)
                    self.assertLess(src.read_bytes, 256 << 20)  # generous: the reply races the sending
                    self.assertEqual(c.upload_file("small", b"ok").bytes, 2)
                    self.assertEqual(os.listdir(d.workspace), ["small"])
                self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    unittest.main()
