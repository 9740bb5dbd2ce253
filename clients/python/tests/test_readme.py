"""The README's Python controller session, run as printed against a real
relayd, prints what the README says it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from typing import List, Tuple

from relayd_fixture import REPO, RelaydTest, subject_pythonpath


def readme_session() -> Tuple[str, List[str]]:
    """The code block of README.md's "### Python" section under
    "## Controllers", and the block it prints."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.find("\n## Controllers\n")
    assert start >= 0, 'README.md has no "## Controllers" section'
    text = text[start + 1:]
    end = text.find("\n## ", 3)
    text = text[:end] if end >= 0 else text
    py = text.find("\n### Python\n")
    assert py >= 0, 'README.md\'s "## Controllers" has no "### Python" subsection'
    text = text[py + 1:]
    end = text.find("\n### ", 3)
    text = text[:end] if end >= 0 else text
    # Blocks: runs of lines indented by four spaces (blank lines inside kept).
    blocks = [re.sub(r"(?m)^    ", "", b.group(0)).strip("\n")
              for b in re.finditer(r"(?m)(?:^    .*\n|^\n(?=    ))+", text)]
    code = next(b for b in blocks if "from relayd_client import" in b)
    output = blocks[blocks.index(code) + 1]
    return code + "\n", output.splitlines()


class ReadmeTest(RelaydTest):
    def test_python_session(self) -> None:
        code, want = readme_session()
        self.assertLess(len(code.splitlines()) + len(want), 20, "the README's Python session must stay under 20 lines")
        self.assertIn('"127.0.0.1:7700"', code)
        d = self.relayd()
        with tempfile.TemporaryDirectory() as cwd:
            # As make run leaves it: the token in .run/token.
            os.mkdir(os.path.join(cwd, ".run"))
            with open(os.path.join(cwd, ".run", "token"), "w") as f:
                f.write(d.token + "\n")
            script = os.path.join(cwd, "session.py")
            with open(script, "w") as f:
                f.write(code.replace('"127.0.0.1:7700"', repr(d.addr)))
            env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYD_")}
            env["PYTHONPATH"] = subject_pythonpath()
            p = subprocess.run([sys.executable, "-X", "dev", "-W", "error", script], cwd=cwd, env=env,
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        self.assertEqual(p.stdout.splitlines(), want)
        self.assertEqual(d.stop(), 0)


def readme_examples() -> List[Tuple[str, List[str]]]:
    """Every ``python`` block of clients/python/README.md's "## Examples"
    section, with the ``text`` block that follows it (what it prints)."""
    with open(os.path.join(REPO, "clients", "python", "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.find("\n## Examples\n")
    assert start >= 0, 'clients/python/README.md has no "## Examples" section'
    text = text[start + 1:]
    end = text.find("\n## ", 3)
    text = text[:end] if end >= 0 else text
    fences = re.findall(r"(?ms)^```(\w*)\n(.*?)^```$", text)
    out = []
    for i, (lang, body) in enumerate(fences):
        if lang != "python":
            continue
        assert i + 1 < len(fences) and fences[i + 1][0] == "text", \
            f"example {len(out) + 1} of clients/python/README.md has no text block after it"
        out.append((body, fences[i + 1][1].splitlines()))
    return out


class ReadmeExamplesTest(RelaydTest):
    """clients/python/README.md's examples, each run as printed (from a
    directory whose .run/token is the test relayd's, as make run leaves
    it, at that relayd's address) and compared with what it says it
    prints."""

    def test_examples(self) -> None:
        examples = readme_examples()
        self.assertGreaterEqual(len(examples), 4)
        d = self.relayd()
        for n, (code, want) in enumerate(examples, 1):
            with self.subTest(example=n), tempfile.TemporaryDirectory() as cwd:
                self.assertIn('"127.0.0.1:7700"', code)
                os.mkdir(os.path.join(cwd, ".run"))
                with open(os.path.join(cwd, ".run", "token"), "w") as f:
                    f.write(d.token + "\n")
                script = os.path.join(cwd, "example.py")
                with open(script, "w") as f:
                    f.write(code.replace('"127.0.0.1:7700"', repr(d.addr)))
                env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYD_")}
                env["PYTHONPATH"] = subject_pythonpath()
                p = subprocess.run([sys.executable, "-X", "dev", "-W", "error", script], cwd=cwd, env=env,
                                   capture_output=True, text=True, timeout=120)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(p.stderr, "")
                self.assertEqual(p.stdout.splitlines(), want)
        self.assertEqual(d.stop(), 0)
