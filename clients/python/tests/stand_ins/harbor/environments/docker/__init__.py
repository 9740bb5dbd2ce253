"""Stand-in for harbor.environments.docker (see the harbor package's doc)."""
from pathlib import Path

COMPOSE_BASE_PATH = Path(__file__).parent / "docker-compose-base.yaml"
COMPOSE_BUILD_PATH = Path(__file__).parent / "docker-compose-build.yaml"
