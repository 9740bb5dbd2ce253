"""Stand-in for harbor.environments.docker.docker (see the harbor package's
doc): DockerEnvironment's container management, recorded instead of run.
Its compose commands are appended to ``compose_calls``; ``docker compose ps
-q main`` answers $RELAYD_HARBOR_CONTAINER. Its own exec and file methods
(docker compose exec and cp in Harbor) raise: the adapter must replace them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional, Union

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.docker import COMPOSE_BASE_PATH, COMPOSE_BUILD_PATH

import os


class DockerEnvironment(BaseEnvironment):
    def __init__(self, environment_dir: Path, environment_name: str, session_id: str, trial_paths: Any,
                 task_env_config: Any, keep_containers: bool = False, *args: Any, **kwargs: Any) -> None:
        super().__init__(environment_dir=environment_dir, environment_name=environment_name, session_id=session_id,
                         trial_paths=trial_paths, task_env_config=task_env_config, **kwargs)
        self._keep_containers = keep_containers
        self._compose_task_env: dict = {}
        self.compose_calls: List[List[str]] = []

    @property
    def _docker_compose_paths(self) -> List[Path]:
        return [COMPOSE_BASE_PATH, COMPOSE_BUILD_PATH]

    async def _run_docker_compose_command(self, command: List[str], check: bool = True,
                                          timeout_sec: Optional[int] = None) -> ExecResult:
        self.compose_calls.append(list(command))
        if command == ["ps", "-q", "main"]:
            return ExecResult(stdout=os.environ.get("RELAYD_HARBOR_CONTAINER", "") + "\n", return_code=0)
        return ExecResult(stdout="", return_code=0)

    async def start(self, force_build: bool) -> None:
        await self._run_docker_compose_command(["up", "--detach", "--wait"])
        # As Harbor's start does next: the log directories made writable, through exec.
        await self.exec("chmod 777 /logs/agent /logs/verifier")

    async def stop(self, delete: bool) -> None:
        await self._run_docker_compose_command(["down"])

    async def exec(self, command: str, cwd: Optional[str] = None, env: Optional[dict] = None,
                   timeout_sec: Optional[int] = None, user: Union[str, int, None] = None) -> ExecResult:
        raise AssertionError("stand-in DockerEnvironment.exec (docker compose exec) called: not replaced")

    async def upload_file(self, source_path: Union[Path, str], target_path: str) -> None:
        raise AssertionError("stand-in DockerEnvironment.upload_file (docker compose cp) called: not replaced")

    async def upload_dir(self, source_dir: Union[Path, str], target_dir: str) -> None:
        raise AssertionError("stand-in DockerEnvironment.upload_dir called: not replaced")

    async def download_file(self, source_path: str, target_path: Union[Path, str]) -> None:
        raise AssertionError("stand-in DockerEnvironment.download_file called: not replaced")

    async def download_dir(self, source_dir: str, target_dir: Union[Path, str]) -> None:
        raise AssertionError("stand-in DockerEnvironment.download_dir called: not replaced")
