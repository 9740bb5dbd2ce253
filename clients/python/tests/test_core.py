"""The clients' sans-I/O core (_wire, _files, _dirs, _ops) imports neither
client: Client and AsyncClient drive it, never the other way round
(issue 43: _dirs once imported both while both imported it)."""

from __future__ import annotations

import ast
import os
import unittest
from typing import Set

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "relayd_client")
CORE = ("_wire", "_files", "_dirs", "_ops")
CLIENTS = {"client", "aio"}


def imported(module: str) -> Set[str]:
    """The relayd_client modules module imports, TYPE_CHECKING blocks included."""
    with open(os.path.join(SRC, module + ".py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                names.add(node.module.split(".")[0])
            else:
                names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("relayd_client."):
            names.add(node.module.split(".")[1])
    return names


class CoreTest(unittest.TestCase):
    def test_core_imports_no_client(self) -> None:
        for m in CORE:
            with self.subTest(module=m):
                self.assertEqual(imported(m) & CLIENTS, set())


if __name__ == "__main__":
    unittest.main()
