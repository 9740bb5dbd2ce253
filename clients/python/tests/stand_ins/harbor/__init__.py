"""A stand-in for Harbor (github.com/laude-institute/harbor), written here
for relayd_client.harbor's tests, since Harbor cannot be installed on this
project's machines (its dependencies are not in the archives they reach).

It mirrors only what the adapter touches, with the signatures of Harbor's
main branch as of December 2026 (read at the fork LegoX/harbor, commit
73fd120e): src/harbor/environments/base.py (ExecResult, BaseEnvironment:
its constructor, default_user, _resolve_user, _merge_env, the abstract
methods), src/harbor/environments/docker/docker.py (DockerEnvironment's
constructor, _docker_compose_paths, _run_docker_compose_command, start,
stop) and src/harbor/environments/factory.py
(EnvironmentFactory.create_environment_from_import_path). No code of
Harbor's is copied; pydantic models are plain classes here."""
