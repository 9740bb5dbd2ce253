"""Test modules that need an optional module skip, naming it, where it is
missing (the suite run with another Python than Debian's, without
python3-anyio or python3-trio), rather than fail to import. The missing
module is made so by a directory first on the path whose module of that
name raises ImportError, as a missing one does."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest

from relayd_fixture import REPO

TESTS = os.path.join(REPO, "clients", "python", "tests")
SRC = os.path.join(REPO, "clients", "python", "src")


def run_without(module: str, *test: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as hide:
        with open(os.path.join(hide, module + ".py"), "w") as f:
            f.write(f"raise ModuleNotFoundError({'No module named ' + repr(module)!r}, name={module!r})\n")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([hide, SRC, TESTS]))
        return subprocess.run([sys.executable, "-m", "unittest", *test, "-v"], cwd=TESTS, env=env,
                              capture_output=True, text=True, timeout=300)


class OptionalModules(unittest.TestCase):
    def test_inspect_without_anyio_skips(self) -> None:
        # As make pytest runs the suite: discovery, which skips a module
        # that raises SkipTest as it is imported.
        p = run_without("anyio", "discover", "-s", TESTS, "-p", "test_inspect.py")
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertIn("skipped", p.stderr)
        self.assertIn("needs anyio", p.stderr)
        self.assertNotIn("Failed to import", p.stderr)

    def test_trio_adapter_without_trio_skips(self) -> None:
        p = run_without("trio", "test_inspect.TrioAdapter")
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertIn("TrioAdapter needs trio", p.stderr)


if __name__ == "__main__":
    unittest.main()
