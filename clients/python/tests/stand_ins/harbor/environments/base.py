"""Stand-in for harbor.environments.base (see the harbor package's doc):
ExecResult and BaseEnvironment with Harbor's signatures."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Dict, Optional, Union


class ExecResult:
    """Harbor's ExecResult (a pydantic model there): stdout, stderr, return_code."""

    def __init__(self, *, stdout: Optional[str] = None, stderr: Optional[str] = None, return_code: int) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.return_code = return_code

    def __repr__(self) -> str:
        return f"ExecResult(stdout={self.stdout!r}, stderr={self.stderr!r}, return_code={self.return_code})"


class BaseEnvironment(ABC):
    def __init__(self, environment_dir: Path, environment_name: str, session_id: str, trial_paths: Any,
                 task_env_config: Any, logger: Optional[logging.Logger] = None,
                 persistent_env: Optional[Dict[str, str]] = None, *args: Any, **kwargs: Any) -> None:
        self.environment_dir = environment_dir
        self.environment_name = environment_name
        self.session_id = session_id
        self.trial_paths = trial_paths
        self.task_env_config = task_env_config
        self.default_user: Union[str, int, None] = None
        self._persistent_env: Dict[str, str] = persistent_env or {}
        self.logger = (logger or logging.getLogger("harbor")).getChild(__name__)

    def _resolve_user(self, user: Union[str, int, None]) -> Union[str, int, None]:
        return user if user is not None else self.default_user

    def _merge_env(self, env: Optional[Dict[str, str]]) -> Optional[Dict[str, str]]:
        if not self._persistent_env and not env:
            return None
        return {**self._persistent_env, **(env or {})} or None

    @abstractmethod
    async def start(self, force_build: bool) -> None: ...

    @abstractmethod
    async def stop(self, delete: bool) -> None: ...

    @abstractmethod
    async def upload_file(self, source_path: Union[Path, str], target_path: str) -> None: ...

    @abstractmethod
    async def upload_dir(self, source_dir: Union[Path, str], target_dir: str) -> None: ...

    @abstractmethod
    async def download_file(self, source_path: str, target_path: Union[Path, str]) -> None: ...

    @abstractmethod
    async def download_dir(self, source_dir: str, target_dir: Union[Path, str]) -> None: ...

    @abstractmethod
    async def exec(self, command: str, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                   timeout_sec: Optional[int] = None, user: Union[str, int, None] = None) -> ExecResult: ...
