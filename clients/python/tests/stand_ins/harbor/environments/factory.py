"""Stand-in for harbor.environments.factory (see the harbor package's doc):
how Harbor loads an environment named by import path ('module.path:ClassName'),
with the trial's keywords and the --environment-kwarg ones."""

from __future__ import annotations

import importlib
from typing import Any


class EnvironmentFactory:
    @classmethod
    def create_environment_from_import_path(cls, import_path: str, **kwargs: Any) -> Any:
        if ":" not in import_path:
            raise ValueError("Import path must be in format 'module.path:ClassName'")
        module_path, class_name = import_path.split(":", 1)
        try:
            module = importlib.import_module(module_path)
        except ImportError as e:
            raise ValueError(f"Failed to import module '{module_path}': {e}") from e
        try:
            environment = getattr(module, class_name)
        except AttributeError as e:
            raise ValueError(f"Module '{module_path}' has no class '{class_name}'") from e
        return environment(**kwargs)
