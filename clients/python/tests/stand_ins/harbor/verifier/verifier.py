"""Stand-in for harbor.verifier.verifier (see the harbor package's doc):
the calls Harbor's Verifier.verify makes on the environment, in order, for
a Linux task in a mounted environment (Docker): each test source directory
uploaded to the tests directory (``upload_dir``; a step of a multi-step
task uploads the shared tests, then its own), ``chmod +x`` of a ``.sh``
test as root, and the test run as the environment's default user (the
trial sets it to the verifier's user) with its output in the verifier's
directory. An upload that fails raises AddTestsDirError from the
environment's error, as Harbor's does ("Failed to add tests directory to
environment."; a Docker environment's is docker compose cp's
RuntimeError). Harbor takes the directories from the task and
EnvironmentPaths (/tests, /logs/verifier); they are arguments here, so
that a test can point them at its own directories."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Dict, List, Optional, Union


class AddTestsDirError(Exception):
    pass


class Verifier:
    def __init__(self, environment: Any, test_source_dirs: List[Union[Path, str]], *, tests_dir: str = "/tests",
                 verifier_dir: str = "/logs/verifier", test_script: str = "test.sh",
                 env: Optional[Dict[str, str]] = None) -> None:
        self.environment = environment
        self.test_source_dirs = list(test_source_dirs)
        self.tests_dir = tests_dir
        self.verifier_dir = verifier_dir
        self.test_script = test_script
        self.env = env

    async def verify(self) -> Any:
        try:
            for source_dir in self.test_source_dirs:
                await self.environment.upload_dir(source_dir=source_dir, target_dir=self.tests_dir)
        except Exception as e:
            raise AddTestsDirError("Failed to add tests directory to environment.") from e
        script = f"{self.tests_dir}/{self.test_script}"
        if script.endswith(".sh"):
            await self.environment.exec(command=f"chmod +x {shlex.quote(script)}", user="root")
        stdout = f"{self.verifier_dir}/test-stdout.txt"
        return await self.environment.exec(command=f"({shlex.quote(script)}) > {shlex.quote(stdout)} 2>&1",
                                           env=self.env)
